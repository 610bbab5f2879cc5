"""What a read loses when it answers before its pages have vectors (issue 35, reads under load).

A retrieve waits at most `max_vector_wait_s` (the API's `read_vector_wait_s`) for the vectors of the pages
stored before it; pages still without one are ranked by their words and date alone (a dense z-score of
0), as `retrieval.page_signals` ranks any page it finds no vector for. This measures the worst case of
that on the LoCoMo dev conversations: for each question, *its own evidence pages* are the ones without
vectors — the index and the store's vector lookup of the engine's ranking are shown the space without them — and
evidence recall@k is compared with the engine's on the same stored spaces. Also measured: the newest 4 and
64 pages of each conversation without vectors, for every question (a backlog as the service has one).

In the service the pages without vectors are the newest writes (the backlog of the last fraction of a
second), which are also returned whole in `short_term_memory`; evidence of a question is rarely all among
them. So this is a bound, not the expected loss; the share of reads that answered so is reported by
`python -m bench.serving.mixed_load` (`reads_without_vectors_share`).

    python -m bench.quality.recall_without_vectors
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from bench.quality.recall import LEAVE_ONE_OUT_K, markdown_row
from bench.quality.recall_signals import StoredConversation, stored_dev_conversations
from memoryos.config import MemoryConfig
from memoryos.eval.locomo import LocomoQuestion
from memoryos.eval.metrics import RecallReport, ranked_dia_ids
from memoryos.planning.retrieval import dense_query_text, rank_pages
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.vectors.vector_index import SearchResult

NEWEST = (4, 64)
"""Backlogs measured besides the worst case: one client's writes before its read (the mixed-load bench
writes 4), and a full embedding batch."""


class _IndexWithout:
    """The space's page index as it is while `missing` still wait for their vectors: never among hits."""

    def __init__(self, index: Any, missing: frozenset[int]) -> None:
        self._index = index
        self._missing = missing

    def count(self) -> int:
        return int(self._index.count()) - len(self._missing)

    def search(self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None) -> SearchResult:
        found = self._index.search(queries, k + len(self._missing), allowed_ids)
        ids, scores = np.full((len(queries), k), -1, dtype=np.int64), np.full((len(queries), k), -np.inf)
        for row in range(len(queries)):
            kept = [(i, s) for i, s in found.hits(row) if i not in self._missing][:k]
            ids[row, : len(kept)] = [i for i, _ in kept]
            scores[row, : len(kept)] = [s for _, s in kept]
        return SearchResult(ids, scores)


@contextlib.contextmanager
def without_vectors(space: MemorySpace, page_ids: Sequence[int]) -> Iterator[None]:
    """`space` ranked as if `page_ids` had no vector yet (restored after): out of its index, and out of
    what the store answers for vectors the index lacks (`retrieval.dense_scores`)."""
    missing = frozenset(page_ids)
    pages = space._pages  # the space's own index holder: retrieval reads `space.page_index` from it
    index, store = pages.index, space.store
    vectors_of = store.embedded_page_vectors

    def embedded_only(page_ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        return vectors_of([pid for pid in page_ids if pid not in missing], dim)

    pages.index = _IndexWithout(index, missing)  # type: ignore[assignment]
    store.embedded_page_vectors = embedded_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        pages.index = index
        del store.embedded_page_vectors  # the class's method again


def _evidence_pages(stored: StoredConversation, question: LocomoQuestion) -> list[int]:
    evidence = set(question.evidence_norm)
    return [
        pid
        for pid, page in stored.pages.items()
        if evidence & set(stored.index.get((page.user_input.strip(), page.agent_response.strip()), []))
    ]


Lacking = Callable[[StoredConversation, LocomoQuestion], list[int]]
"""The pages a question is asked without the vectors of."""


def _newest(count: int) -> Lacking:
    return lambda stored, _question: sorted(stored.pages)[-count:] if count else []


def _report(stored: StoredConversation, lacking: Lacking) -> RecallReport:
    space, memory = stored.memory.space, stored.memory
    questions = [q for q in stored.conversation.qa if q.evidence_norm]
    rankings = []
    for question in questions:
        vector = memory.embedder.encode([dense_query_text(space, question.question)], is_query=True)[0]
        with space.lock, without_vectors(space, lacking(stored, question)):
            ranked = rank_pages(space, question.question, vector, LEAVE_ONE_OUT_K)
        rankings.append(ranked_dia_ids([stored.pages[s.page_id] for s in ranked], stored.index))
    return RecallReport.build(questions, rankings, ks=(LEAVE_ONE_OUT_K,))


def main() -> None:
    with stored_dev_conversations(MemoryConfig()) as stored:
        names = ", ".join(s.conversation.sample_id for s in stored)
        print(f"evidence recall@{LEAVE_ONE_OUT_K}: categories pooled, then per conversation ({names}), mean")
        rows: list[tuple[str, Lacking]] = [("every page with its vector (the engine)", _newest(0))]
        rows += [(f"the newest {n} pages without vectors", _newest(n)) for n in NEWEST]
        rows.append(("the question's evidence without vectors (worst case)", _evidence_pages))
        for label, lacking in rows:
            print(markdown_row(label, [_report(s, lacking) for s in stored]))


if __name__ == "__main__":
    main()
