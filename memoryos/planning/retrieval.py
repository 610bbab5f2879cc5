"""Multi-tier retrieval: short-term pages, pages ranked over the whole space, facts and profile.

Pages are ranked over every tier (the reference first picked top segments and only then pages inside them,
which hid pages holding the evidence). The score fuses dense and BM25 evidence, each z-scored
against the whole space so neither scale dominates, adds a bonus to pages stored at a date the query names,
and lets the best neighbouring turn lift a page: an answer often sits one turn after the words of the
question. The query is embedded without the names found in most pages (`dense_query_text`), and a query
naming one side's speaker weighs that side's words most in BM25 (`speaker.py`).
docs/retrieval.md has the measurements.
Retrieval only reads; the facade records segment visits as a separate op.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.planning.lexical import query_terms
from memoryos.planning.speaker import (
    common_name_limit,
    query_names,
    side_asks,
    side_named,
    side_weights,
    without_names,
)
from memoryos.planning.temporal import date_proximity, julian_to_epoch_days, query_date_windows
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.records.base import FrequencyAsk, RetrievalBasis, needed_pages, ranking_candidates
from memoryos.storage.records.vector_blobs import from_blobs
from memoryos.types import KnowledgeKind, Page, RetrievedContext, RetrievedKnowledge, RetrievedPage
from memoryos.validation import format_unix_timestamp

LEXICAL_FETCH_FACTOR = 5
"""BM25 hits fetched per candidate slot: their scores also estimate the space-wide BM25 mean and spread."""


@dataclass(frozen=True)
class ScoredPage:
    page_id: int
    score: float


def _zscore(values: np.ndarray, mean: float, std: float) -> np.ndarray:
    return (values - mean) / (std if std > 1e-9 else 1.0)


def _lexical_terms(space: MemorySpace, query: str) -> list[str]:
    """The query's content words that fit `MemoryConfig.lexical_postings_budget`, rarest first, in query order.

    Counting stops past the budget, so each count is bounded too. A word alone over the budget is left
    out: in so many pages it separates little, and dense similarity still ranks them.
    """
    terms = query_terms(query)
    budget = space.config.lexical_postings_budget
    (counts,) = space.store.document_frequencies([FrequencyAsk(terms, at_most=budget + 1)])
    return _within_budget(terms, counts, budget)


def _within_budget(terms: list[str], counts: list[int], budget: int) -> list[str]:
    """Of `terms` with their page counts, the rarest whose pages add up to at most `budget`, in query order."""
    counted = sorted(zip(counts, range(len(terms)), terms, strict=True))
    kept: set[str] = set()
    spent = 0
    for pages, _, term in counted:
        if spent + pages > budget:
            break
        kept.add(term)
        spent += pages
    return [term for term in terms if term in kept]


def dense_query_text(space: MemorySpace, query: str) -> str:
    """The text to embed for `query`: without the names (capitalized words) found in more than
    `dense_name_max_df_fraction` of the pages.

    In a conversation the speakers' names are in most turns ("Hey Caroline!"), so they tell pages apart no
    more than a stopword; BM25 gives them almost no weight, but in a MiniLM embedding of a short question a
    name carries much of the vector and pulls it toward turns that address the person, so leaving them out
    raises recall (docs/retrieval.md). The query is still embedded once.
    """
    with space.lock:
        names = _names_to_count(space, query)
        if names is None:
            return query
        (counts,) = space.store.document_frequencies([names.ask])
    return names.without_common(query, counts)


class _Names(NamedTuple):
    """The query's names and the count `dense_query_text` asks of them (`_names_to_count`)."""

    names: list[str]
    ask: FrequencyAsk
    limit: int
    """A name in more pages than this is a speaker's (`speaker.common_name_limit`)."""

    def without_common(self, query: str, counts: list[int]) -> str:
        """`query` without the names counted in more than `limit` pages; the query itself when none is,
        or when nothing else would be left to embed."""
        common = {name for name, count in zip(self.names, counts, strict=True) if count > self.limit}
        if not common:
            return query
        stripped = without_names(query, common)
        return stripped if query_terms(stripped) else query


def _names_to_count(space: MemorySpace, query: str) -> _Names | None:
    """The query's names with their count: the pages holding each, stopped just past
    `common_name_limit`; None when there is nothing to count (no name, or a space too small to tell)."""
    limit = common_name_limit(space)
    names = list(query_names(query))
    if limit is None or not names:
        return None
    return _Names(names, FrequencyAsk([name.lower() for name in names], at_most=limit + 1), limit)


@dataclass(frozen=True)
class QueryWords:
    """What a query's words decide, each from page counts: the text to embed (`dense_query_text`), and the
    words BM25 searches for (`_lexical_terms`) with its column weights (`speaker.side_weights`).

    `query_words` asks every count in one call to the store: one round trip to a database instead of
    four, before the query is embedded; ranking then takes them as they are."""

    dense_text: str
    lexical_terms: list[str]
    column_weights: tuple[float, float] | None


@dataclass(frozen=True)
class WordAsks:
    """The page counts a query's words need (`QueryWords`), before they are counted: asked by the caller
    with its other first reads (`RecordStore.read_opening`), then turned into `QueryWords` (`counted`).

    What is asked depends on the space's size (`speaker.common_name_limit`): asks made before the read
    caught up with other processes' writes are made again after it, and counted again if they changed."""

    query: str
    terms: list[str]
    sides: list[FrequencyAsk]
    names: _Names | None
    budget: int

    @property
    def asks(self) -> list[FrequencyAsk]:
        """Every count, in the order `counted` reads them: the terms, the sides, the names."""
        return [
            FrequencyAsk(self.terms, at_most=self.budget + 1),
            *self.sides,
            *([] if self.names is None else [self.names.ask]),
        ]

    def counted(self, space: MemorySpace, counts: list[list[int]]) -> QueryWords:
        """`QueryWords` from `counts` of `asks`; asked again (one more call to the store) when the space
        now asks otherwise: its size changed since the asks were made."""
        with space.lock:
            if word_asks(space, self.query) != self:
                return query_words(space, self.query)
            return self._words(space, counts)

    def _words(self, space: MemorySpace, counts: list[list[int]]) -> QueryWords:
        """`QueryWords` from `counts` of `asks`, made on the space as it is now."""
        with space.lock:
            sides = counts[1 : 1 + len(self.sides)]
            weights = side_weights(space, side_named(space, sides))
        return QueryWords(
            dense_text=self.query
            if self.names is None
            else self.names.without_common(self.query, counts[-1]),
            lexical_terms=_within_budget(self.terms, counts[0], self.budget),
            column_weights=weights,
        )


def word_asks(space: MemorySpace, query: str) -> WordAsks:
    """What `query`'s words need counted (`WordAsks`); reads no store."""
    config = space.config
    with space.lock:
        sides = side_asks(space, query) if config.lexical_other_side_weight != 1.0 else []
        return WordAsks(
            query, query_terms(query), sides, _names_to_count(space, query), config.lexical_postings_budget
        )


def query_words(space: MemorySpace, query: str) -> QueryWords:
    """`QueryWords` of `query`, every count asked at once."""
    with space.lock:
        asks = word_asks(space, query)
        return asks._words(space, space.store.document_frequencies(asks.asks))


@dataclass(frozen=True)
class PageSignals:
    """Each signal of the page score, for the candidates and their neighbours (`needed`, in that order).

    Kept apart from their weighted sum so that `bench.quality.recall_signals` can weigh them otherwise, or add a
    signal, on exactly the candidates and values the engine ranks."""

    candidates: list[int]
    neighbours: dict[int, tuple[int | None, int | None]]
    needed: list[int]
    dense: np.ndarray
    """z-scored cosine to the query, against the whole space."""
    lexical: np.ndarray
    """z-scored BM25, against the whole space (pages no query word matches count 0)."""
    date: np.ndarray
    """Nearness to a date the query names (`temporal.date_proximity`); zeros when it names none."""


def page_signals(
    space: MemorySpace, query: str, query_vector: np.ndarray, k: int, words: QueryWords | None = None
) -> PageSignals | None:
    """The candidates for the `k` best pages, with every signal of their score; None for an empty space.
    `words`: the query's, counted when it was embedded (`query_words`); None counts them now."""
    config = space.config
    total = space.page_index.count()
    if total == 0 or k <= 0:
        return None
    pool = min(max(config.candidate_pool, k), total)
    dense_hits = dict(space.page_index.search(query_vector.reshape(1, -1), pool).hits(0))
    sample_scores = space.score_sample() @ query_vector
    dense_mean, dense_std = float(sample_scores.mean()), float(sample_scores.std())

    words = words if words is not None else query_words(space, query)
    # The lexical hits and the candidates' neighbours, asked at once (one statement on a database).
    rows = space.store.ranking_rows(
        list(dense_hits), words.lexical_terms, pool * LEXICAL_FETCH_FACTOR, pool, words.column_weights
    )
    lexical = rows.lexical
    lexical_scores = dict(lexical)
    raw = np.array([score for _, score in lexical], dtype=np.float64)
    lexical_mean = float(raw.sum()) / total
    lexical_std = float(np.sqrt(max(float((raw**2).sum()) / total - lexical_mean**2, 0.0)))

    candidates = ranking_candidates(list(dense_hits), lexical, pool)
    neighbours = rows.neighbours
    needed = needed_pages(candidates, neighbours)
    dense = dict(dense_hits)
    dense.update(dense_scores(space, query_vector, [pid for pid in needed if pid not in dense]))

    windows = query_date_windows(query)
    date = np.zeros(len(needed))
    if windows and config.date_weight > 0:
        julian = space.store.page_julian_days(needed)
        days = julian_to_epoch_days(np.array([julian[pid] for pid in needed], dtype=np.float64))
        date = date_proximity(days, windows)
    return PageSignals(
        candidates=candidates,
        neighbours=neighbours,
        needed=needed,
        dense=_zscore(np.array([dense.get(pid, dense_mean) for pid in needed]), dense_mean, dense_std),
        lexical=_zscore(
            np.array([lexical_scores.get(pid, 0.0) for pid in needed]), lexical_mean, lexical_std
        ),
        date=date,
    )


def dense_scores(space: MemorySpace, query_vector: np.ndarray, page_ids: Sequence[int]) -> dict[int, float]:
    """The query's inner product with each of `page_ids` that has a vector, from the page index first.

    The index holds the vector of every page the space knew of when the read caught up, at the precision
    the store keeps, and scores them as it scores the dense hits: asking it costs no read of the store, a
    round trip and the vectors' bytes on a database. A page it does not hold is asked of the store: its
    vector was stored since (by another thread or process), or it has none yet, and is then left to the
    lexical side (a dense z-score of 0) rather than scored from a vector it does not have."""
    if not page_ids:
        return {}
    wanted = np.array(page_ids, dtype=np.int64)
    scores = dict(space.page_index.search(query_vector.reshape(1, -1), len(wanted), wanted).hits(0))
    missing = [pid for pid in page_ids if pid not in scores]
    if missing:
        ids, vectors = space.store.embedded_page_vectors(missing, space.dim)
        scores.update(zip(ids, (vectors @ query_vector).tolist(), strict=True))
    return scores


def fused_scores(signals: PageSignals, config: MemoryConfig) -> np.ndarray:
    """The weighted sum of the signals, per page of `signals.needed`."""
    return (
        config.dense_weight * signals.dense
        + config.lexical_weight * signals.lexical
        + config.date_weight * signals.date
    )


def ranked_by(
    signals: PageSignals, fused_values: np.ndarray, neighbour_weight: float, k: int
) -> list[ScoredPage]:
    """The `k` best candidates by their fused score plus `neighbour_weight` times their best neighbour's."""
    fused = dict(zip(signals.needed, fused_values.tolist(), strict=True))
    scored = []
    for pid in signals.candidates:
        around = [fused[n] for n in signals.neighbours[pid] if n is not None]
        lift = neighbour_weight * max(around) if around else 0.0
        scored.append(ScoredPage(pid, fused[pid] + lift))
    scored.sort(key=lambda s: (-s.score, s.page_id))
    return scored[:k]


def rank_pages(
    space: MemorySpace, query: str, query_vector: np.ndarray, k: int, words: QueryWords | None = None
) -> list[ScoredPage]:
    """The `k` best pages of the space for the query, best first (`words` as in `page_signals`)."""
    signals = page_signals(space, query, query_vector, k, words)
    if signals is None:
        return []
    return ranked_by(signals, fused_scores(signals, space.config), space.config.neighbour_weight, k)


def _live(page: Page, now: float) -> bool:
    """Not expired at `now`."""
    return page.expires_at is None or page.expires_at > now


def _retrieved(page: Page, score: float = 0.0) -> RetrievedPage:
    return RetrievedPage(
        user_input=page.user_input,
        agent_response=page.agent_response,
        timestamp=page.timestamp,
        meta_info=page.meta_info,
        meta_data=page.meta_data,
        page_id=page.page_id,
        segment_id=page.segment_id,
        tier=page.tier,
        score=score,
    )


def _best_facts(
    space: MemorySpace, facts: list[dict[str, Any]], query_vector: np.ndarray, k: int, now: float
) -> list[tuple[dict[str, Any], float]]:
    """The `k` facts (rows of `active_knowledge`) nearest the query by cosine, best first, leaving out
    those expired at `now` and those under `knowledge_min_score` (brute force: at most capacity rows)."""
    live = [row for row in facts if row["expires_at"] is None or row["expires_at"] > now]
    if not live:
        return []
    scores = from_blobs([row["vector"] for row in live], space.dim) @ query_vector
    best = [(live[i], float(scores[i])) for i in np.argsort(-scores)[:k]]
    return [(row, score) for row, score in best if score >= space.config.knowledge_min_score]


def retrieve_context(
    space: MemorySpace,
    query: str,
    query_vector: np.ndarray,
    page_k: int,
    knowledge_k: int,
    now: float,
    search_text: str | None = None,
    words: QueryWords | None = None,
    basis: RetrievalBasis | None = None,
) -> RetrievedContext:
    """Everything the answer needs from every tier; reads only. Pages are ranked for `search_text` when
    given (the query with a rewrite's words: `query_rewrite.py`), else for `query`; `words`: that text's,
    counted when the query was embedded (`query_words`), None counts them now; `basis`: what does not
    depend on the ranking (`retrieval_basis` at `now`), read with the read's first look at the store
    (`MemorySpace.read_opening`), None reads it now.

    Two calls to the store besides the ranking's, one round trip each to a database: the basis unless
    given, then the rows returned (`retrieved_rows`)."""
    capacity = space.config.short_term_capacity
    with space.lock:
        basis = basis if basis is not None else space.store.retrieval_basis(now)
        # Expired pages are never returned, also before the sweep erases them: rank past them.
        expired = basis.expired_pages
        ranked = rank_pages(space, search_text or query, query_vector, page_k + expired, words)
        facts = {
            kind: _best_facts(space, rows, query_vector, knowledge_k, now)
            for kind, rows in basis.facts.items()
        }
        rows = space.store.retrieved_rows(
            [s.page_id for s in ranked],
            capacity + expired,
            [row["entry_id"] for found in facts.values() for row, _ in found],
        )
    pages = {p.page_id: p for p in rows.pages if _live(p, now)}
    ranked = [s for s in ranked if s.page_id in pages][:page_k]

    def retrieved_facts(kind: KnowledgeKind) -> list[RetrievedKnowledge]:
        return [
            RetrievedKnowledge(
                knowledge=row["text"],
                timestamp=row["timestamp"],
                score=score,
                entry_id=row["entry_id"],
                source_page_ids=rows.support[row["entry_id"]],
            )
            for row, score in facts[kind]
        ]

    return RetrievedContext(
        query=query,
        retrieved_at=format_unix_timestamp(now),
        short_term_memory=[_retrieved(p) for p in rows.short_term if _live(p, now)][-capacity:],
        retrieved_pages=[_retrieved(pages[s.page_id], s.score) for s in ranked],
        retrieved_user_knowledge=retrieved_facts("user"),
        retrieved_assistant_knowledge=retrieved_facts("assistant"),
        user_profile=basis.profile,
        user_profile_version=basis.profile_version,
    )
