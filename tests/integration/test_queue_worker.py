"""The Redis write queue and workers against a real `redis-server`: writes applied in order and once,
reads through the owning worker, dead letters, forget purging Redis, shards shared, taken over and
released. Workers run in threads here (hashed fake embedder, offline LLM); `test_worker_process.py`
runs the real `memoryos worker` process."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from memoryos import MemoryConfig, Memoryos
from memoryos.errors import InvalidInputError
from memoryos.scheduler import shared_scheduler
from memoryos.space.ops import AddTurns, AnyOp, ForgetSpace
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys, shard_of
from services.queue.owner_calls import OwnerCallClient, OwnerRefusedError, OwnerUnavailableError
from services.queue.producer import QueueFullError, WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import LIST_PAGES, RETRIEVE, STATS, WRITE_STATUS
from services.worker import owner_calls as owner_calls_module
from services.worker.consumer import ShardConsumer
from services.worker.main import Worker
from services.worker.metrics import WorkerCollector
from services.worker.stream_progress import StreamProgress
from tests.support.fakes import BlockedEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

MAYA = SpaceKey("acme", "maya", "helper")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def settings(redis_server: RedisServer, request: pytest.FixtureRequest) -> QueueSettings:
    """A namespace per test: tests share the server, never keys."""
    return QueueSettings(
        redis_url=redis_server.url,
        redis_namespace=f"t{abs(hash(request.node.name)) % 10**8}",
        shard_count=8,
        lease_ttl_s=1.0,
        read_timeout_s=10.0,
        max_deliveries=3,
    )


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    return MemoryConfig(data_dir=tmp_path, faiss_use_gpu="never")


def write(queue: WriteQueue, key: SpaceKey, text: str, write_id: str | None = None) -> str:
    op = plan_write(
        [{"user_input": text, "agent_response": "Noted."}],
        max_text_chars=2000,
        at=time.time(),
        write_id=write_id,
    )
    return queue.enqueue(key, op)


def test_writes_apply_in_order_once_and_reads_see_them(settings: QueueSettings, config: MemoryConfig) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    for i in range(30):  # accepted before any worker exists: durable in Redis
        write(queue, MAYA, f"Note {i}: I like topic {i}.", write_id=f"w{i}")
    write(queue, MAYA, "Note 3: I like topic 3.", write_id="w3")  # a client retry of write w3
    with pytest.raises(OwnerUnavailableError, match="no worker owns"):
        reads.ask(MAYA, RETRIEVE, {"query": "topic"})
    worker = Running(settings, config, "w-one")
    try:
        listed = reads.ask(MAYA, LIST_PAGES, {"limit": 100})  # waits for every write sent before it
        texts = [page.user_input for page in listed.pages]
        assert texts == [f"Note {i}: I like topic {i}." for i in range(30)]  # in order, w3 once
        context = reads.ask(MAYA, RETRIEVE, {"query": "Which topic is note 17 about?", "top_k": 3})
        assert "Note 17" in context.retrieved_pages[0].user_input
        status = reads.ask(MAYA, WRITE_STATUS, {"write_id": "w29"})
        assert status is not None and status.searchable
        assert queue.depth() == 0  # applied entries are deleted from Redis
        with pytest.raises(OwnerRefusedError) as missing:
            reads.ask(SpaceKey("acme", "nobody", "helper"), STATS, {})
        assert missing.value.kind == "SpaceNotFoundError"
        assert not (config.data_dir / "acme" / "nobody").exists()  # a read created nothing
    finally:
        worker.stop()
    assert client.get(Keys(settings.redis_namespace).lease(shard_of(MAYA, 8))) is None  # released


def test_a_poison_write_is_dead_lettered_and_the_space_keeps_working(
    settings: QueueSettings, config: MemoryConfig
) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads, keys = (
        WriteQueue(client, settings),
        OwnerCallClient(client, settings),
        Keys(settings.redis_namespace),
    )
    write(queue, MAYA, "Before the poison.")
    client.xadd(keys.writes(queue.shard(MAYA)), {"space": "acme/maya/helper", "op": '{"kind": "add_turns"}'})
    write(queue, MAYA, "After the poison.")
    worker = Running(settings, config, "w-poison")
    try:
        listed = reads.ask(MAYA, LIST_PAGES, {})
        assert [p.user_input for p in listed.pages] == ["Before the poison.", "After the poison."]
        dead = [json.loads(raw) for raw in client.lrange(keys.dead_letters(), 0, -1)]
        assert len(dead) == 1 and dead[0]["space"] == "acme/maya/helper" and "malformed" in dead[0]["error"]
    finally:
        worker.stop()


def test_forget_purges_the_users_writes_from_redis(settings: QueueSettings, config: MemoryConfig) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    other = SpaceKey("acme", "rui", "helper")
    for i in range(5):
        write(queue, MAYA, f"maya secret {i}")
        write(queue, other, f"rui note {i}")
    assert queue.purge(MAYA) == 5
    stream = Keys(settings.redis_namespace).writes(queue.shard(MAYA))
    assert b"maya secret" not in b"".join(f[b"op"] for _, f in client.xrange(stream))
    queue.enqueue(MAYA, ForgetSpace())
    worker = Running(settings, config, "w-forget")
    try:
        assert len(reads.ask(other, LIST_PAGES, {}).pages) == 5
        wait_for(lambda: queue.depth() == 0)
        assert not config.space_dir("maya", "helper").exists()
    finally:
        worker.stop()


def test_a_full_shard_refuses_writes(settings: QueueSettings) -> None:
    small = settings.model_copy(update={"queue_max_entries": 3})
    queue = WriteQueue(redis.Redis.from_url(small.redis_url), small)
    for i in range(3):
        write(queue, MAYA, f"note {i}")
    with pytest.raises(QueueFullError, match="retry later"):
        write(queue, MAYA, "one too many")


def test_shards_are_shared_taken_over_and_released(settings: QueueSettings, config: MemoryConfig) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    keys = Keys(settings.redis_namespace)

    def owners() -> dict[int, str | None]:
        return {s: (v.decode() if (v := client.get(keys.lease(s))) else None) for s in range(8)}

    workers: list[Running] = []
    try:
        first = Running(settings, config, "w-a")
        workers.append(first)
        wait_for(lambda: list(owners().values()).count("w-a") == 8)
        second = Running(settings, config, "w-b")
        workers.append(second)
        # a joining worker gets work: the first gives back what is beyond its share
        wait_for(lambda: sorted(str(v) for v in owners().values()) == ["w-a"] * 4 + ["w-b"] * 4)
        third = Running(settings, config, "w-c")
        workers.append(third)
        wait_for(lambda: "w-c" in owners().values() and None not in owners().values())
        killed_at = time.monotonic()
        first.kill()
        wait_for(lambda: "w-a" not in owners().values() and None not in owners().values(), timeout_s=10)
        assert time.monotonic() - killed_at <= settings.lease_ttl_s + 2  # taken over within TTL + 2 s
        queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
        write(queue, MAYA, "Written after the takeover.")
        assert reads.ask(MAYA, LIST_PAGES, {}).total == 1
        for worker in (second, third):
            worker.stop()
        assert set(owners().values()) == {None}  # a drained worker gives its shards back at once
    finally:
        for worker in workers:
            worker.stop()


def test_a_round_longer_than_the_lease_keeps_it(
    settings: QueueSettings, config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applying a backlog can outlast the lease TTL (1 s here): the worker renews between runs (one entry
    each here), so its shard never lapses to another writer while it lives. Two TTLs: without a renewal
    the lease would lapse midway, and the entries after would see it gone."""
    settings = settings.model_copy(update={"write_run": 1})
    client = redis.Redis.from_url(settings.redis_url)
    lease = Keys(settings.redis_namespace).lease(shard_of(MAYA, 8))
    queue = WriteQueue(client, settings)
    for i in range(8):  # one backlog, read in one round
        write(queue, MAYA, f"Slow note {i}.", write_id=f"slow{i}")
    owners_seen: list[bytes | None] = []
    applying = Worker._apply

    def slow_apply(self: Worker, key: SpaceKey, ops: list[AnyOp]) -> object:
        owners_seen.append(client.get(lease))
        time.sleep(0.25)  # 8 entries: 2 s in one round, two TTLs
        return applying(self, key, ops)

    monkeypatch.setattr(Worker, "_apply", slow_apply)
    worker = Running(settings, config, "w-slow")
    wait_for(lambda: shard_of(MAYA, 8) in worker.worker.leases.owned)
    try:
        assert OwnerCallClient(client, settings).ask(MAYA, LIST_PAGES, {"limit": 20}).total == 8
    finally:
        worker.stop()
    assert len(owners_seen) == 8 and set(owners_seen) == {b"w-slow"}


def test_a_read_waits_longer_than_the_socket_timeout_and_a_busy_pool_waits(
    settings: QueueSettings, config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read waits for the writes before it however long the owner takes (within the read timeout), not
    at most the client's socket timeout; more concurrent callers than connections wait for one."""
    settings = settings.model_copy(update={"redis_socket_timeout_s": 1.5, "redis_max_connections": 2})
    client = connect(settings)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    applying = Worker._apply

    def slow_apply(self: Worker, key: SpaceKey, ops: list[AnyOp]) -> object:
        time.sleep(0.5 * len(ops))
        return applying(self, key, ops)

    monkeypatch.setattr(Worker, "_apply", slow_apply)
    worker = Running(settings, config, "w-patient")
    wait_for(lambda: shard_of(MAYA, 8) in worker.worker.leases.owned)
    try:
        for i in range(4):  # 2 s of applying before the read is answered: past the 1.5 s socket timeout
            write(queue, MAYA, f"Patient note {i}.")
        assert reads.ask(MAYA, LIST_PAGES, {"limit": 20}).total == 4
        with ThreadPoolExecutor(8) as pool:  # 8 callers, 2 connections
            totals = list(pool.map(lambda _: reads.ask(MAYA, LIST_PAGES, {}).total, range(8)))
        assert totals == [4] * 8
    finally:
        worker.stop()


def test_applied_entries_are_acknowledged_together(settings: QueueSettings) -> None:
    """One XACK/XDEL for a batch applied within `ACK_EVERY_S`, not one per entry: with `appendfsync
    always` each write command costs Redis an fsync."""
    client = connect(settings)
    queue = WriteQueue(client, settings)
    for i in range(8):
        write(queue, MAYA, f"Quick note {i}.")
    applied: list[str] = []
    consumer = ShardConsumer(
        client, settings, "w-quick", lambda key, ops: applied.extend([key.user_id] * len(ops))
    )
    shard = queue.shard(MAYA)
    client.set(Keys(settings.redis_namespace).lease(shard), "w-quick", px=30_000)  # reads are fenced by it
    consumer.take_over(shard)

    def xack_calls() -> int:
        return int(client.info("commandstats").get("cmdstat_xack", {}).get("calls", 0))

    before = xack_calls()
    assert consumer.poll([shard], block_ms=100) == 8
    assert applied == ["maya"] * 8
    assert xack_calls() - before == 1
    assert queue.depth() == 0


def test_the_consumer_tells_the_read_threads_when_a_shards_entries_leave(settings: QueueSettings) -> None:
    """Applied and dead-lettered entries alike: a read waiting for its writes looks in Redis again when
    told (`stream_progress.py`), so one left untold would wait for the read's own timer."""
    client = connect(settings)
    queue = WriteQueue(client, settings)
    shard = queue.shard(MAYA)
    progress = StreamProgress()
    failing = True

    def apply(key: SpaceKey, ops: list[AnyOp]) -> None:
        if failing:
            raise InvalidInputError("turns", "cannot apply")  # dead-lettered at once, never retried

    consumer = ShardConsumer(client, settings, "w-told", apply, progress=progress)
    client.set(Keys(settings.redis_namespace).lease(shard), "w-told", px=30_000)
    consumer.take_over(shard)
    write(queue, MAYA, "A note that cannot apply.")
    seen = progress.seen(shard)
    assert consumer.poll([shard], block_ms=100) == 1 and consumer.dead_letters == 1
    assert progress.seen(shard) != seen
    failing = False
    write(queue, MAYA, "A note that applies.")
    seen = progress.seen(shard)
    assert consumer.poll([shard], block_ms=100) == 1 and queue.depth() == 0
    assert progress.seen(shard) != seen


def test_a_lease_lost_mid_batch_leaves_the_rest_to_the_next_owner_in_order_and_once(
    settings: QueueSettings,
) -> None:
    """A round can outlast a lease: the consumer asks before each run, stops the shard at the first no,
    and the entries it did not apply stay pending until the shard's next owner claims them — applied
    there after the ones applied here, none twice, in the space's order."""
    settings = settings.model_copy(update={"write_run": 1})  # a run an entry: asked before each
    client = connect(settings)
    queue = WriteQueue(client, settings)
    shard = queue.shard(MAYA)
    lease = Keys(settings.redis_namespace).lease(shard)
    for i in range(6):
        write(queue, MAYA, f"Note {i}.", write_id=f"n{i}")
    applied: list[tuple[str, str]] = []
    answers = iter([True, True, True, False])  # the round's first ask, then one before each run

    def apply_as(owner: str) -> Callable[[SpaceKey, list[AnyOp]], None]:
        return lambda key, ops: applied.extend((owner, op.write_id) for op in ops if isinstance(op, AddTurns))

    first = ShardConsumer(client, settings, "w-first", apply_as("first"), lambda shard: next(answers, False))
    client.set(lease, "w-first", px=30_000)
    first.take_over(shard)
    assert first.poll([shard], block_ms=100) == 2  # the lease was lost before the third entry
    assert queue.depth() == 4

    client.set(lease, "w-next", px=30_000)  # the lease lapsed and another worker won it
    following = ShardConsumer(client, settings, "w-next", apply_as("next"))
    following.take_over(shard)  # claims what the first left pending
    assert following.poll([shard], block_ms=100) == 4

    assert applied == [("first", "n0"), ("first", "n1")] + [("next", f"n{i}") for i in range(2, 6)]
    assert queue.depth() == 0


def test_a_run_that_fails_is_applied_entry_by_entry_and_only_its_space_waits(
    settings: QueueSettings,
) -> None:
    """A space's consecutive writes go to the engine as one run; when the run fails, its writes are
    applied one by one: those before the failing one are applied, it and the space's later writes wait
    for the next poll (order within the space), and another space of the shard goes on."""
    client = connect(settings)
    queue = WriteQueue(client, settings)
    shard = queue.shard(MAYA)
    neighbour = next(
        key for key in (SpaceKey("acme", f"n{i}", "helper") for i in range(500)) if queue.shard(key) == shard
    )
    for i in range(4):
        write(queue, MAYA, f"maya {i}", write_id=f"m{i}")
        write(queue, neighbour, f"neighbour {i}", write_id=f"n{i}")
    calls: list[list[str]] = []
    applied: list[str] = []
    failing = {"m2"}

    def apply(key: SpaceKey, ops: list[AnyOp]) -> None:
        ids = [str(getattr(op, "write_id", "")) for op in ops]
        calls.append(ids)
        if failing & set(ids):
            raise RuntimeError("disk hiccup")
        applied.extend(ids)

    consumer = ShardConsumer(client, settings, "w-runs", apply)
    client.set(Keys(settings.redis_namespace).lease(shard), "w-runs", px=30_000)
    consumer.take_over(shard)
    assert consumer.poll([shard], block_ms=100) == 6
    assert calls == [["m0", "m1", "m2", "m3"], ["m0"], ["m1"], ["m2"], ["n0", "n1", "n2", "n3"]]
    assert applied == ["m0", "m1", "n0", "n1", "n2", "n3"] and queue.depth() == 2
    failing.clear()
    assert consumer.poll([shard], block_ms=100) == 2
    assert calls[-1] == ["m2", "m3"] and applied[-2:] == ["m2", "m3"] and queue.depth() == 0


def test_a_worker_stores_a_spaces_queued_writes_in_one_commit(
    settings: QueueSettings, config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    for i in range(8):  # waiting before the worker starts: one read delivers them together
        write(queue, MAYA, f"Queued note {i}.", write_id=f"q{i}")
    runs: list[int] = []
    applying = Memoryos.apply_writes

    def counted(self: Memoryos, ops: list[AddTurns]) -> list[list[int]]:
        runs.append(len(ops))
        return applying(self, ops)

    monkeypatch.setattr(Memoryos, "apply_writes", counted)
    worker = Running(settings, config, "w-run")
    try:
        listed = reads.ask(MAYA, LIST_PAGES, {"limit": 20})
        assert [p.user_input for p in listed.pages] == [f"Queued note {i}." for i in range(8)]
    finally:
        worker.stop()
    assert runs == [8]


def test_a_read_waits_for_its_spaces_writes_behind_a_deep_backlog(
    settings: QueueSettings, config: MemoryConfig
) -> None:
    """1,500 writes of another space are ahead of MAYA's in their shard's stream when she reads: the read
    waits for her write (not for the stream's oldest 1,000 entries, where it is not)."""
    settings = settings.model_copy(update={"shard_count": 1})
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    for i in range(1500):
        write(queue, SpaceKey("acme", "omar", "helper"), f"Backlog note {i}.")
    write(queue, MAYA, "Behind the backlog.")
    worker = Running(settings, config, "w-backlog")
    try:
        listed = reads.ask(MAYA, LIST_PAGES, {}, timeout_s=60)
        assert [page.user_input for page in listed.pages] == ["Behind the backlog."]
    finally:
        worker.stop()


def test_a_forget_leaves_no_note_of_the_space_but_a_newer_writes(
    settings: QueueSettings, config: MemoryConfig
) -> None:
    """After a forget applies, the space's note of its newest write (the forget's) and its place in the
    set of known spaces leave Redis: the user's id does not stay there. A write accepted after the
    forget keeps both, or a read could go ahead of it and the sweep would miss the space."""
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    omar = SpaceKey("acme", "omar", "helper")
    write(queue, MAYA, "Forgotten soon.")
    write(queue, omar, "Forgotten soon too.")
    queue.purge(MAYA)
    queue.enqueue(MAYA, ForgetSpace())
    queue.purge(omar)
    queue.enqueue(omar, ForgetSpace())
    again = write(queue, MAYA, "Back again.")  # accepted before the worker applies her forget
    worker = Running(settings, config, "w-notes")
    try:
        assert [p.user_input for p in reads.ask(MAYA, LIST_PAGES, {}).pages] == ["Back again."]
        wait_for(lambda: queue.last_write_id(omar) == "0-0")
        assert queue.last_write_id(MAYA) == again
        assert queue.known_spaces() == [MAYA]  # the forget's enqueue re-added omar; its apply took him out
    finally:
        worker.stop()


def test_worker_metrics_count_what_it_did(settings: QueueSettings, config: MemoryConfig) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    worker = Running(settings, config, "w-metrics")
    try:
        write(queue, MAYA, "Counted.")
        client.xadd(Keys(settings.redis_namespace).writes(queue.shard(MAYA)), {"space": "acme/maya/helper"})
        reads.ask(MAYA, LIST_PAGES, {})
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker.worker, shared_scheduler(config)))
        scraped = generate_latest(registry).decode()
        assert "memoryos_shards_owned 8.0" in scraped and "memoryos_dead_letters_total 1.0" in scraped
        assert "memoryos_queue_depth 0.0" in scraped and "memoryos_llm_requests_in_flight" in scraped
        tokens = next(line for line in scraped.splitlines() if line.startswith("memoryos_embed_tokens_total"))
        assert float(tokens.split()[1]) > 0
    finally:
        worker.stop()


def test_a_read_waiting_for_vectors_does_not_hold_up_other_reads(
    settings: QueueSettings, config: MemoryConfig
) -> None:
    """A retrieve waits for its space's pages to be embedded; meanwhile the worker answers other calls.
    With one read thread, every user's read queued behind that wait and timed out (503) under load."""
    settings = settings.model_copy(update={"read_timeout_s": 3.0})
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    embedder = BlockedEmbedder()  # page batches wait for `release`; queries do not
    worker = Running(settings, config, "w-reads", embedder=embedder)
    try:
        write(queue, MAYA, "I adopted a greyhound called Pixel.", write_id="pixel")
        wait_for(lambda: reads.ask(MAYA, WRITE_STATUS, {"write_id": "pixel"}) is not None)
        with ThreadPoolExecutor(1) as pool:
            retrieved = pool.submit(reads.ask, MAYA, RETRIEVE, {"query": "What is my dog called?"})
            time.sleep(0.3)  # the worker has taken the retrieve: it waits for the page's vector
            assert not retrieved.done()
            status = reads.ask(MAYA, WRITE_STATUS, {"write_id": "pixel"})  # answered, not queued behind it
            assert status is not None and not status.searchable
            embedder.release.set()
            context = retrieved.result(timeout=30)
        pages = [*context.short_term_memory, *context.retrieved_pages]
        assert any("Pixel" in page.user_input for page in pages)
    finally:
        embedder.release.set()
        worker.stop()


def test_a_read_waiting_for_its_writes_gets_them_applied_while_the_worker_holds_new_writes(
    settings: QueueSettings, config: MemoryConfig
) -> None:
    """While its embedding lags, a worker leaves new writes in the streams; a read waiting for one of
    them waited out the whole hold (Redis-mode p99 1.4 s under load). Its shard's writes are now applied
    at once, while the other shards' stay held."""
    settings = settings.model_copy(update={"worker_max_embedding_lag_s": 0.2, "read_timeout_s": 5.0})
    other = next(
        SpaceKey("acme", f"user{n}", "helper")
        for n in range(100)
        if shard_of(SpaceKey("acme", f"user{n}", "helper"), settings.shard_count)
        != shard_of(MAYA, settings.shard_count)
    )
    client = redis.Redis.from_url(settings.redis_url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    embedder = BlockedEmbedder()  # page batches wait for `release`: the lag only grows
    worker = Running(settings, config, "w-hold", embedder=embedder)
    try:
        write(queue, MAYA, "I adopted a greyhound called Pixel.", write_id="pixel")
        wait_for(lambda: not queue.depth())  # applied, waiting for its vector
        time.sleep(0.4)  # past the worker's bound: new writes stay in the streams
        write(queue, other, "My sister lives in Porto.", write_id="porto")
        write(queue, MAYA, "Pixel is scared of thunder.", write_id="thunder")
        time.sleep(0.3)
        assert queue.depth() == 2  # both held

        status = reads.ask(MAYA, WRITE_STATUS, {"write_id": "thunder"})  # waits for "thunder" to apply

        assert status is not None and not status.searchable
        assert queue.depth() == 1  # the other shard's write is still held
    finally:
        embedder.release.set()
        worker.stop()


def test_a_drain_keeps_its_leases_until_its_spaces_are_closed(
    settings: QueueSettings, config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a space on drain waits for its background work, which can outlast the lease TTL (1 s
    here; the close takes 2): the worker renews while it closes, so the shard is never free for another
    worker while its spaces are still open here, and the leases go only after."""
    client = redis.Redis.from_url(settings.redis_url)
    lease = Keys(settings.redis_namespace).lease(shard_of(MAYA, 8))
    worker = Running(settings, config, "w-drain")
    wait_for(lambda: shard_of(MAYA, 8) in worker.worker.leases.owned)
    write(WriteQueue(client, settings), MAYA, "Open the space before the drain.")
    assert OwnerCallClient(client, settings).ask(MAYA, LIST_PAGES, {}).total == 1
    closing, closed = threading.Event(), threading.Event()
    close = Memoryos.close

    def slow_close(self: Memoryos) -> None:
        closing.set()
        time.sleep(2 * settings.lease_ttl_s)
        close(self)
        closed.set()

    monkeypatch.setattr(Memoryos, "close", slow_close)
    stopping = threading.Thread(target=worker.stop)
    stopping.start()
    assert closing.wait(10)
    owners_seen = []
    while not closed.is_set():
        owners_seen.append(client.get(lease))
        time.sleep(0.1)
    stopping.join(30)
    assert len(owners_seen) >= 10 and set(owners_seen) == {b"w-drain"}  # sampled throughout the 2 s
    assert client.get(lease) is None  # and given back once closed


def test_a_drain_wakes_the_read_thread_from_its_blocking_pop(
    settings: QueueSettings, config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain waits for the read thread (at most 5 s) before it closes the spaces and releases the
    leases; that thread sits in a blocking pop of the shards' owner calls. The drain pushes to the
    thread's own wake list, so the thread leaves at once: with the pop made 8 s long here, a drain that
    waited for its timeout would give up on the thread after 5 s and leave it running."""
    monkeypatch.setattr(owner_calls_module, "BLOCK_SLICE_S", 8.0)  # under the 10 s socket timeout
    worker = Running(settings, config, "w-wake")
    wait_for(lambda: len(worker.worker.leases.owned) == 8)
    time.sleep(0.2)  # the read thread is in its pop by now
    worker.stop()
    assert not worker.thread.is_alive()
    assert not [thread for thread in threading.enumerate() if thread.name == "memoryos-owner-calls"]


def test_a_redis_write_refused_at_maxmemory_pauses_the_worker_never_ends_it(
    settings: QueueSettings, config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis call the worker makes that Redis refuses at maxmemory (a path not made safe for a full
    Redis) is waited out like an outage: the worker goes on and applies what was queued."""
    client = redis.Redis.from_url(settings.redis_url)
    stepping = Worker.step
    refused: list[int] = []

    def refused_twice(self: Worker) -> int:
        if len(refused) < 2:
            refused.append(1)
            raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")
        return stepping(self)

    monkeypatch.setattr(Worker, "step", refused_twice)
    worker = Running(settings, config, "w-full")
    try:
        write(WriteQueue(client, settings), MAYA, "Written while a call was refused.")
        assert OwnerCallClient(client, settings).ask(MAYA, LIST_PAGES, {}).total == 1
        assert worker.thread.is_alive() and len(refused) == 2
    finally:
        worker.stop()
