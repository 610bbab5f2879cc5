"""Fenced writes on one host: the SQLite store checks the shard's number in the data directory's fence
files before each commit, so a worker whose lease moved on commits nothing more."""

from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.errors import FencedOutError
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns
from memoryos.storage.records.factory import ShardFence
from memoryos.storage.records.sqlite import fences
from memoryos.types import Turn
from tests.support.fakes import FakeClock, axis

DIM = 4
SHARD = 2


def write(n: int) -> AddTurns:
    turn = Turn(user_input=f"user says {n}", agent_response="ok", timestamp="2024-05-01 10:00:00")
    return AddTurns(turns=[turn], vectors=axis(DIM, n % DIM).reshape(1, -1))


def test_numbers_only_grow_and_the_shards_file_holds_its_owners(tmp_path: Path) -> None:
    first = fences.take_shard(tmp_path, SHARD)
    other = fences.take_shard(tmp_path, SHARD + 1)
    second = fences.take_shard(tmp_path, SHARD)
    assert first < other < second
    assert fences.recorded(tmp_path, SHARD) == second and fences.recorded(tmp_path, 9) is None


def test_a_stale_owner_commits_nothing_and_the_new_owner_writes(tmp_path: Path) -> None:
    config = MemoryConfig(data_dir=tmp_path, faiss_use_gpu="never")
    directory = tmp_path / "default" / "u" / "a"
    held = {"old": fences.take_shard(tmp_path, SHARD)}
    stale = MemorySpace(
        directory, config, "m", lambda: DIM, FakeClock(), fence=ShardFence(SHARD, lambda: held["old"])
    )
    stale.apply(write(1))
    new_number = fences.take_shard(tmp_path, SHARD)
    with pytest.raises(FencedOutError) as refused:
        stale.apply(write(2))
    assert (refused.value.held, refused.value.recorded) == (held["old"], new_number)
    stale.close()
    fresh = MemorySpace(
        directory, config, "m", lambda: DIM, FakeClock(), fence=ShardFence(SHARD, lambda: new_number)
    )
    fresh.apply(write(3))
    assert [p.user_input for p in fresh.short_term_pages()] == ["user says 1", "user says 3"]
    np.testing.assert_equal(fresh.page_index.count(), 2)
    fresh.close()
