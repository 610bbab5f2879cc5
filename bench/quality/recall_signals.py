"""Signals tried for multi-hop and open-domain questions (issue 19), measured against the engine's ranking.

Each dev conversation is stored once; every question's candidates and signals are then taken from the
engine itself (`retrieval.page_signals`), so a variant differs from the engine only by what it adds to the
fused score. Each added signal is z-scored against the whole space like the engine's own and weighed by
`w`; w is chosen leave-one-conversation-out (on two conversations, measured on the third), as for every
setting in docs/retrieval.md. Also printed: the engine's own three weights re-chosen leave-one-out
together, which shows how far three conversations can carry a tuned weight, and an upper bound of the
optional LLM rewrite (`memoryos/planning/query_rewrite.py`): the search words it would add taken from the gold answer.

    python -m bench.quality.recall_signals
"""

import itertools
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from bench.corpus import dev_conversations
from bench.quality.recall import LEAVE_ONE_OUT_K, held_out_markdown, leave_one_out, markdown_row
from memoryos.config import MemoryConfig
from memoryos.eval.harness import ingest_conversation
from memoryos.eval.locomo import LocomoConversation, LocomoQuestion
from memoryos.eval.metrics import PageKey, RecallReport, page_dia_ids, ranked_dia_ids
from memoryos.facade.memoryos import Memoryos
from memoryos.planning.lexical import query_terms
from memoryos.planning.retrieval import (
    PageSignals,
    _lexical_terms,
    dense_query_text,
    fused_scores,
    page_signals,
    ranked_by,
)
from memoryos.planning.speaker import Side, named_side
from memoryos.storage.records.sqlite.page_queries import quoted
from memoryos.types import Page

SIGNAL_WEIGHTS: tuple[float, ...] = (0.0, 0.15, 0.3, 0.5)
"""The weights leave-one-out chooses among for an added signal (0: the engine as it is)."""

PROXIMITY_TOKENS = 10
"""Two query words count as near within this many tokens (FTS5 `NEAR`); 5-30 were measured."""

RETUNE_GRID: tuple[float, ...] = (0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
"""Values each engine weight may take when the three are re-chosen (the dense weight stays 1)."""

_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|we|we're|we've|our|us)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\(image description:|\)")


@dataclass
class Asked:
    """One question with the engine's signals for it, and the added signals over the same pages."""

    question: LocomoQuestion
    signals: PageSignals
    added: dict[str, np.ndarray] = field(default_factory=dict)
    """signal name -> its z-score per page of `signals.needed`."""


@dataclass
class StoredConversation:
    conversation: LocomoConversation
    memory: Memoryos
    pages: dict[int, Page]
    index: dict[PageKey, list[str]]


Scorer = Callable[[Asked], np.ndarray]
"""The fused score of a question's pages (`signals.needed`), before the neighbour lift."""


def _engine_score(config: MemoryConfig) -> Scorer:
    return lambda asked: fused_scores(asked.signals, config)


def _report(
    stored: StoredConversation, asked: Sequence[Asked], score: Scorer, neighbour_weight: float
) -> RecallReport:
    rankings = []
    for one in asked:
        ranked = ranked_by(one.signals, score(one), neighbour_weight, LEAVE_ONE_OUT_K)
        rankings.append(ranked_dia_ids([stored.pages[s.page_id] for s in ranked], stored.index))
    return RecallReport.build([a.question for a in asked], rankings, ks=(LEAVE_ONE_OUT_K,))


def whole_space_z(scores: dict[int, float], page_ids: Sequence[int]) -> dict[int, float]:
    """Scores z-scored over every page of the space; pages without a score count 0."""
    values = np.array([scores.get(pid, 0.0) for pid in page_ids])
    std = float(values.std()) or 1.0
    return {pid: (value - float(values.mean())) / std for pid, value in zip(page_ids, values, strict=True)}


def _proximity(stored: StoredConversation, query: str) -> dict[int, float]:
    """BM25 of the pages where two of the query's words stand within `PROXIMITY_TOKENS` of each other."""
    terms = _lexical_terms(stored.memory.space, query)
    pairs = [
        f"NEAR({quoted(a)} {quoted(b)}, {PROXIMITY_TOKENS})" for a, b in itertools.combinations(terms, 2)
    ]
    if not pairs:
        return {}
    return dict(stored.memory.space.store.match_search(" OR ".join(pairs), len(stored.pages)))


def first_person(pages: dict[int, Page], side: Side | None) -> dict[int, float]:
    """1 where the named side speaks of itself (I, my, we...) and is not a question; nothing when no
    side is named. Evidence of multi-hop questions is what the named person said of themselves."""
    if side is None:
        return {}
    return {pid: float(_speaks_of_itself(getattr(page, side))) for pid, page in pages.items()}


def _speaks_of_itself(text: str) -> bool:
    return bool(_FIRST_PERSON.search(text)) and not text.strip().endswith("?")


@dataclass
class Sentences:
    """Each sentence of each side of the space's pages, embedded once."""

    owners: list[tuple[int, Side]]
    vectors: np.ndarray

    @classmethod
    def of(cls, stored: StoredConversation) -> "Sentences":
        texts, owners = [], []
        for pid, page in stored.pages.items():
            for side in ("user_input", "agent_response"):
                for sentence in _SENTENCE_END.split(getattr(page, side)):
                    if sentence and len(query_terms(sentence)) >= 2:
                        texts.append(sentence.strip())
                        owners.append((pid, side))
        return cls(owners, np.asarray(stored.memory.embedder.encode(texts)))

    def best(self, query_vector: np.ndarray, side: Side | None) -> dict[int, float]:
        """Per page, the cosine of its sentence nearest the query, on the named side (either side when
        none is named): a page's vector mixes two speakers and several subjects."""
        best: dict[int, float] = {}
        for (pid, owner), cosine in zip(self.owners, (self.vectors @ query_vector).tolist(), strict=True):
            if (side is None or owner == side) and cosine > best.get(pid, -1.0):
                best[pid] = cosine
        return best


def _ask(stored: StoredConversation, sentences: Sentences, question: LocomoQuestion) -> Asked:
    space = stored.memory.space
    query = question.question
    vector = stored.memory.embedder.encode([dense_query_text(space, query)], is_query=True)[0]
    signals = page_signals(space, query, vector, LEAVE_ONE_OUT_K)
    assert signals is not None
    side = named_side(space, query)
    page_ids = sorted(stored.pages)
    added = {
        "proximity": _proximity(stored, query),
        "first person": first_person(stored.pages, side),
        "nearest sentence": sentences.best(vector, side),
    }
    asked = Asked(question, signals)
    for name, scores in added.items():
        z = whole_space_z(scores, page_ids)
        asked.added[name] = np.array([z[pid] for pid in signals.needed])
    return asked


def _rewrite_bound(stored: StoredConversation, question: LocomoQuestion) -> Asked:
    """The question searched as the LLM rewrite would search it, its added words being the gold answer."""
    space = stored.memory.space
    search = f"{question.question} {question.answer}" if question.answer else question.question
    vector = stored.memory.embedder.encode([dense_query_text(space, search)], is_query=True)[0]
    signals = page_signals(space, search, vector, LEAVE_ONE_OUT_K)
    assert signals is not None
    return Asked(question, signals)


@contextmanager
def stored_dev_conversations(config: MemoryConfig) -> Iterator[list[StoredConversation]]:
    """Each dev conversation stored in its own space under a scratch directory, erased after."""
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        stored = []
        for conversation in dev_conversations():
            memory = stack.enter_context(
                Memoryos.from_config(
                    conversation.sample_id, config.model_copy(update={"data_dir": Path(scratch)})
                )
            )
            ingest_conversation(memory, conversation)
            pages = memory.space.pages(list(range(1, memory.space.max_page_id() + 1)))
            stored.append(
                StoredConversation(
                    conversation, memory, {p.page_id: p for p in pages}, page_dia_ids(conversation.pairs)
                )
            )
        yield stored


def _mean(reports: Sequence[RecallReport]) -> float:
    return sum(r.overall[LEAVE_ONE_OUT_K] for r in reports) / len(reports)


Weights = tuple[float, float, float]
"""The engine's lexical, date and neighbour weights."""


def _retuned(
    stored: list[StoredConversation], asked: list[list[Asked]], config: MemoryConfig
) -> list[tuple[Weights, RecallReport]]:
    """Per conversation, the engine's lexical, date and neighbour weights re-chosen together on the
    other two by coordinate ascent over `RETUNE_GRID` from the defaults, and its report at them."""

    def report(weights: Weights, i: int) -> RecallReport:
        lexical, date, neighbour = weights
        tuned = config.model_copy(update={"lexical_weight": lexical, "date_weight": date})
        return _report(stored[i], asked[i], _engine_score(tuned), neighbour)

    held_out = []
    for held in range(len(stored)):
        train = [i for i in range(len(stored)) if i != held]
        weights: Weights = (config.lexical_weight, config.date_weight, config.neighbour_weight)
        best = _mean([report(weights, i) for i in train])
        improved = True
        while improved:
            improved = False
            for position, value in itertools.product(range(len(weights)), RETUNE_GRID):
                trial = cast(Weights, tuple(value if i == position else w for i, w in enumerate(weights)))
                score = _mean([report(trial, i) for i in train])
                if score > best + 1e-12:
                    weights, best, improved = trial, score, True
        held_out.append((weights, report(weights, held)))
    return held_out


def main() -> None:
    config = MemoryConfig()
    with stored_dev_conversations(config) as stored:
        sample_ids = [s.conversation.sample_id for s in stored]
        asked = []
        for s in stored:
            sentences = Sentences.of(s)
            asked.append([_ask(s, sentences, q) for q in s.conversation.qa if q.evidence_norm])
        engine = _engine_score(config)
        print(
            f"recall@{LEAVE_ONE_OUT_K}: categories pooled, then per conversation ({', '.join(sample_ids)}), mean"
        )
        print(
            markdown_row(
                "the engine",
                [_report(s, a, engine, config.neighbour_weight) for s, a in zip(stored, asked, strict=True)],
            )
        )
        for name in asked[0][0].added:
            by_weight = {
                w: [
                    _report(
                        s,
                        a,
                        lambda one, w=w, name=name: engine(one) + w * one.added[name],
                        config.neighbour_weight,
                    )
                    for s, a in zip(stored, asked, strict=True)
                ]
                for w in SIGNAL_WEIGHTS
            }
            print(f"\n{name}:")
            print(held_out_markdown(f"w · {name}", sample_ids, by_weight, leave_one_out(by_weight)))
        held_out = _retuned(stored, asked, config)
        print("\nthe engine's weights (lexical, date, neighbour) re-chosen leave-one-out:")
        chosen = [weights for weights, _ in held_out]
        print(markdown_row(f"held out, chosen {chosen}", [report for _, report in held_out]))
        bound = [
            _report(s, [_rewrite_bound(s, one.question) for one in a], engine, config.neighbour_weight)
            for s, a in zip(stored, asked, strict=True)
        ]
        print("\nupper bound of the LLM rewrite (the gold answer as its search words):")
        print(markdown_row("question + gold answer", bound))


if __name__ == "__main__":
    main()
