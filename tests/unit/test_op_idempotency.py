"""Ops delivered more than once, planned against a state that moved, or carried as JSON (issue 9).

A queue delivers at least once, and two processes may plan the same consolidation: `apply` must store a
write once, treat a consolidation op whose pages moved as a recorded no-op, and give the same result for
the same op wherever and whenever it is applied (it reads the op's planned time, never a clock).
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import (
    AddKnowledge,
    AddTurns,
    AnyOp,
    EmbedPages,
    FileTopic,
    LinkChain,
    MarkAnalyzed,
    RecordVisits,
    UpdateProfile,
    op_from_json,
    op_to_json,
)
from memoryos.types import Turn
from tests.support.fakes import T0, FakeClock, axis
from tests.support.record_stores import op_log as committed_ops
from tests.support.record_stores import table_rows
from tests.unit.test_space import DIM, all_pages, open_space, turn

pytestmark = pytest.mark.usefixtures("both_record_stores")


@pytest.fixture
def space(tmp_path: Path) -> MemorySpace:
    return open_space(tmp_path / "space", FakeClock())


def op_log(space: MemorySpace) -> list[dict[str, Any]]:
    return committed_ops(space.directory)


def test_the_same_add_delivered_twice_stores_its_pages_once(space: MemorySpace) -> None:
    op = AddTurns(turns=[turn(1), turn(2)], vectors=np.stack([axis(DIM, 0), axis(DIM, 1)]))
    first = space.apply(op)
    assert space.apply(op) == first
    assert space.apply(op_from_json(op_to_json(op))) == first  # as a queue would re-deliver it
    assert [p.page_id for p in all_pages(space)] == first
    assert space.page_index.count() == 2


def test_a_write_replanned_under_a_new_op_id_is_stored_once(space: MemorySpace) -> None:
    """A worker that crashed after applying but before acking plans the write again: new op id, same
    write id."""
    first = space.apply(AddTurns(turns=[turn(1)], write_id="w-1"))
    again = space.apply(AddTurns(turns=[turn(1)], write_id="w-1"))
    assert again == first
    assert len(all_pages(space)) == 1
    assert space.apply(AddTurns(turns=[turn(1)], write_id="w-2")) != first  # another write is stored


@pytest.mark.parametrize(
    "write_id", ["it's", 'a "quoted", {braced} one', "back\\slash\\", "NULL", "}", "ünï\u00e7ødé 🙂"]
)
def test_the_op_log_read_with_a_transactions_begin_finds_any_id(space: MemorySpace, write_id: str) -> None:
    """A database reads the op log's entries for a transaction's ops with its BEGIN, the ids quoted into
    that statement's text. Ops only carry ids of [A-Za-z0-9_-] (`ops.Key`); the store does not lean on
    it: an id full of what SQL and array literals quote is found, and one a character longer is not."""
    store = space.store
    with store.transaction():
        store.log_op("add", T0, {"page_ids": [1]}, "op-'1'", write_id)
    keys = [("op-2", write_id), ("op-'1'", None), ("op-3", write_id + " "), ("op-4", None)]
    with store.transaction(ops=keys):
        found = store.logged_ops(keys)
    assert found == [{"page_ids": [1]}, {"page_ids": [1]}, None, None]
    assert store.logged_ops(keys) == found  # outside a transaction: its own statement


def test_embedding_a_page_twice_keeps_the_first_vector_and_one_index_entry(space: MemorySpace) -> None:
    (page_id,) = space.apply(AddTurns(turns=[turn(1)]))
    space.apply(EmbedPages(page_ids=[page_id], vectors=axis(DIM, 0).reshape(1, -1)))
    space.apply(EmbedPages(page_ids=[page_id], vectors=axis(DIM, 3).reshape(1, -1)))  # another process's
    np.testing.assert_array_equal(space.page_vectors([page_id])[0], axis(DIM, 0))
    assert space.page_index.count() == 1
    assert op_log(space)[-1]["detail"]["page_ids"] == []


def test_a_stale_file_topic_changes_nothing_but_the_log(space: MemorySpace) -> None:
    p1, p2 = space.apply(AddTurns(turns=[turn(1), turn(2)], vectors=np.stack([axis(DIM, 0)] * 2)))
    plan = FileTopic(page_ids=[p1, p2], summary="Tea.", keywords=["tea"], vector=axis(DIM, 0), at=T0)
    other_plan = FileTopic(page_ids=[p1], summary="Boats.", keywords=["boats"], vector=axis(DIM, 5), at=T0)
    space.apply(other_plan)  # another process filed p1 first
    before = (all_pages(space), space.segments())
    assert space.apply(plan) == []
    assert (all_pages(space), space.segments()) == before
    assert op_log(space)[-1]["detail"] == {"stale": "pages no longer all in short-term memory"}


def test_a_stale_link_chain_changes_nothing(space: MemorySpace) -> None:
    p1, p2, p3 = space.apply(AddTurns(turns=[turn(1), turn(2), turn(3)]))
    space.apply(LinkChain(page_id=p1, continues_previous=False, chain_summary="s1", previous_page_id=0))
    # Planned when nothing was chained yet, applied after p1 was: another page was chained since.
    space.apply(LinkChain(page_id=p2, continues_previous=True, chain_summary="late", previous_page_id=0))
    assert space.pages([p2])[0].chain_id is None
    space.apply(LinkChain(page_id=p2, continues_previous=True, chain_summary="s12", previous_page_id=p1))
    assert space.pages([p2])[0].chain_id == space.pages([p1])[0].chain_id
    # The same page linked again (a duplicate delivery) is stale too.
    space.apply(LinkChain(page_id=p2, continues_previous=False, chain_summary="again", previous_page_id=p2))
    assert [p.meta_info for p in space.pages([p1, p2, p3])] == ["s12", "s12", None]


def test_mark_analyzed_twice_keeps_visits_recorded_in_between(space: MemorySpace) -> None:
    (p1,) = space.apply(AddTurns(turns=[turn(1)], vectors=axis(DIM, 0).reshape(1, -1)))
    space.apply(FileTopic(page_ids=[p1], summary="Tea.", keywords=["tea"], vector=axis(DIM, 0), at=T0))
    (segment,) = space.segments()
    mark = MarkAnalyzed(segment_id=segment.segment_id, page_ids=[p1], at=T0)
    space.apply(mark)
    space.apply(RecordVisits(segment_ids=[segment.segment_id], at=T0 + 1))
    space.apply(MarkAnalyzed(segment_id=segment.segment_id, page_ids=[p1], at=T0 + 2))  # replanned
    assert space.segments()[0].visit_count == 1


def ops_of_a_session() -> list[AnyOp]:
    """Every kind of op, each with its planned time, as a planner would hand them to a queue."""
    vectors = np.stack([axis(DIM, 0), axis(DIM, 0), axis(DIM, 4)])
    turns = [
        Turn(user_input=f"u{i} ✓", agent_response=f"a{i}", timestamp="2024-05-01 10:00:00") for i in range(3)
    ]
    return [
        AddTurns(turns=turns[:2], vectors=vectors[:2], at=T0),
        AddTurns(turns=turns[2:], at=T0 + 1),
        EmbedPages(page_ids=[3], vectors=vectors[2:], at=T0 + 2),
        LinkChain(page_id=1, continues_previous=False, chain_summary="tea", previous_page_id=0, at=T0 + 3),
        FileTopic(page_ids=[1, 2], summary="Tea.", keywords=["tea"], vector=axis(DIM, 0), at=T0 + 4),
        RecordVisits(segment_ids=[1], at=T0 + 5),
        UpdateProfile(text="Likes tea.", source_segment_id=1, at=T0 + 6),
        AddKnowledge(
            knowledge_kind="user", texts=["likes tea"], vectors=vectors[:1], timestamp="t", at=T0 + 7
        ),
        MarkAnalyzed(segment_id=1, page_ids=[1, 2], at=T0 + 8),
    ]


def store_rows(space: MemorySpace) -> dict[str, list[tuple[object, ...]]]:
    tables = ["pages", "segments", "chains", "knowledge", "profile_versions", "meta", "op_log"]
    return {table: table_rows(space.directory, table) for table in tables}


def test_ops_replayed_from_json_elsewhere_and_later_rebuild_the_same_store(tmp_path: Path) -> None:
    """Apply is deterministic given the op: a second space, with a clock hours later, fed the JSON of
    the same ops, ends with byte-identical rows — times, ids and vectors included."""
    original = open_space(tmp_path / "a", FakeClock())
    replayed = open_space(tmp_path / "b", FakeClock(T0 + 9 * 3600))
    for op in ops_of_a_session():
        original.apply(op)
        replayed.apply(op_from_json(op_to_json(op)))
    assert store_rows(original) == store_rows(replayed)
    logged = op_log(original)
    assert [entry["kind"] for entry in logged] == [op.kind for op in ops_of_a_session()]
    assert [entry["at"] for entry in logged] == [T0 + i for i in range(9)]
    assert all(entry["op_id"] for entry in logged)
    assert logged[0]["write_id"] and logged[0]["detail"]["created"] == [1, 2]
    for space in (original, replayed):
        space.close()
