"""Runs of queued writes: a worker applies a space's consecutive writes in one transaction (one commit)
instead of one each, and `space_runs` decides which entries of a shard's batch form a run."""

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from memoryos.errors import InvalidInputError
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns, AnyOp, ForgetSpace, SetSpaceTTL
from memoryos.space.pool import SpaceKey
from memoryos.storage.records.base import OpKey
from services.queue.settings import QueueSettings
from services.worker.runs import Delivered, space_runs
from tests.support.fakes import FakeClock, axis
from tests.unit.test_space import DIM, all_pages, open_space, top_hit, turn

MAYA = SpaceKey("acme", "maya", "helper")
SAM = SpaceKey("acme", "sam", "helper")


@pytest.fixture
def space(tmp_path: Path) -> Iterator[MemorySpace]:
    space = open_space(tmp_path / "space", FakeClock())
    yield space
    space.close()


def count_transactions(space: MemorySpace, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one per transaction the space's store opens."""
    opened: list[int] = []
    transaction = space.store.transaction

    @contextlib.contextmanager
    def counted(
        wait_for_writers: bool = True, ops: Sequence[OpKey] = (), pages: Sequence[int] = ()
    ) -> Iterator[None]:
        opened.append(1)
        with transaction(wait_for_writers, ops, pages):
            yield

    monkeypatch.setattr(space.store, "transaction", counted)
    return opened


def test_a_run_of_writes_commits_once_and_returns_each_writes_pages(
    space: MemorySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = [AddTurns(turns=[turn(2 * i), turn(2 * i + 1)], write_id=f"w{i}") for i in range(5)]
    opened = count_transactions(space, monkeypatch)
    created = space.apply_ops(writes)
    assert len(opened) == 1
    assert created == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]
    assert [p.user_input for p in all_pages(space)] == [turn(n).user_input for n in range(10)]


def test_a_write_repeated_in_a_run_or_after_it_is_stored_once(space: MemorySpace) -> None:
    first = AddTurns(turns=[turn(1)], write_id="w-1")
    retry = AddTurns(turns=[turn(1)], write_id="w-1")  # a client's retry: new op id, same write id
    created = space.apply_ops([first, AddTurns(turns=[turn(2)], write_id="w-2"), retry, first])
    assert created == [[1], [2], [1], [1]]
    assert space.apply_ops([retry]) == [[1]]
    assert len(all_pages(space)) == 2


def test_a_run_with_a_bad_write_stores_none_of_it(space: MemorySpace) -> None:
    """All or none: the worker then applies the run write by write to find the one at fault."""
    space.apply_ops([AddTurns(turns=[turn(0)], vectors=axis(DIM, 0).reshape(1, -1))])
    good = AddTurns(turns=[turn(1)], vectors=axis(DIM, 1).reshape(1, -1))
    bad = AddTurns(turns=[turn(2)], vectors=np.ones((1, DIM + 1), np.float32))
    with pytest.raises(InvalidInputError, match="vectors"):
        space.apply_ops([good, bad])
    assert len(all_pages(space)) == 1 and space.page_index.count() == 1
    assert space.apply_ops([good]) == [[2]]


def test_vectors_carried_by_a_runs_writes_are_searchable_after_it(space: MemorySpace) -> None:
    writes = [AddTurns(turns=[turn(i)], vectors=axis(DIM, i).reshape(1, -1)) for i in range(3)]
    assert space.apply_ops(writes) == [[1], [2], [3]]
    assert space.page_index.count() == 3
    assert top_hit(space, axis(DIM, 2))[0] == 3


def delivered(space: SpaceKey, op: AnyOp, n: int) -> Delivered:
    return Delivered(f"{n}-0".encode(), {}, space, op)


def labels(runs: list[list[Delivered]]) -> list[list[str]]:
    return [[entry.entry_id.decode().split("-")[0] for entry in run] for run in runs]


def test_runs_keep_each_spaces_order_and_join_only_its_consecutive_writes() -> None:
    entries = [
        delivered(MAYA, AddTurns(turns=[turn(0)]), 0),
        delivered(SAM, AddTurns(turns=[turn(1)]), 1),
        delivered(MAYA, AddTurns(turns=[turn(2)]), 2),
        delivered(MAYA, SetSpaceTTL(ttl_s=60.0), 3),
        delivered(SAM, AddTurns(turns=[turn(4)]), 4),
        delivered(MAYA, AddTurns(turns=[turn(5)]), 5),
        delivered(MAYA, ForgetSpace(), 6),
        delivered(MAYA, AddTurns(turns=[turn(7)]), 7),
    ]
    assert labels(space_runs(entries, longest=64)) == [["0", "2"], ["3"], ["5"], ["6"], ["7"], ["1", "4"]]


def test_runs_are_at_most_the_longest_allowed() -> None:
    entries = [delivered(MAYA, AddTurns(turns=[turn(i)]), i) for i in range(5)]
    assert labels(space_runs(entries, longest=2)) == [["0", "1"], ["2", "3"], ["4"]]
    assert labels(space_runs(entries, longest=1)) == [["0"], ["1"], ["2"], ["3"], ["4"]]


@pytest.mark.parametrize("value", [0, -1])
def test_a_write_run_below_one_is_refused_naming_the_setting(
    value: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYOS_WRITE_RUN", str(value))
    with pytest.raises(ValidationError, match="write_run"):
        QueueSettings()
