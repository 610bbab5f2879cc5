"""Fenced writes on the PostgreSQL store: a stale owner's commit is refused, at whichever point it was
paused, and a frozen transaction cannot hold the shard's fence row past the server's idle timeout."""

import threading
import time
from pathlib import Path

import psycopg
import pytest

from memoryos.config import MemoryConfig
from memoryos.errors import FencedOutError, StorageError
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns
from memoryos.storage.records.factory import ShardFence, database_pool
from memoryos.storage.records.postgres.connection import close_pools
from memoryos.storage.records.postgres.fences import take_shard
from memoryos.types import Turn
from tests.support.fakes import FakeClock, axis

DIM = 4
SHARD = 3


def config(tmp_path: Path, url: str, **settings: object) -> MemoryConfig:
    return MemoryConfig.model_validate(
        {"data_dir": tmp_path, "faiss_use_gpu": "never", "database_url": url, **settings}
    )


def write(n: int) -> AddTurns:
    turn = Turn(user_input=f"user says {n}", agent_response="ok", timestamp="2024-05-01 10:00:00")
    return AddTurns(turns=[turn], vectors=axis(DIM, n % DIM).reshape(1, -1))


class Owner:
    """A worker's view of one shard: the fencing number it took, as the store asks for it."""

    def __init__(self, cfg: MemoryConfig) -> None:
        self.number: int | None = take_shard(database_pool(cfg), SHARD)

    def space(self, cfg: MemoryConfig, directory: Path) -> MemorySpace:
        return MemorySpace(
            directory, cfg, "m", lambda: DIM, FakeClock(), fence=ShardFence(SHARD, lambda: self.number)
        )


def stored_inputs(url: str) -> list[str]:
    with psycopg.connect(url) as connection:
        return [row[0] for row in connection.execute("SELECT user_input FROM pages ORDER BY page_id")]


@pytest.fixture(autouse=True)
def _pools() -> object:
    yield
    close_pools()


def test_a_stale_owner_is_refused_and_the_new_owner_writes(tmp_path: Path, database_url: str) -> None:
    cfg = config(tmp_path, database_url)
    directory = tmp_path / "default" / "u" / "a"
    old = Owner(cfg)
    stale = old.space(cfg, directory)
    stale.apply(write(1))
    new = Owner(cfg)  # the lease moved: a greater number is recorded for the shard
    assert new.number is not None and old.number is not None and new.number > old.number
    fresh = new.space(cfg, directory)
    fresh.apply(write(2))
    with pytest.raises(FencedOutError) as refused:
        stale.apply(write(3))
    assert (refused.value.held, refused.value.recorded) == (old.number, new.number)
    fresh.apply(write(4))
    assert stored_inputs(database_url) == ["user says 1", "user says 2", "user says 4"]
    assert [p.user_input for p in fresh.short_term_pages()] == ["user says 1", "user says 2", "user says 4"]


def test_an_unfenced_process_cannot_write_a_fenced_shard(tmp_path: Path, database_url: str) -> None:
    cfg = config(tmp_path, database_url)
    owner = Owner(cfg)
    owner.number = None  # lost its lease: it holds no number
    with pytest.raises(FencedOutError):
        owner.space(cfg, tmp_path / "default" / "u" / "a").apply(write(1))


def test_a_new_owner_waits_for_a_transaction_past_its_check_and_then_fences_it_out(
    tmp_path: Path, database_url: str
) -> None:
    """Paused after its fence check, before its commit: the new owner's number is recorded only after the
    old transaction ends, so the old commit lands first and every later one is refused."""
    cfg = config(tmp_path, database_url)
    directory = tmp_path / "default" / "u" / "a"
    old = Owner(cfg)
    stale = old.space(cfg, directory)
    stale.apply(write(1))
    checked = threading.Event()
    taken: list[int] = []

    def take_over() -> None:
        checked.wait()
        taken.append(take_shard(database_pool(cfg), SHARD))

    thief = threading.Thread(target=take_over)
    thief.start()
    with stale.store.transaction():
        checked.set()
        time.sleep(0.5)  # the new owner is waiting for the fence row now
        assert not taken
        stale.store.set_meta("during", "check")
    thief.join(timeout=10)
    assert taken
    with pytest.raises(FencedOutError):
        stale.apply(write(2))
    assert stale.store.get_meta("during") == "check"  # committed before the new owner took over


def test_a_transaction_frozen_past_the_idle_timeout_cannot_hold_the_shard(
    tmp_path: Path, database_url: str
) -> None:
    """Paused before its commit for longer than `idle_in_transaction_session_timeout` (a frozen worker):
    the server ends its session, the new owner takes the shard, and the frozen commit fails."""
    cfg = config(tmp_path, database_url, database_idle_in_transaction_timeout_s=0.5)
    directory = tmp_path / "default" / "u" / "a"
    old = Owner(cfg)
    stale = old.space(cfg, directory)
    started = time.monotonic()
    with pytest.raises(StorageError), stale.store.transaction():
        stale.store.set_meta("frozen", "write")
        new_number = take_shard(database_pool(cfg), SHARD)  # another worker, while this one is frozen
    assert time.monotonic() - started < 10
    assert old.number is not None and new_number > old.number
    assert stale.store.get_meta("frozen") is None
