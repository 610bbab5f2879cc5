"""`MemorySpace.apply`: each rule of ARCHITECTURE §3 and the storage contracts of §4, with hand-made
unit vectors and a fixed clock (no model)."""

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.errors import EmbeddingModelMismatchError, InvalidInputError
from memoryos.space import score_sample
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import (
    AddKnowledge,
    AddTurns,
    DeletePages,
    EmbedPages,
    FileTopic,
    LinkChain,
    MarkAnalyzed,
    RecordVisits,
    UpdateProfile,
)
from memoryos.storage.records.base import OpKey
from memoryos.storage.records.factory import open_record_store
from memoryos.storage.vectors.faiss_index import FaissIndex
from memoryos.storage.vectors.index_factory import FAISS_SNAPSHOT_FILE as PAGE_INDEX_FILE
from memoryos.types import KnowledgeKind, Page, Turn
from tests.support.fakes import T0, FakeClock, axis, unit
from tests.support.record_stores import op_log, store_settings

DIM = 8
MODEL = "hand-made-vectors"
HOUR = 3600.0
STORED_ATOL = 2e-3
"""Vectors read back from the store may be kept at reduced (half) precision."""


pytestmark = pytest.mark.usefixtures("both_record_stores")


def open_space(directory: Path, clock: FakeClock, model: str = MODEL, **settings: object) -> MemorySpace:
    config = MemoryConfig.model_validate(
        {"data_dir": directory.parent, "faiss_use_gpu": "never", **store_settings(), **settings}
    )
    return MemorySpace(directory, config, model, lambda: DIM, clock)


def turn(n: int, **meta_data: object) -> Turn:
    return Turn(
        user_input=f"user says {n}",
        agent_response=f"agent answers {n}",
        timestamp=f"2024-05-01 10:{n:02d}:00",
        meta_data=meta_data,
    )


def add_pages(space: MemorySpace, *vectors: np.ndarray) -> list[int]:
    start = space.store.max_page_id() + 1
    turns = [turn(start + i) for i in range(len(vectors))]
    return space.apply(AddTurns(turns=turns, vectors=np.stack(vectors)))


def file_topic(
    space: MemorySpace, page_ids: list[int], vector: np.ndarray, keywords: list[str], summary: str, at: float
) -> int:
    space.apply(FileTopic(page_ids=page_ids, summary=summary, keywords=keywords, vector=vector, at=at))
    segment_ids = {p.segment_id for p in space.pages(page_ids)}
    assert len(segment_ids) == 1
    (segment_id,) = segment_ids
    assert segment_id is not None
    return segment_id


def last_op_detail(directory: Path) -> dict[str, object]:
    return dict(op_log(directory)[-1]["detail"])


def page(space: MemorySpace, page_id: int) -> Page:
    (found,) = space.pages([page_id])
    return found


def all_pages(space: MemorySpace) -> list[Page]:
    return space.pages(list(range(1, space.store.max_page_id() + 1)))


def op_kinds(directory: Path) -> list[str]:
    """The op log, read through a separate read-only connection: what is committed on disk."""
    return [entry["kind"] for entry in op_log(directory)]


def top_hit(space: MemorySpace, vector: np.ndarray) -> tuple[int, float]:
    return space.page_index.search(vector.reshape(1, -1), 1).hits(0)[0]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def space_dir(tmp_path: Path) -> Path:
    return tmp_path / "default" / "alice" / "helper"


@pytest.fixture
def space(space_dir: Path, clock: FakeClock) -> Iterator[MemorySpace]:
    opened = open_space(space_dir, clock)
    yield opened
    opened.close()


# --- short-term memory --------------------------------------------------------------------------------
def test_add_turns_stores_pages_in_short_term_memory_in_order(space: MemorySpace) -> None:
    vectors = [axis(DIM, 0), axis(DIM, 1), axis(DIM, 2)]
    ids = space.apply(AddTurns(turns=[turn(1, k="v"), turn(2), turn(3)], vectors=np.stack(vectors)))
    assert ids == sorted(ids) and len(set(ids)) == 3
    stm = space.short_term_pages()
    assert [p.page_id for p in stm] == ids
    assert [p.user_input for p in stm] == ["user says 1", "user says 2", "user says 3"]
    assert stm[0].meta_data == {"k": "v"} and stm[1].meta_data == {}
    assert all(p.tier == "stm" and p.segment_id is None for p in stm)
    np.testing.assert_array_equal(space.page_vectors(ids), np.stack(vectors))
    assert top_hit(space, axis(DIM, 1))[0] == ids[1]


def test_short_term_overflow_is_the_oldest_beyond_capacity_up_to_the_first_page_without_a_vector(
    space_dir: Path, clock: FakeClock
) -> None:
    space = open_space(space_dir, clock, short_term_capacity=3)
    try:
        ids = add_pages(space, *(axis(DIM, i % DIM) for i in range(4)))  # 1-4: embedded
        pending = space.apply(AddTurns(turns=[turn(5), turn(6), turn(7), turn(8)]))  # 5-8: no vectors yet
        assert [p.page_id for p in space.pass_marks(T0).overflow] == ids  # 8 - 3 = 5 beyond; 5 waits
        space.apply(EmbedPages(page_ids=pending[:1], vectors=axis(DIM, 0)[None, :]))
        assert [p.page_id for p in space.pass_marks(T0).overflow] == [*ids, pending[0]]
        space.apply(EmbedPages(page_ids=pending[1:], vectors=np.stack([axis(DIM, 1)] * 3)))
        assert [p.page_id for p in space.pass_marks(T0).overflow] == [*ids, pending[0]]  # the newest 3 stay
    finally:
        space.close()


def test_pending_pages_are_the_pages_still_waiting_for_their_vectors_oldest_first(space: MemorySpace) -> None:
    embedded = add_pages(space, axis(DIM, 0))
    pending = space.apply(AddTurns(turns=[turn(2), turn(3), turn(4)]))
    space.apply(EmbedPages(page_ids=pending[1:2], vectors=axis(DIM, 1)[None, :]))
    waiting = [pending[0], pending[2]]
    assert space.pending_pages(10) == space.pages(waiting) and space.pending_page_ids(10) == waiting
    assert [page.page_id for page in space.pending_pages(1)] == waiting[:1]
    assert embedded[0] not in space.pending_page_ids(10) and space.pending_pages(0) == []


def test_short_term_overflow_is_empty_within_capacity(space_dir: Path, clock: FakeClock) -> None:
    space = open_space(space_dir, clock, short_term_capacity=3)
    try:
        add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
        assert space.pass_marks(T0).overflow == []
    finally:
        space.close()


def test_add_turns_with_a_wrong_shape_stores_nothing(space: MemorySpace, space_dir: Path) -> None:
    add_pages(space, axis(DIM, 0))
    before = (all_pages(space), op_kinds(space_dir), space.page_index.count())
    wrong_dim = np.ones((1, DIM + 1), np.float32)
    with pytest.raises(InvalidInputError, match="vectors"):
        space.apply(AddTurns(turns=[turn(5)], vectors=wrong_dim))
    wrong_rows = np.stack([axis(DIM, 1), axis(DIM, 2)])
    with pytest.raises(ValueError, match="vectors"):
        space.apply(AddTurns(turns=[turn(5)], vectors=wrong_rows))
    assert (all_pages(space), op_kinds(space_dir), space.page_index.count()) == before


def test_an_add_that_fails_midway_leaves_neither_pages_nor_index_entries(
    space: MemorySpace, space_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_pages(space, axis(DIM, 0))
    before = (all_pages(space), op_kinds(space_dir), space.page_index.count())

    def failing_log(*args: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(space.store, "log_op", failing_log)
    with pytest.raises(RuntimeError):
        add_pages(space, axis(DIM, 1), axis(DIM, 2))
    monkeypatch.undo()
    assert (all_pages(space), op_kinds(space_dir), space.page_index.count()) == before
    assert add_pages(space, axis(DIM, 3)) == [2]


def test_a_write_keeps_the_version_of_its_own_commit_so_a_commit_right_after_it_is_caught_up(
    space: MemorySpace, space_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process commits a page with its vector just after this space's write commits: the next
    read must see it. The space keeps the data version its own commit left; one read after the commit
    would already include the other's, and its vector would never reach the index."""
    add_pages(space, axis(DIM, 0))
    config = MemoryConfig.model_validate({"data_dir": space_dir.parent, **store_settings()})
    other = open_record_store(config, space_dir, create=False, new_store_meta=dict)
    own_transaction = space.store.transaction

    @contextmanager
    def then_another_commits(
        wait_for_writers: bool = True, ops: Sequence[OpKey] = (), pages: Sequence[int] = ()
    ) -> Iterator[None]:
        with own_transaction(wait_for_writers, ops, pages):
            yield
        with other.transaction():
            ids = other.insert_pages([turn(90)], np.stack([axis(DIM, 5)]))
        added.extend(ids)

    added: list[int] = []
    monkeypatch.setattr(space.store, "transaction", then_another_commits)
    (own,) = add_pages(space, axis(DIM, 1))
    monkeypatch.undo()
    try:
        assert space.store.committed_data_version() != space.store.data_version()
        space.refresh()
        assert space.page_index.count() == 3
        assert top_hit(space, axis(DIM, 5))[0] == added[0] != own
    finally:
        other.close()


def test_the_page_sample_counts_every_page_and_spreads_over_the_embedded_ones(space: MemorySpace) -> None:
    """`page_sample` (one statement on PostgreSQL, the count the space's counter): every page counts, of
    any tier and with a vector or not, and the vectors are every nth embedded page by id, n the embedded
    pages over the size asked; a deleted page is neither."""
    embedded = add_pages(space, *(axis(DIM, i) for i in range(6)))
    space.apply(AddTurns(turns=[turn(7), turn(8)]))
    space.apply(DeletePages(page_ids=[embedded[1]]))
    file_topic(space, embedded[4:], axis(DIM, 7), ["k"], "moved to mid-term", 1.0)
    assert len(space.store.count_pages()) == 2  # two tiers
    two = space.store.page_sample(2, DIM)  # embedded: 0, 2, 3, 4, 5; every 2nd from the first
    assert two.pages == 7 == sum(space.store.count_pages().values())
    assert np.array_equal(two.vectors, np.stack([axis(DIM, 0), axis(DIM, 3)]))
    every = space.store.page_sample(10, DIM)
    assert every.pages == 7
    assert np.array_equal(every.vectors, np.stack([axis(DIM, i) for i in (0, 2, 3, 4, 5)]))


def test_a_reopened_spaces_score_sample_comes_from_its_page_index_as_the_store_would_give_it(
    space_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A space that reopens takes its score sample from the page index it opened (from the snapshot, or
    rebuilt from the store without one), not from a pass over the store's rows: the same vectors
    `page_sample` gives, more pages than the sample holds and a deleted page included."""
    space = open_space(space_dir, clock)
    embedded = add_pages(space, *(unit(DIM, (i % DIM, 1.0), ((i // DIM) % DIM, 0.5)) for i in range(40)))
    space.apply(AddTurns(turns=[turn(50)]))  # a page without a vector counts as a page
    space.apply(DeletePages(page_ids=[embedded[3]]))
    space.close()
    store_class = type(space.store)
    for snapshot in (True, False):
        if not snapshot:
            (space_dir / PAGE_INDEX_FILE).unlink()
        with monkeypatch.context() as patched:
            patched.setattr(store_class, "page_sample", lambda *_: pytest.fail("read from the store"))
            patched.setattr(score_sample, "SCORE_SAMPLE_SIZE", 16)
            again = open_space(space_dir, clock)
        try:
            stored = again.store.page_sample(16, DIM)
            assert stored.pages == 40 and len(stored.vectors) == 16
            np.testing.assert_array_equal(again.score_sample(), stored.vectors)
        finally:
            again.close()


def test_ranking_rows_are_the_lexical_hits_and_the_candidates_neighbours(space: MemorySpace) -> None:
    """`ranking_rows` (one statement on PostgreSQL) answers what its two reads answer one after the other:
    with a gap in the ids (a deleted page), pages still waiting for a vector, dense hits that the lexical
    search finds too, and a lexical pool smaller than the hits."""
    ids = add_pages(space, *(axis(DIM, i % DIM) for i in range(8)))
    space.apply(DeletePages(page_ids=[ids[3]]))
    start = space.store.max_page_id() + 1
    pending = space.apply(AddTurns(turns=[turn(start), turn(start + 1)]))
    terms = ["user", "says", str(ids[5]), str(pending[0]), "nowhere"]
    for dense_ids, pool in (([ids[0], ids[5]], 2), ([], 10), ([ids[7]], 0)):
        rows = space.store.ranking_rows(dense_ids, terms, 20, pool, (1.0, 0.5))
        lexical = space.store.lexical_search(terms, 20, (1.0, 0.5))
        assert rows.lexical == pytest.approx(lexical, rel=1e-12)
        assert [pid for pid, _ in rows.lexical] == [pid for pid, _ in lexical]
        candidates = list(dict.fromkeys([*dense_ids, *(pid for pid, _ in lexical[:pool])]))
        assert rows.neighbours == space.store.neighbour_ids(candidates)
    rows = space.store.ranking_rows([], terms, 20, 10, None)
    assert set(pending) & {pid for pid, _ in rows.lexical}  # found by their words
    assert ids[3] not in rows.neighbours and ids[3] not in {
        n for pair in rows.neighbours.values() for n in pair
    }


# --- dialogue chains ----------------------------------------------------------------------------------
def test_chain_summary_is_every_chain_pages_meta_info_and_survives_reopen(
    space_dir: Path, clock: FakeClock
) -> None:
    space = open_space(space_dir, clock)
    p1, p2, p3, p4 = add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2), axis(DIM, 3))
    space.apply(LinkChain(page_id=p1, continues_previous=False, chain_summary="s1"))
    space.apply(LinkChain(page_id=p2, continues_previous=True, chain_summary="s12"))
    assert page(space, p1).chain_id == page(space, p2).chain_id == p1
    assert [page(space, p).meta_info for p in (p1, p2)] == ["s12", "s12"]
    space.apply(LinkChain(page_id=p3, continues_previous=False, chain_summary="s3"))
    assert page(space, p3).chain_id == p3 and page(space, p3).meta_info == "s3"
    space.close()

    reopened = open_space(space_dir, clock)
    previous = reopened.last_chained_page()
    assert previous is not None and previous.page_id == p3
    reopened.apply(LinkChain(page_id=p4, continues_previous=True, chain_summary="s34"))
    assert page(reopened, p4).chain_id == p3
    assert [p.page_id for p in reopened.chain_pages(p3)] == [p3, p4]
    assert [page(reopened, p).meta_info for p in (p1, p2, p3, p4)] == ["s12", "s12", "s34", "s34"]
    reopened.close()


def test_a_continuation_with_no_previous_page_starts_its_own_chain(space: MemorySpace) -> None:
    (p1,) = add_pages(space, axis(DIM, 0))
    assert space.last_chained_page() is None
    space.apply(LinkChain(page_id=p1, continues_previous=True, chain_summary="alone"))
    assert page(space, p1).chain_id == p1 and page(space, p1).meta_info == "alone"


def test_ops_of_one_transaction_are_checked_against_what_the_ones_before_them_wrote(
    space: MemorySpace, space_dir: Path
) -> None:
    """The pages consolidation's checks read are read once a transaction (`PageStates`) and kept up to
    date with its own writes: a page linked twice in one commit is linked once, a run linked and filed in
    one commit is filed, and a filing after a delete in the same commit sees the page gone (a delete's
    effect on pages is not noted: the kept states are dropped after it)."""
    p1, p2, p3 = add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
    link = LinkChain(page_id=p1, continues_previous=False, chain_summary="first")
    space.apply_ops(
        [
            link,
            LinkChain(page_id=p1, continues_previous=False, chain_summary="again"),
            LinkChain(page_id=p2, continues_previous=True, chain_summary="both", previous_page_id=p1),
            FileTopic(page_ids=[p1, p2], summary="x", keywords=["x"], vector=axis(DIM, 0), at=T0),
            FileTopic(page_ids=[p2], summary="y", keywords=["y"], vector=axis(DIM, 1), at=T0),
        ]
    )
    details = [entry["detail"] for entry in op_log(space_dir)[-5:]]
    assert [("stale" in detail) for detail in details] == [False, True, False, False, True]
    assert (page(space, p1).chain_id, page(space, p2).chain_id) == (p1, p1)
    assert {page(space, p1).segment_id} == {page(space, p2).segment_id} != {None}

    space.apply_ops(
        [
            DeletePages(page_ids=[p3], at=T0),
            FileTopic(page_ids=[p3], summary="z", keywords=["z"], vector=axis(DIM, 2), at=T0),
        ]
    )
    assert "stale" in last_op_detail(space_dir) and space.pages([p3]) == []


# --- segments -----------------------------------------------------------------------------------------
def test_file_topic_merges_a_matching_topic_and_refreshes_the_segment(space: MemorySpace) -> None:
    p1, p2, p3 = add_pages(space, axis(DIM, 0), axis(DIM, 0), axis(DIM, 4))
    s1 = file_topic(space, [p1], axis(DIM, 0), ["tea", "cake"], "Tea and cake.", T0)
    (created,) = space.segments()
    assert (created.summary, created.keywords, created.interaction_count) == (
        "Tea and cake.",
        ["tea", "cake"],
        1,
    )

    near = unit(DIM, (0, 3), (1, 1))  # cos 0.95 with the segment
    s2 = file_topic(space, [p2], near, ["Scones", "tea"], "Scones with tea.", T0 + HOUR)
    assert s2 == s1
    (merged,) = space.segments(count_pages=True)
    assert merged.summary == "Scones with tea. | Tea and cake."
    assert merged.keywords == ["scones", "tea", "cake"]
    assert merged.interaction_count == 2 and merged.page_count == 2
    assert merged.last_visit_at == T0 + HOUR
    vector = space.store.active_segments_with_vectors(DIM)[1][0]  # s1, the only segment
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=STORED_ATOL)
    np.testing.assert_allclose(
        vector, unit(DIM, (0, 1 + 3 / math.sqrt(10)), (1, 1 / math.sqrt(10))), atol=STORED_ATOL
    )

    s3 = file_topic(space, [p3], axis(DIM, 4), ["trains"], "Trains.", T0 + HOUR)
    assert s3 != s1
    assert [s.segment_id for s in space.segments()] == [s1, s3]
    assert {p.page_id: (p.tier, p.segment_id) for p in all_pages(space)} == {
        p1: ("mtm", s1),
        p2: ("mtm", s1),
        p3: ("mtm", s3),
    }


def test_file_topic_threshold_uses_cosine_plus_keyword_jaccard(space: MemorySpace) -> None:
    p1, p2, p3 = add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
    half = unit(DIM, (0, 1), (1, math.sqrt(3)))  # cos 0.5 with axis 0
    s1 = file_topic(space, [p1], axis(DIM, 0), ["tea", "cake"], "Tea.", T0)
    assert file_topic(space, [p2], half, ["coffee"], "Coffee.", T0) != s1  # F = 0.5 < 0.6
    other_half = unit(DIM, (0, 1), (2, math.sqrt(3)))  # cos 0.5 with axis 0, 0.25 with `half`
    assert file_topic(space, [p3], other_half, ["tea", "scones"], "Tea scones.", T0) == s1  # F = 0.5 + 1/3


def test_a_page_filed_again_stays_in_its_one_segment(space: MemorySpace, space_dir: Path) -> None:
    """Filing pages that already left STM (a plan made before another process filed them, or the same
    work delivered twice) is a recorded no-op: a page belongs to exactly one segment."""
    p1, p2 = add_pages(space, axis(DIM, 0), axis(DIM, 0))
    s1 = file_topic(space, [p1, p2], axis(DIM, 0), ["tea"], "Tea.", T0)
    assert file_topic(space, [p1], axis(DIM, 5), ["boats"], "Boats.", T0) == s1
    assert space.store.segment_page_ids(s1) == [p1, p2]
    assert [s.page_count for s in space.segments(count_pages=True)] == [2]
    assert op_kinds(space_dir)[-1] == "file_topic"
    assert "stale" in last_op_detail(space_dir)


def test_file_topic_with_a_wrong_shape_vector_changes_nothing(space: MemorySpace, space_dir: Path) -> None:
    (p1,) = add_pages(space, axis(DIM, 0))
    before = (all_pages(space), space.segments(), op_kinds(space_dir))
    with pytest.raises(InvalidInputError, match="vector"):
        space.apply(FileTopic(page_ids=[p1], summary="x", keywords=[], vector=np.ones(DIM + 2), at=T0))
    assert (all_pages(space), space.segments(), op_kinds(space_dir)) == before


def test_a_file_topic_that_fails_midway_is_rolled_back(
    space: MemorySpace, space_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p1, p2 = add_pages(space, axis(DIM, 0), axis(DIM, 1))
    before = (all_pages(space), op_kinds(space_dir))

    def failing_filing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("crash after the segment row was written")

    monkeypatch.setattr(space.store, "set_page_fields", failing_filing)
    with pytest.raises(RuntimeError):
        space.apply(FileTopic(page_ids=[p1, p2], summary="x", keywords=["x"], vector=axis(DIM, 0), at=T0))
    monkeypatch.undo()
    assert space.segments() == []
    assert space.store.all_segment_ids() == []
    assert (all_pages(space), op_kinds(space_dir)) == before


# --- heat, visits, eviction ---------------------------------------------------------------------------
def test_heat_is_read_from_the_current_time_so_untouched_segments_cool(
    space: MemorySpace, clock: FakeClock
) -> None:
    (p1,) = add_pages(space, axis(DIM, 0))
    s1 = file_topic(space, [p1], axis(DIM, 0), ["tea"], "Tea.", T0)
    assert space.segment_heats(T0)[s1] == pytest.approx(1 + 1.0)
    assert space.segment_heats(T0 + 24 * HOUR)[s1] == pytest.approx(1 + math.exp(-1))
    assert space.segment_heats(T0 + 240 * HOUR)[s1] == pytest.approx(1 + math.exp(-10))


def test_record_visits_raises_heat_and_refreshes_recency(space: MemorySpace, space_dir: Path) -> None:
    p1, p2 = add_pages(space, axis(DIM, 0), axis(DIM, 1))
    s1 = file_topic(space, [p1], axis(DIM, 0), ["tea"], "Tea.", T0)
    s2 = file_topic(space, [p2], axis(DIM, 1), ["boats"], "Boats.", T0)
    later = T0 + 48 * HOUR
    cold = space.segment_heats(later)
    space.apply(RecordVisits(segment_ids=[s1], at=later))
    space.apply(RecordVisits(segment_ids=[s1], at=later))
    warm = space.segment_heats(later)
    assert warm[s1] == pytest.approx(2 + 1 + 1.0)
    assert warm[s1] > cold[s1]
    assert warm[s2] == cold[s2]
    assert op_kinds(space_dir)[-2:] == ["record_visits", "record_visits"]


def test_eviction_archives_the_lowest_heat_segment_not_the_oldest(space_dir: Path, clock: FakeClock) -> None:
    space = open_space(space_dir, clock, mid_term_capacity=2)
    pa, pb, pc = add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
    sa = file_topic(space, [pa], axis(DIM, 0), ["tea"], "Tea.", T0)
    sb = file_topic(space, [pb], axis(DIM, 1), ["boats"], "Boats.", T0)
    for _ in range(3):
        space.apply(RecordVisits(segment_ids=[sa], at=T0))
    sc = file_topic(space, [pc], axis(DIM, 2), ["trains"], "Trains.", T0 + HOUR)

    assert [s.segment_id for s in space.segments()] == [sa, sc]
    archived = page(space, pb)
    assert (archived.tier, archived.segment_id, archived.user_input) == ("archived", sb, "user says 2")
    assert top_hit(space, axis(DIM, 1)) == (pb, pytest.approx(1.0))
    assert sb not in space.segments_to_promote(T0 + HOUR)
    space.close()


def test_archived_pages_stay_stored_and_searchable_after_reopen(space_dir: Path, clock: FakeClock) -> None:
    space = open_space(space_dir, clock, mid_term_capacity=1)
    p1, p2 = add_pages(space, axis(DIM, 0), axis(DIM, 1))
    s1 = file_topic(space, [p1], axis(DIM, 0), ["tea"], "Tea.", T0)
    s2 = file_topic(space, [p2], axis(DIM, 1), ["boats"], "Boats.", T0 + 48 * HOUR)
    assert [s.segment_id for s in space.segments()] == [s2]
    space.close()
    reopened = open_space(space_dir, clock, mid_term_capacity=1)
    assert page(reopened, p1).tier == "archived" and page(reopened, p1).segment_id == s1
    assert top_hit(reopened, axis(DIM, 0)) == (p1, pytest.approx(1.0))
    # An archived segment is out of mid-term memory: a matching topic opens a new segment.
    (p3,) = add_pages(reopened, axis(DIM, 0))
    s3 = file_topic(reopened, [p3], axis(DIM, 0), ["tea"], "Tea again.", T0 + 49 * HOUR)
    assert s3 not in (s1, s2)
    reopened.close()


def test_eviction_uses_the_heat_of_now_so_a_long_untouched_segment_goes_first(
    space_dir: Path, clock: FakeClock
) -> None:
    space = open_space(space_dir, clock, mid_term_capacity=2, heat_gamma=2.0)
    p1, p2, p3, p4 = add_pages(space, axis(DIM, 0), axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
    old = file_topic(space, [p1, p2], axis(DIM, 0), ["tea"], "Tea.", T0)
    assert space.segment_heats(T0)[old] == pytest.approx(2 + 2.0)
    later = T0 + 500 * HOUR
    newer = file_topic(space, [p3], axis(DIM, 1), ["boats"], "Boats.", later)
    newest = file_topic(space, [p4], axis(DIM, 2), ["trains"], "Trains.", later)
    # Frozen at filing time `old` would be the hottest (4 vs 3, 3); read at `later` it has cooled to ~2.
    assert [s.segment_id for s in space.segments()] == [newer, newest]
    assert page(space, p1).tier == page(space, p2).tier == "archived"
    assert space.store.segment_page_ids(old) == [p1, p2]
    space.close()


# --- promotion ----------------------------------------------------------------------------------------
def test_every_hot_segment_with_new_pages_is_promoted_and_a_hot_analyzed_one_does_not_block(
    space: MemorySpace,
) -> None:
    vectors = [axis(DIM, 0)] * 5 + [axis(DIM, 1)] * 5 + [axis(DIM, 2)] * 2
    ids = add_pages(space, *vectors)
    s1 = file_topic(space, ids[:5], axis(DIM, 0), ["tea"], "Tea.", T0)
    s2 = file_topic(space, ids[5:10], axis(DIM, 1), ["boats"], "Boats.", T0)
    s3 = file_topic(space, ids[10:], axis(DIM, 2), ["trains"], "Trains.", T0)
    assert space.segments_to_promote(T0) == [s1, s2]  # heat 6, 6; s3 has 3 < 5

    space.apply(MarkAnalyzed(segment_id=s1, page_ids=ids[:5]))
    for _ in range(20):
        space.apply(RecordVisits(segment_ids=[s1], at=T0))
    heats = space.segment_heats(T0)
    assert heats[s1] > heats[s2]  # s1 is the hottest, with nothing new
    assert space.segments_to_promote(T0) == [s2]
    assert s3 not in space.segments_to_promote(T0)


def test_mark_analyzed_resets_counters_and_marks_pages(space: MemorySpace) -> None:
    p1, p2, p3 = add_pages(space, axis(DIM, 0), axis(DIM, 0), axis(DIM, 0))
    s1 = file_topic(space, [p1, p2], axis(DIM, 0), ["tea"], "Tea.", T0)
    space.apply(RecordVisits(segment_ids=[s1], at=T0))
    assert [p.page_id for p in space.unanalyzed_pages(s1)] == [p1, p2]
    space.apply(MarkAnalyzed(segment_id=s1, page_ids=[p1, p2]))
    (segment,) = space.segments()
    assert (segment.visit_count, segment.interaction_count) == (0, 0)
    assert space.segment_heats(T0)[s1] == pytest.approx(1.0)
    assert space.unanalyzed_pages(s1) == []
    assert all(p.analyzed for p in space.pages([p1, p2]))
    assert s1 not in space.store.unanalyzed_segment_ids()

    assert file_topic(space, [p3], axis(DIM, 0), ["tea"], "More tea.", T0) == s1
    assert [p.page_id for p in space.unanalyzed_pages(s1)] == [p3]


# --- long-term facts ----------------------------------------------------------------------------------
def add_fact(
    space: MemorySpace, text: str, vector: np.ndarray, kind: KnowledgeKind = "user", ts: str = "t"
) -> list[int]:
    return space.apply(
        AddKnowledge(knowledge_kind=kind, texts=[text], vectors=vector.reshape(1, -1), timestamp=ts)
    )


def test_restating_a_fact_refreshes_it_instead_of_adding_a_copy(space: MemorySpace, clock: FakeClock) -> None:
    (first,) = add_fact(space, "User likes tea.", axis(DIM, 0), ts="2024-05-01 10:00:00")
    clock.advance(hours=1)
    assert add_fact(space, "user likes  TEA", axis(DIM, 6), ts="2024-05-02 10:00:00") == []
    (entry,) = space.knowledge("user")
    assert (entry.entry_id, entry.knowledge, entry.timestamp) == (
        first,
        "User likes tea.",
        "2024-05-02 10:00:00",
    )
    assert space.store.knowledge_history("user") == []


def test_a_near_duplicate_fact_replaces_the_old_one_which_stays_in_history(space: MemorySpace) -> None:
    (old,) = add_fact(space, "User lives in Paris.", axis(DIM, 0))
    (other,) = add_fact(space, "User has a cat.", axis(DIM, 3))
    (new,) = add_fact(space, "User lives in Lyon.", unit(DIM, (0, 10), (1, 1)))  # cos 0.995
    assert [e.knowledge for e in space.knowledge("user")] == ["User has a cat.", "User lives in Lyon."]
    (history,) = space.store.knowledge_history("user")
    assert (history["entry_id"], history["text"], history["replaced_by"]) == (
        old,
        "User lives in Paris.",
        new,
    )
    assert other in [e.entry_id for e in space.knowledge("user")]


def test_facts_are_bounded_and_the_least_recently_confirmed_is_dropped_to_history(
    space_dir: Path, clock: FakeClock
) -> None:
    space = open_space(space_dir, clock, long_term_knowledge_capacity=2)
    add_fact(space, "User's name is Ann.", axis(DIM, 0))
    clock.advance(60)
    add_fact(space, "User saw a film.", axis(DIM, 1))
    clock.advance(60)
    add_fact(space, "User's name is Ann.", axis(DIM, 0))  # confirmed again
    clock.advance(60)
    add_fact(space, "User works as a nurse.", axis(DIM, 2))
    assert [e.knowledge for e in space.knowledge("user")] == ["User's name is Ann.", "User works as a nurse."]
    (dropped,) = space.store.knowledge_history("user")
    assert (dropped["text"], dropped["replaced_by"]) == ("User saw a film.", None)
    space.close()


def test_user_and_assistant_facts_are_deduplicated_separately(space: MemorySpace) -> None:
    add_fact(space, "Likes tea.", axis(DIM, 0), kind="user")
    add_fact(space, "Likes tea.", axis(DIM, 0), kind="assistant")
    assert len(space.knowledge("user")) == len(space.knowledge("assistant")) == 1


def test_add_knowledge_with_mismatched_vectors_changes_nothing(space: MemorySpace) -> None:
    add_fact(space, "User likes tea.", axis(DIM, 0))
    with pytest.raises(InvalidInputError, match="vectors"):
        space.apply(
            AddKnowledge(
                knowledge_kind="user", texts=["a", "b"], vectors=np.stack([axis(DIM, 1)]), timestamp="t"
            )
        )
    assert [e.knowledge for e in space.knowledge("user")] == ["User likes tea."]


# --- profile ------------------------------------------------------------------------------------------
def test_profile_updates_keep_every_version_and_ignore_empty_or_unchanged_text(space: MemorySpace) -> None:
    space.apply(UpdateProfile(text="- Likes tea"))
    space.apply(UpdateProfile(text="  - Likes tea  "))
    space.apply(UpdateProfile(text="   "))
    assert space.profile() == "- Likes tea"
    assert space.store.profile_version_count() == 1
    space.apply(UpdateProfile(text="- Likes tea\n- Lives in Lyon", source_segment_id=3))
    assert space.profile() == "- Likes tea\n- Lives in Lyon"
    assert space.store.profile_version_count() == 2


# --- reopening, model fingerprint, index rebuild ------------------------------------------------------
def build_state(space: MemorySpace) -> None:
    p1, p2, p3, _ = add_pages(space, axis(DIM, 0), unit(DIM, (0, 1), (5, 0.2)), axis(DIM, 1), axis(DIM, 2))
    space.apply(LinkChain(page_id=p1, continues_previous=False, chain_summary="tea chat"))
    space.apply(LinkChain(page_id=p2, continues_previous=True, chain_summary="tea chat, more"))
    space.apply(LinkChain(page_id=p3, continues_previous=False, chain_summary="boats"))
    s1 = file_topic(space, [p1, p2], axis(DIM, 0), ["tea"], "Tea.", T0)
    file_topic(space, [p3], axis(DIM, 1), ["boats"], "Boats.", T0)
    space.apply(RecordVisits(segment_ids=[s1], at=T0 + HOUR))
    space.apply(MarkAnalyzed(segment_id=s1, page_ids=[p1]))
    space.apply(UpdateProfile(text="- Likes tea"))
    add_fact(space, "User likes tea.", axis(DIM, 0))
    add_fact(space, "User likes green tea.", unit(DIM, (0, 10), (1, 1)))
    add_fact(space, "Assistant: I recommend oolong.", axis(DIM, 3), kind="assistant")


def observable_state(space: MemorySpace) -> dict[str, object]:
    return {
        "pages": all_pages(space),
        "segments": space.segments(),
        "segment_vectors": space.store.active_segments_with_vectors(DIM)[1].tolist(),
        "last_chained": space.last_chained_page(),
        "user": space.knowledge("user"),
        "assistant": space.knowledge("assistant"),
        "history": [tuple(row.values()) for row in space.store.knowledge_history("user")],
        "profile": (space.profile(), space.store.profile_version_count()),
        "heats": space.segment_heats(T0 + 2 * HOUR),
        "index": space.page_index.count(),
        "hits": [top_hit(space, axis(DIM, i))[0] for i in (0, 1, 2)],
    }


def test_reopening_restores_everything(space_dir: Path, clock: FakeClock) -> None:
    space = open_space(space_dir, clock)
    build_state(space)
    before = observable_state(space)
    space.close()
    reopened = open_space(space_dir, clock)
    assert observable_state(reopened) == before
    assert before["index"] == 4 and before["hits"] == [1, 3, 4]
    reopened.close()


def test_opening_with_another_embedding_model_is_an_error_naming_reindex(
    space_dir: Path, clock: FakeClock
) -> None:
    space = open_space(space_dir, clock)
    add_pages(space, axis(DIM, 0))
    space.close()
    with pytest.raises(EmbeddingModelMismatchError, match="memoryos reindex") as raised:
        open_space(space_dir, clock, model="another-model")
    assert MODEL in str(raised.value) and "another-model" in str(raised.value)
    reopened = open_space(space_dir, clock)
    assert reopened.embedding_model == MODEL and len(reopened.short_term_pages()) == 1
    reopened.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated", "empty"])
def test_a_missing_or_corrupt_page_index_is_rebuilt_from_the_store(
    space_dir: Path, clock: FakeClock, damage: str
) -> None:
    space = open_space(space_dir, clock)
    ids = add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
    space.close()
    index_path = space_dir / PAGE_INDEX_FILE
    assert index_path.exists()
    good = index_path.read_bytes()
    if damage == "missing":
        index_path.unlink()
    elif damage == "garbage":
        index_path.write_bytes(b"\x00not an index" * 50)
    elif damage == "truncated":
        index_path.write_bytes(good[: len(good) // 2])
    else:
        index_path.write_bytes(b"")

    reopened = open_space(space_dir, clock)
    assert reopened.page_index.count() == 3
    assert [top_hit(reopened, axis(DIM, i))[0] for i in (0, 1, 2)] == ids
    reopened.close()
    # The rebuilt index was written back, whole, so the next open need not rebuild again.
    loaded, covered = FaissIndex.load(index_path, DIM)
    assert (loaded.count(), covered) == (3, ids[-1])
    assert not [p.name for p in space_dir.iterdir() if p.name.endswith(".tmp")]


def test_pages_added_after_the_last_snapshot_are_replayed_on_open(space_dir: Path, clock: FakeClock) -> None:
    space = open_space(space_dir, clock)
    early = add_pages(space, axis(DIM, 0), axis(DIM, 1))
    space.snapshot()
    late = add_pages(space, axis(DIM, 2), axis(DIM, 3))
    # No close: the process "crashed" with two pages newer than the snapshot on disk.
    _, covered = FaissIndex.load(space_dir / PAGE_INDEX_FILE, DIM)
    assert covered == early[-1]
    recovered = open_space(space_dir, clock)
    assert recovered.page_index.count() == 4
    assert [top_hit(recovered, axis(DIM, i))[0] for i in (0, 1, 2, 3)] == early + late
    recovered.close()
    space.close()


def test_a_segment_just_filed_into_is_not_archived_even_when_coldest(
    space_dir: Path, clock: FakeClock
) -> None:
    """Heat of a new one-page segment filed long ago (its `at`) is the lowest, yet it must survive."""
    space = open_space(space_dir, clock, mid_term_capacity=1)
    pa, pb = add_pages(space, axis(DIM, 0), axis(DIM, 1))
    sa = file_topic(space, [pa], axis(DIM, 0), ["tea"], "Tea.", T0)
    for _ in range(3):
        space.apply(RecordVisits(segment_ids=[sa], at=T0))
    sb = file_topic(space, [pb], axis(DIM, 1), ["boats"], "Boats.", T0 - 100 * HOUR)

    assert [s.segment_id for s in space.segments()] == [sb]
    assert page(space, pa).tier == "archived" and page(space, pb).tier == "mtm"
    space.close()
