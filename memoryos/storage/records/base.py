"""`RecordStore`: what the engine asks of a space's canonical store, whichever holds it.

Two stores keep a space's records: `SqliteStore` (`sqlite/`: one file per space, embedded mode and one
host) and `PostgresStore` (`postgres/`: every space in the service's database, any worker on any node).
The engine (`memoryos/space/`, `memoryos/planning/`, `memoryos/portability/`) is typed to this protocol
and never to either, so one engine runs on both; `tests/unit/test_store_contract.py` and the engine's
storage tests run against both. The methods are those of the SQLite store, whose docstrings say what
each returns; the lexical ones take words, not a query language, so each store searches its own way with
the same scores (FTS5's BM25).
"""

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np

from memoryos.errors import WriteIdConflictError
from memoryos.types import FactOrigin, KnowledgeEntry, KnowledgeKind, Page, Segment, Turn

CONTENT_ID_PREFIX = "sha256-"
"""Starts the op id of a write whose id the caller chose (`space/writes.py`): the rest is a digest of the
write id and the write's content, so the same write sent again is the same op, and a write id that comes
back under another op id of this form came back with other content. Other op ids are random: every other
op's, and every write's logged before this prefix existed — those cannot tell, and a write id found under
one is taken as the same write (what the store did before), so no schema change was needed."""

Fence = Callable[[], int | None]
"""The fencing number this process holds for a space's shard now (None: none, so it may not write)."""


def logged_detail(
    op_id: str, write_id: str | None, logged: Sequence[tuple[str | None, str | None, str]]
) -> dict[str, Any] | None:
    """The detail of the first of the `logged` rows (op id, write id, detail as JSON) that is the op
    `op_id` or the write `write_id`; None when none is. `WriteIdConflictError` when the write id came
    back under another content id: the same id with other content (`CONTENT_ID_PREFIX`)."""
    found = next(
        (row for row in logged if row[0] == op_id or (write_id is not None and row[1] == write_id)), None
    )
    if found is None:
        return None
    logged_id = found[0] or ""
    if (
        write_id is not None
        and logged_id != op_id
        and logged_id.startswith(CONTENT_ID_PREFIX)
        and op_id.startswith(CONTENT_ID_PREFIX)
    ):
        raise WriteIdConflictError(write_id)
    return dict(json.loads(found[2]))


Side = Literal["user_input", "agent_response"]
"""A page's two texts, the columns of lexical search."""

LAST_CHAINED_META = "last_chained_page"
"""The meta key holding the id of the page linked into a dialogue chain last: the engine writes it at every
link, and a database store reads that page with a pass's marks and a transaction's BEGIN."""

KNOWLEDGE_KINDS: tuple[KnowledgeKind, ...] = ("user", "assistant")
"""Every kind of fact, in the order retrieval returns them."""


class FrequencyAsk(NamedTuple):
    """One question to `RecordStore.document_frequencies`: the pages matching each of `terms` (in
    `column` only, when given), counting stopped at `at_most` (a bounded cost for words found in most
    pages of a large space)."""

    terms: Sequence[str]
    column: Side | None = None
    at_most: int | None = None


class ReadMarks(NamedTuple):
    """What a read must wait for and catch up with, read together when it starts
    (`RecordStore.read_marks`): one round trip to a database instead of three."""

    max_page_id: int
    """The page stored last (0: none): what the read must see, as `max_page_id`."""
    first_pending: int | None
    """The oldest page still waiting for its vector (None: none), as `pending_page_ids(1)`."""
    data_version: int
    """As `data_version`."""


OpKey = tuple[str, str | None]
"""An op's id and, for a write, its write id: what the op log is looked up by (`RecordStore.logged_ops`)."""


class ActiveSegments(NamedTuple):
    """What filing a topic compares it with and merges it into (`RecordStore.active_segments_with_vectors`),
    in one read: the merge needs the chosen segment's topic count, which a read of its own would cost a
    round trip to a database on every filing into an existing segment."""

    segments: list[Segment]
    """The segments not archived, in id order."""
    vectors: np.ndarray
    """Row i is segment i's vector."""
    topic_counts: list[int]
    """Item i is how many topics segment i has merged (its vector is their running mean)."""


class RebuildMarks(NamedTuple):
    """What a consolidation pass asks before its rebuild steps (`memoryos/planning/rebuild.py`), read
    together (in `RecordStore.pass_marks`): one round trip to a database instead of five, on every pass
    of a busy worker, where the answer is almost always "nothing to do"."""

    expired: bool
    """A page or a fact whose expiry has passed (`count_expired`, `expired_knowledge_ids`)."""
    stale_chain_ids: list[int]
    """Chains a delete or an edit left stale (`stale_chain_ids`), in id order."""
    stale_segment_ids: list[int]
    """Segments a delete or an edit left stale (`stale_segment_ids`), in id order."""
    profile_stale: bool
    """Whether the meta key that marks the profile for a rebuild is set."""


class PassMarks(NamedTuple):
    """What a consolidation pass reads before it applies anything (`RecordStore.pass_marks`), together: on
    a database one round trip instead of six. Most passes of a busy worker apply nothing (a space still
    within its short-term capacity, no segment hot enough), and then these are all they read."""

    rebuild: RebuildMarks
    """What the rebuild steps will find to do."""
    overflow: list[Page]
    """`short_term_overflow`: the short-term pages consolidation may move now, oldest first."""
    last_chained: Page | None
    """The page linked into a dialogue chain last (the meta key `last_chained_page`): what the first page
    moved may continue."""
    segments: list[Segment]
    """`active_segments()`: what their heats are computed from."""
    unanalyzed_segment_ids: set[int]
    """`unanalyzed_segment_ids()`: the active segments with pages not yet analyzed."""
    next_expiry: float | None
    """`next_expiry()`: when the next page or fact expires (None: nothing expires)."""


class PageSample(NamedTuple):
    """What a space's score sample starts from when it opens (`RecordStore.page_sample`), read together:
    one statement on a database instead of three."""

    pages: int
    """Every page of the space, of any tier, with a vector or not: the sample's count of pages seen."""
    vectors: np.ndarray
    """Up to the asked number of page vectors spread evenly over the embedded pages in id order: every
    nth of them from the first, n the embedded pages over the number asked (every one when there are no
    more)."""


class RetrievedRows(NamedTuple):
    """The rows a retrieval returns, read together (`RecordStore.retrieved_rows`): one round trip to a
    database instead of three."""

    pages: list[Page]
    """The ranked pages, as `pages`."""
    short_term: list[Page]
    """The newest short-term pages, as `newest_in_tier("stm", ...)`."""
    support: dict[int, list[int]]
    """The pages each retrieved fact stands on, as `fact_support`."""


class RankingRows(NamedTuple):
    """What ranking a query's pages reads from the store, read together (`RecordStore.ranking_rows`): one
    round trip to a database instead of two, the second waiting for the first. The vectors ranking needs
    besides come from the page index (`retrieval.dense_scores`)."""

    lexical: list[tuple[int, float]]
    """(page_id, BM25 score) best first, as `lexical_search`."""
    neighbours: dict[int, tuple[int | None, int | None]]
    """For each candidate (`ranking_candidates`), as `neighbour_ids`."""


def ranking_candidates(
    dense_ids: Sequence[int], lexical: Sequence[tuple[int, float]], pool: int
) -> list[int]:
    """The pages a query's ranking scores: the dense hits, then the `pool` best lexical hits not among
    them. A store that reads the neighbours in the statement that searches computes the same set."""
    return list(dict.fromkeys([*dense_ids, *(pid for pid, _ in lexical[:pool])]))


def needed_pages(
    candidates: Sequence[int], neighbours: dict[int, tuple[int | None, int | None]]
) -> list[int]:
    """The candidates, then their neighbours: every page whose scores ranking the candidates reads."""
    return list(
        dict.fromkeys([*candidates, *(n for pid in candidates for n in neighbours[pid] if n is not None)])
    )


class RetrievalBasis(NamedTuple):
    """What every retrieval reads besides its ranking, read together (`RecordStore.retrieval_basis`):
    one round trip to a database instead of five."""

    expired_pages: int
    """Pages expired at the read's time and not yet erased, as `count_expired`."""
    profile: str
    """As `latest_profile`."""
    profile_version: int | None
    """As `latest_profile_version`."""
    facts: dict[KnowledgeKind, list[dict[str, Any]]]
    """Each kind's active facts, as `active_knowledge` (every kind a key, with no fact an empty list)."""


class ReadOpening(NamedTuple):
    """What a read asks before anything else, read together (`RecordStore.read_opening`): one round trip
    to a database instead of three. None of it waits for the query's vector; all of it is what the space
    held when the read started."""

    marks: ReadMarks
    """As `read_marks`."""
    counts: list[list[int]]
    """As `document_frequencies` of the read's asks (its words' page counts)."""
    basis: RetrievalBasis
    """As `retrieval_basis`."""


class RecordStore(Protocol):
    """One space's canonical records: pages, chains, segments, facts, profile, vectors, meta, op log."""

    incarnation: str
    """Changes when the space is forgotten and made again ("" where the store's file is its identity):
    index snapshots record it, and one of another incarnation is never loaded."""

    created: bool
    """True when this open created the space, which then holds its first meta and nothing else: an open
    need not read pages, vectors or withdrawals back (round trips to a database). False is always safe:
    a store whose reads are in process never says True."""

    def erase(self) -> None:
        """Delete every record of the space at once; the store cannot be used afterwards."""
        ...

    def meta_at_open(self) -> dict[str, str]:
        """The space's meta as this open found or made it, for the open's own checks (the embedding
        fingerprint, the index's generation): a database reads it with the space's row, one round trip
        less per open. Later reads ask `all_meta`, which sees what was written since."""
        ...

    def active_entries(self, kind: KnowledgeKind) -> list[KnowledgeEntry]: ...
    def active_knowledge(self, kind: KnowledgeKind) -> list[dict[str, Any]]: ...
    def active_segments(self, count_pages: bool = False) -> list[Segment]: ...
    def active_segments_with_vectors(self, dim: int) -> ActiveSegments: ...
    def add_knowledge_sources(self, entry_id: int, page_ids: Sequence[int]) -> None: ...
    def add_segment_counters(self, segment_id: int, visits: int, interactions: int, at: float) -> None: ...
    def all_knowledge_texts(self) -> list[tuple[int, str]]: ...
    def all_page_texts(self) -> list[tuple[int, str, str]]: ...
    def all_segment_ids(self) -> list[int]: ...
    def analysis_attempts(self, page_ids: Sequence[int]) -> int: ...
    def analyzed_page_ids(self) -> list[int]: ...
    def assign_vectors(self, vectors: Sequence[tuple[int, np.ndarray]]) -> None: ...
    def chain_page_ids(self, chain_id: int) -> list[int]: ...
    def checkpoint(self) -> None: ...
    def clear_full_text_index(self) -> None: ...
    def close(self) -> None: ...
    def committed_data_version(self) -> int: ...
    def compact_text_index(self) -> None: ...
    def count_analysis_attempt(self, page_ids: Sequence[int]) -> None: ...
    def count_expired(self, now: float) -> int: ...
    def count_pages(self) -> dict[str, int]: ...
    def count_pending(self, through_page_id: int | None = None) -> int: ...
    def data_version(self) -> int: ...
    def delete_all(self, tables: tuple[str, ...], keep_meta: tuple[str, ...]) -> None: ...
    def delete_knowledge(self, entry_ids: Sequence[int]) -> None: ...
    def delete_meta(self, key: str) -> None: ...
    def delete_pages(self, pages: Sequence[Page]) -> None: ...
    def delete_profile_versions(self) -> None: ...
    def document_frequencies(self, asks: Sequence[FrequencyAsk]) -> list[list[int]]: ...
    def embedded_page_vectors(self, page_ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]: ...
    def expired_knowledge_ids(self, now: float) -> list[int]: ...
    def expired_page_ids(self, now: float) -> list[int]: ...
    def fact_support(self, entry_ids: Sequence[int]) -> dict[int, list[int]]: ...
    def fact_version_ids(self, entry_id: int) -> list[int]: ...
    def facts_only_from(self, page_ids: Sequence[int]) -> list[int]: ...
    def get_meta(self, key: str) -> str | None: ...
    def all_meta(self) -> dict[str, str]: ...
    def insert_knowledge(
        self,
        kind: KnowledgeKind,
        text: str,
        timestamp: str,
        vector: np.ndarray,
        at: float,
        source_page_ids: Sequence[int] = (),
        origin: FactOrigin = "consolidation",
        expires_at: float | None = None,
    ) -> int: ...
    def insert_pages(
        self,
        turns: Sequence[Turn],
        vectors: np.ndarray | None,
        at: float | None = None,
        expires_at: float | None = None,
        op_id: str | None = None,
    ) -> list[int]: ...
    def insert_profile(
        self, text: str, at: float, source_segment_id: int | None, source_page_ids: Sequence[int] = ()
    ) -> None: ...
    def insert_segment(
        self, summary: str, keywords: list[str], vector: np.ndarray, at: float, interactions: int
    ) -> int: ...
    def knowledge_entries(self, entry_ids: Sequence[int]) -> list[KnowledgeEntry]: ...
    def knowledge_history(self, kind: KnowledgeKind) -> list[dict[str, Any]]: ...
    def latest_profile(self) -> str: ...
    def latest_profile_version(self) -> int | None: ...
    def lexical_search(
        self, terms: Sequence[str], limit: int, column_weights: tuple[float, float] | None = None
    ) -> list[tuple[int, float]]: ...
    def log_op(
        self, kind: str, at: float, detail: dict[str, Any], op_id: str, write_id: str | None
    ) -> None: ...
    def logged_op(self, op_id: str, write_id: str | None) -> dict[str, Any] | None: ...
    def logged_ops(self, keys: Sequence[OpKey]) -> list[dict[str, Any] | None]: ...
    def mark_stale(self, chain_ids: Sequence[int], segment_ids: Sequence[int]) -> None: ...
    def max_page_id(self) -> int: ...
    def max_vector_seq(self) -> int: ...
    def neighbour_ids(self, page_ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]: ...
    def newest_in_tier(self, tier: str, limit: int) -> list[Page]: ...
    def next_expiry(self) -> float | None: ...
    def page_julian_days(self, page_ids: Sequence[int]) -> dict[int, float | None]: ...
    def page_list(self, offset: int, limit: int) -> tuple[list[Page], int]: ...
    def page_vectors(self, page_ids: Sequence[int], dim: int) -> np.ndarray: ...
    def page_vectors_after(
        self, after_seq: int, dim: int, limit: int
    ) -> tuple[np.ndarray, np.ndarray, int]: ...
    def pages(self, page_ids: Sequence[int]) -> list[Page]: ...
    def pages_in_tier(self, tier: str) -> list[Page]: ...
    def pass_marks(self, now: float, profile_stale_meta: str, short_term_capacity: int) -> PassMarks: ...
    def pending_among(self, page_ids: Sequence[int]) -> list[int]: ...
    def pending_page_ids(self, limit: int) -> list[int]: ...
    def pending_pages(self, limit: int) -> list[Page]: ...
    def profile_version_count(self) -> int: ...
    def ranking_rows(
        self,
        dense_ids: Sequence[int],
        terms: Sequence[str],
        limit: int,
        pool: int,
        column_weights: tuple[float, float] | None,
    ) -> RankingRows: ...
    def read_marks(self) -> ReadMarks: ...
    def read_opening(self, asks: Sequence[FrequencyAsk], now: float) -> ReadOpening: ...
    def remove_knowledge_sources(self, page_ids: Sequence[int]) -> None: ...
    def replace_page_text(
        self, page: Page, user_input: str, agent_response: str, meta_data: dict[str, Any], at: float
    ) -> None: ...
    def retire_knowledge(self, entry_id: int, replaced_by: int | None) -> None: ...
    def retrieval_basis(self, now: float) -> RetrievalBasis: ...
    def retrieved_rows(
        self, page_ids: Sequence[int], short_term: int, entry_ids: Sequence[int]
    ) -> RetrievedRows: ...
    def page_sample(self, size: int, dim: int) -> PageSample: ...
    def page_total(self) -> int: ...
    def segment_page_ids(self, segment_id: int, only_unanalyzed: bool = False) -> list[int]: ...
    def set_knowledge_vector(self, entry_id: int, vector: np.ndarray) -> None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def set_page_fields(self, page_ids: Sequence[int], **fields: Any) -> None: ...
    def set_page_vectors(
        self, page_ids: Sequence[int], vectors: np.ndarray
    ) -> tuple[list[int], np.ndarray]: ...
    def stale_chain_ids(self) -> list[int]: ...
    def stale_segment_ids(self) -> list[int]: ...
    def touch_knowledge(self, entry_id: int, timestamp: str, at: float) -> None: ...
    def transaction(
        self, wait_for_writers: bool = True, ops: Sequence[OpKey] = (), pages: Sequence[int] = ()
    ) -> AbstractContextManager[None]: ...
    def unanalyzed_segment_ids(self) -> set[int]: ...
    def update_segment(self, segment_id: int, **fields: Any) -> None: ...
    def upsert_chain(self, chain_id: int, summary: str) -> None: ...
    def vectors_if_covered(
        self, page_ids: Sequence[int], through_seq: int, dim: int
    ) -> tuple[list[int], np.ndarray]: ...
    def withdrawn_after(self, after_seq: int) -> tuple[list[int], int]: ...


def last_chained_page(store: RecordStore) -> Page | None:
    """The page linked into a dialogue chain last (`LAST_CHAINED_META`): the one a new page may continue."""
    previous = store.get_meta(LAST_CHAINED_META)
    found = store.pages([int(previous)]) if previous is not None else []
    return found[0] if found else None
