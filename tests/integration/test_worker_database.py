"""Workers on the PostgreSQL store, against a real `redis-server` and a real PostgreSQL: workers with
data directories of their own (no shared volume) hand shards back and forth under writes, every
acknowledged write is stored once and in order, either worker answers reads, a forget holds wherever
the space was open, and a worker fenced out of a shard stops serving it."""

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from memoryos import MemoryConfig
from memoryos.space.ops import ForgetSpace
from memoryos.space.pool import SpaceKey
from memoryos.space.tombstones import prune_snapshot_cache
from memoryos.space.writes import plan_write
from memoryos.storage.records.postgres.connection import close_pools
from services.queue.keys import Keys, shard_of
from services.queue.owner_calls import OwnerCallClient, OwnerRefusedError, OwnerUnavailableError
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import LIST_PAGES, RETRIEVE
from tests.support.postgres_server import running_postgres
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

SHARDS = 4
USERS = [SpaceKey("acme", f"user{i}", "helper") for i in range(8)]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def settings(redis_server: RedisServer, request: pytest.FixtureRequest) -> QueueSettings:
    return QueueSettings(
        redis_url=redis_server.url,
        redis_namespace=f"db{abs(hash(request.node.name)) % 10**8}",
        shard_count=SHARDS,
        lease_ttl_s=1.0,
        read_timeout_s=15.0,
        max_deliveries=3,
    )


@pytest.fixture(autouse=True)
def _pools() -> Iterator[None]:
    yield
    close_pools()


def worker_config(data_dir: Path, database_url: str | None) -> MemoryConfig:
    return MemoryConfig(data_dir=data_dir, database_url=database_url, faiss_use_gpu="never")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], MemoryConfig]:
    """Each worker's settings on the test's store: a database, each worker with a data directory of its
    own; or SQLite files, every worker on the one host's data directory."""
    if request.param == "sqlite":
        return lambda name: worker_config(tmp_path / "shared", None)
    url = request.getfixturevalue("database_url")
    return lambda name: worker_config(tmp_path / name, url)


def ask(reads: OwnerCallClient, key: SpaceKey, call: Any, args: dict[str, Any]) -> Any:
    """A read, asked again while its shard is moving between workers (what a client does with a retry)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return reads.ask(key, call, args)
        except (OwnerRefusedError, OwnerUnavailableError) as moving:
            if "moved to another worker" not in str(moving) and "no worker owns" not in str(moving):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def write(queue: WriteQueue, key: SpaceKey, text: str) -> str:
    op = plan_write([{"user_input": text, "agent_response": "Noted."}], max_text_chars=2000, at=time.time())
    return queue.enqueue(key, op)


def test_two_workers_without_a_shared_volume_hand_shards_back_and_forth_under_writes(
    settings: QueueSettings, database_url: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    written: dict[SpaceKey, list[str]] = {key: [] for key in USERS}
    stop_writing = threading.Event()

    def keep_writing() -> None:
        n = 0
        while not stop_writing.is_set():
            key = USERS[n % len(USERS)]
            text = f"{key.user_id} note {n}"
            write(queue, key, text)  # acknowledged: Redis holds it
            written[key].append(text)
            n += 1
            time.sleep(0.005)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    first = Running(settings, worker_config(tmp_path / "a", database_url), "w-a")
    second: Running | None = None
    try:
        # shards move from one worker to the other and back, under writes: twice, so that the second
        # newcomer takes spaces both the first newcomer and `first` wrote (a third round repeated that case)
        for round_ in range(2):
            second = Running(settings, worker_config(tmp_path / f"b{round_}", database_url), f"w-b{round_}")
            wait_for(lambda: len(first.worker.leases.owned) == SHARDS // 2, timeout_s=20)
            time.sleep(0.3)
            second.stop()
            wait_for(lambda: len(first.worker.leases.owned) == SHARDS, timeout_s=20)
        second = Running(settings, worker_config(tmp_path / "c", database_url), "w-c")
        wait_for(lambda: len(second.worker.leases.owned) == SHARDS // 2, timeout_s=20)
        stop_writing.set()
        writer.join()
        for key in USERS:  # whichever worker owns the shard answers, with every write once, in order
            listed = ask(reads, key, LIST_PAGES, {"limit": 1000})
            assert [page.user_input for page in listed.pages] == written[key]
        assert sum(len(texts) for texts in written.values()) > 50
        assert not client.lrange(Keys(settings.redis_namespace).dead_letters(), 0, -1)
        # no space stays open in a worker that does not own its shard: a shard just moved has its spaces
        # closed at its former owner's next round, so this is waited for, not read at one instant
        for running in (first, second):
            wait_for(
                lambda running=running: all(
                    shard_of(key, SHARDS) in running.worker.leases.owned
                    for key in running.worker.spaces.pool.open_keys()
                )
            )
    finally:
        stop_writing.set()
        writer.join()
        first.stop()
        if second is not None:
            second.stop()


def test_a_forget_erases_a_space_another_worker_still_has_open(
    settings: QueueSettings, store: Callable[[str], MemoryConfig], tmp_path: Path
) -> None:
    """The shard moved while its old owner had the space open: the forget still erases everything, and
    nothing goes to the dead letters, on either store."""
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    maya = USERS[0]
    first = Running(settings, store("a"), "w-a")
    try:
        write(queue, maya, "Maya's secret.")
        assert ask(reads, maya, LIST_PAGES, {}).total == 1
        second = Running(settings, store("b"), "w-b")
        try:
            wait_for(lambda: len(first.worker.leases.owned) == SHARDS // 2, timeout_s=20)
            queue.purge(maya)
            queue.enqueue(maya, ForgetSpace())
            with pytest.raises(OwnerRefusedError) as gone:
                ask(reads, maya, LIST_PAGES, {})  # waits for the forget, queued before it
            assert gone.value.kind == "SpaceNotFoundError", str(gone.value)
            assert not client.lrange(Keys(settings.redis_namespace).dead_letters(), 0, -1)
        finally:
            second.stop()
        with pytest.raises(OwnerRefusedError):
            ask(reads, maya, RETRIEVE, {"query": "secret"})
    finally:
        first.stop()
    config = store("a")
    if config.database_url is not None:
        with psycopg.connect(config.database_url.get_secret_value()) as connection:
            assert connection.execute("SELECT COUNT(*) FROM spaces").fetchone() == (0,)
            assert connection.execute("SELECT COUNT(*) FROM pages").fetchone() == (0,)
            assert connection.execute("SELECT COUNT(*) FROM tombstones").fetchone() == (1,)
        assert not list((tmp_path / "b").glob("acme/user0/*"))  # the forgetting worker's cache went too
        # The other worker's cached snapshot of the space goes at its next prune (at its start, then
        # every CACHE_PRUNE_S), never loaded meanwhile (its incarnation is gone).
        prune_snapshot_cache(config, set())
    assert not list(config.data_dir.glob("acme/user0/*"))  # no file, no cached snapshot of hers left


def test_a_worker_frozen_past_its_lease_is_fenced_out_and_nothing_is_lost_or_doubled(
    settings: QueueSettings, store: Callable[[str], MemoryConfig]
) -> None:
    """Worker A freezes in the middle of applying a write (a GC pause, a stalled call) for longer than its
    lease; worker B takes every shard, claims A's unacknowledged entries and applies them with the writes
    that follow. When A wakes, its write is refused by the shard's fence, and A stops serving the shard."""
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    maya = USERS[0]
    first = Running(settings, store("a"), "w-a")
    frozen, thaw = threading.Event(), threading.Event()
    apply_ops = first.worker._apply_ops

    def freezing(key: SpaceKey, ops: list[Any]) -> object:
        if not frozen.is_set():
            frozen.set()
            thaw.wait(timeout=30)  # no renewal meanwhile: the main loop is here
        return apply_ops(key, ops)

    first.worker._apply_ops = freezing  # type: ignore[method-assign]
    stopped: list[int] = []  # the shards A stopped serving, kept: it may win one back at once
    stop_serving = first.worker._stop_serving

    def recording(shards: set[int]) -> None:
        stopped.extend(shards)
        stop_serving(shards)

    first.worker._stop_serving = recording  # type: ignore[method-assign]
    second: Running | None = None
    try:
        write(queue, maya, "written before the freeze")
        assert frozen.wait(timeout=10)
        second = Running(settings, store("b"), "w-b")
        wait_for(lambda: len(second.worker.leases.owned) == SHARDS, timeout_s=20)
        write(queue, maya, "written while A is frozen")
        listed = ask(reads, maya, LIST_PAGES, {})
        assert [p.user_input for p in listed.pages] == [
            "written before the freeze",
            "written while A is frozen",
        ]
        thaw.set()  # A wakes and tries to commit the write B already applied
        # A stops serving the shard; B gives its surplus back once A is live again, and A may take the
        # shard again within a few hundred milliseconds: a look at A's leases could miss the moment
        wait_for(lambda: shard_of(maya, SHARDS) in stopped)
        write(queue, maya, "written after A woke")
        listed = ask(reads, maya, LIST_PAGES, {})
        assert [p.user_input for p in listed.pages] == [
            "written before the freeze",
            "written while A is frozen",
            "written after A woke",
        ]
        assert not client.lrange(Keys(settings.redis_namespace).dead_letters(), 0, -1)
        # A closes what it had open of the shard it lost, at its next round, unless the shard came back
        # to it since (B gives back its surplus once A is live again), under a number of its own
        wait_for(
            lambda: (
                maya not in first.worker.spaces.pool.open_keys()
                or shard_of(maya, SHARDS) in first.worker.leases.owned
            )
        )
    finally:
        thaw.set()
        first.stop()
        if second is not None:
            second.stop()


def test_workers_share_a_server_with_few_connections(settings: QueueSettings, tmp_path: Path) -> None:
    """Two workers with a pool of 2 each on a server allowing 8 connections (3 of them reserved for
    superusers): every process stays within its cap while 8 users write and read at once, so nothing is
    refused for want of a connection."""
    with running_postgres(max_connections=8) as server:
        client = redis.Redis.from_url(settings.redis_url)
        queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
        small = {"database_pool_size": 2}
        first = Running(settings, worker_config(tmp_path / "a", server.url).model_copy(update=small), "w-a")
        second = Running(settings, worker_config(tmp_path / "b", server.url).model_copy(update=small), "w-b")
        try:
            wait_for(lambda: len(first.worker.leases.owned) == SHARDS // 2, timeout_s=20)
            for n in range(40):
                write(queue, USERS[n % len(USERS)], f"note {n}")
            for key in USERS:
                texts = [page.user_input for page in ask(reads, key, LIST_PAGES, {"limit": 100}).pages]
                assert texts == [f"note {n}" for n in range(40) if USERS[n % len(USERS)] == key]
            assert not client.lrange(Keys(settings.redis_namespace).dead_letters(), 0, -1)
        finally:
            first.stop()
            second.stop()


def test_the_database_killed_and_restarted_loses_no_acknowledged_write(
    settings: QueueSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL SIGKILLed while writes are queued and applied, then started again: every acknowledged
    write is stored once and in order, none dead-lettered (a database away is retried, uncounted)."""

    def failed_connects() -> int:
        """The worker's connection pool's failed attempts to reach the server (each logged)."""
        return sum(
            record.name == "psycopg.pool" and "error connecting" in record.getMessage()
            for record in list(caplog.records)
        )

    with running_postgres() as server:
        client = redis.Redis.from_url(settings.redis_url)
        queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
        worker = Running(settings, worker_config(tmp_path / "a", server.url), "w-a")
        try:
            for n in range(20):
                write(queue, USERS[n % 2], f"before {n}")
            server.kill()
            for n in range(20):
                write(queue, USERS[n % 2], f"while down {n}")  # acknowledged by Redis alone
            # The worker tries, and fails, meanwhile: waited for, not slept (a fixed 2 s hoped for it,
            # and, with the server's start, often outlasted the worker's 5 s wait for a connection,
            # which then failed its write and its leases, and took seconds more to recover).
            wait_for(lambda: failed_connects() > 0)
            server.start()
            for n in range(10):
                write(queue, USERS[n % 2], f"after {n}")
            for index, key in enumerate(USERS[:2]):
                texts = [page.user_input for page in ask(reads, key, LIST_PAGES, {"limit": 100}).pages]
                expected = [
                    f"{phase} {n}"
                    for phase, count in (("before", 20), ("while down", 20), ("after", 10))
                    for n in range(count)
                    if n % 2 == index
                ]
                assert texts == expected
            assert not client.lrange(Keys(settings.redis_namespace).dead_letters(), 0, -1)
        finally:
            worker.stop()
