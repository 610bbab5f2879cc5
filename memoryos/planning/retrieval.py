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

from dataclasses import dataclass

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.planning.lexical import query_terms
from memoryos.planning.speaker import common_name_limit, query_names, side_weights, without_names
from memoryos.planning.temporal import date_proximity, julian_to_epoch_days, query_date_windows
from memoryos.space.memory_space import MemorySpace
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
    counts = space.store.document_frequencies(terms, at_most=budget + 1)
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
        limit = common_name_limit(space)
        if limit is None:
            return query
        names = list(query_names(query))
        counts = space.store.document_frequencies([name.lower() for name in names], at_most=limit + 1)
        common = {name for name, count in zip(names, counts, strict=True) if count > limit}
    if not common:
        return query
    stripped = without_names(query, common)
    return stripped if query_terms(stripped) else query


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


def page_signals(space: MemorySpace, query: str, query_vector: np.ndarray, k: int) -> PageSignals | None:
    """The candidates for the `k` best pages, with every signal of their score; None for an empty space."""
    config = space.config
    total = space.page_index.count()
    if total == 0 or k <= 0:
        return None
    pool = min(max(config.candidate_pool, k), total)
    dense_hits = dict(space.page_index.search(query_vector.reshape(1, -1), pool).hits(0))
    sample_scores = space.score_sample() @ query_vector
    dense_mean, dense_std = float(sample_scores.mean()), float(sample_scores.std())

    lexical = space.store.lexical_search(
        _lexical_terms(space, query), pool * LEXICAL_FETCH_FACTOR, side_weights(space, query)
    )
    lexical_scores = dict(lexical)
    raw = np.array([score for _, score in lexical], dtype=np.float64)
    lexical_mean = float(raw.sum()) / total
    lexical_std = float(np.sqrt(max(float((raw**2).sum()) / total - lexical_mean**2, 0.0)))

    candidates = list(dict.fromkeys([*dense_hits, *(pid for pid, _ in lexical[:pool])]))
    neighbours = space.store.neighbour_ids(candidates)
    needed = list(
        dict.fromkeys([*candidates, *(n for pair in neighbours.values() for n in pair if n is not None)])
    )
    missing_dense = [pid for pid in needed if pid not in dense_hits]
    dense = dict(dense_hits)
    if missing_dense:
        # A page written a moment ago by another thread or process may have no vector yet: it is left to
        # the lexical side (a dense z-score of 0) rather than scored from a vector it does not have.
        embedded, vectors = space.embedded_page_vectors(missing_dense)
        dense.update(zip(embedded, (vectors @ query_vector).tolist(), strict=True))

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


def rank_pages(space: MemorySpace, query: str, query_vector: np.ndarray, k: int) -> list[ScoredPage]:
    """The `k` best pages of the space for the query, best first."""
    signals = page_signals(space, query, query_vector, k)
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


def retrieve_context(
    space: MemorySpace,
    query: str,
    query_vector: np.ndarray,
    page_k: int,
    knowledge_k: int,
    now: float,
    search_text: str | None = None,
) -> RetrievedContext:
    """Everything the answer needs from every tier; reads only. Pages are ranked for `search_text` when
    given (the query with a rewrite's words: `query_rewrite.py`), else for `query`."""
    config: MemoryConfig = space.config

    def facts(kind: KnowledgeKind) -> list[RetrievedKnowledge]:
        return [
            RetrievedKnowledge(
                knowledge=entry.knowledge,
                timestamp=entry.timestamp,
                score=score,
                entry_id=entry.entry_id,
                source_page_ids=entry.source_page_ids,
            )
            for entry, score in space.search_knowledge(kind, query_vector, knowledge_k, now)
            if score >= config.knowledge_min_score
        ]

    with space.lock:
        # Expired pages are never returned, also before the sweep erases them: rank past them.
        expired = space.store.count_expired(now)
        ranked = rank_pages(space, search_text or query, query_vector, page_k + expired)
        pages = {p.page_id: p for p in space.pages([s.page_id for s in ranked]) if _live(p, now)}
        ranked = [s for s in ranked if s.page_id in pages][:page_k]
        return RetrievedContext(
            query=query,
            retrieved_at=format_unix_timestamp(now),
            short_term_memory=[
                _retrieved(p) for p in space.recent_short_term_pages(expired) if _live(p, now)
            ][-space.config.short_term_capacity :],
            retrieved_pages=[_retrieved(pages[s.page_id], s.score) for s in ranked],
            retrieved_user_knowledge=facts("user"),
            retrieved_assistant_knowledge=facts("assistant"),
            user_profile=space.profile(),
            user_profile_version=space.store.latest_profile_version(),
        )
