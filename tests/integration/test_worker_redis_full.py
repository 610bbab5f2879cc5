"""A worker meeting a full Redis (`maxmemory` reached under `noeviction`), through real HTTP and a real
`redis-server`: it drains the queue to empty and loses nothing, and the API then takes writes again.

The API stops taking writes at its soft limit (80% of `maxmemory`); the test then lowers `maxmemory` below
what Redis holds, so that Redis refuses every command that may grow memory, as a Redis whose limit was
reached some other way does. Either a worker is running, held back by its embedding lag while Redis
fills (its heartbeat and lease renewals go on at `maxmemory`), or none is and one starts then (it must
take its leases and make the shards' consumer groups at `maxmemory`). Before this, the first heartbeat
or acknowledgement at `maxmemory` killed the worker, and nothing drained the queue again.

`-s` prints the figures docs/reliability.md ("Redis full") quotes."""

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis.exceptions import OutOfMemoryError

from memoryos import MemoryConfig
from memoryos.errors import EmbeddingModelMismatchError
from memoryos.space.ops import AddTurns, AnyOp
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.api.settings import ApiSettings
from services.queue.keys import Keys, shard_of, space_name
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.worker.consumer import ShardConsumer
from services.worker.leases import ShardLeases
from tests.support.api_server import running_api
from tests.support.fakes import BlockedEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

KEY = "key-full"
ROOM_BYTES = 8 * 1024 * 1024
"""`maxmemory` is what Redis holds at the start plus this: the soft limit (80%) is reached after ~6 MB of
writes, about 700. Less would leave the queue small beside what Redis's client buffers take for a
moment (a worker's read of `BATCH_ENTRIES` is a 1 MB reply), and the test would measure those."""
BATCH_ENTRIES = 128
"""A worker's read of a shard: 128 writes of 8 KB, the 1 MB reply that 256 writes of 4 KB (the default
batch) make."""
SHARDS = 4


def users() -> tuple[str, str, str, str]:
    """Two users whose writes fill Redis, each on a shard of its own; a third whose writes fill it too and
    who is forgotten once the soft limit is reached, on a third shard; and a fourth, forgotten while Redis
    is full, on that same shard: a running worker held back applies a forgotten user's shard to answer the
    forget, and must not drain the others' writes before the test lets it."""
    by_shard: dict[int, list[str]] = {}
    for number in range(100):
        name = f"user{number}"
        by_shard.setdefault(shard_of(SpaceKey("acme", name, "bot"), SHARDS), []).append(name)
    (first, *_), (second, *_), (forgotten, late, *_) = (names for _, names in sorted(by_shard.items())[:3])
    return first, second, forgotten, late


def turn(number: int) -> dict[str, str]:
    """A write of ~8 KB: the room fills in ~700 writes, each an HTTP request to the API (at ~4 KB, 1,200
    requests took half of the test's 10 s)."""
    return {
        "user_input": f"Note {number}: " + "I keep a long diary of my garden. " * 240,
        "agent_response": "Noted.",
        "write_id": f"w-{number}",
    }


def note_number(page: dict[str, Any]) -> int:
    return int(page["user_input"].split(":", 1)[0].removeprefix("Note "))


def used_bytes(admin: redis.Redis) -> int:
    return int(admin.info("memory")["used_memory"])


def queue_depth(admin: redis.Redis, keys: Keys, shards: int) -> int:
    return sum(int(admin.xlen(keys.writes(shard))) for shard in range(shards))


def listed_notes(http: httpx.Client, space: str) -> list[int]:
    """The space's pages in the order stored, by the number of the write each came from."""
    listed = http.get(f"{space}/memories", params={"limit": 1000})
    assert listed.status_code == 200, listed.text
    return [note_number(page) for page in listed.json()["pages"]]


@pytest.mark.parametrize("worker_meets_it", ["running", "started"])
def test_a_worker_drains_a_full_redis_and_the_api_takes_writes_again(
    tmp_path: Path, worker_meets_it: str
) -> None:
    with running_redis(tmp_path / "redis") as server:
        admin = redis.Redis.from_url(server.url)
        # Redis 7 allocates ~27 KB of latency histogram the first time each command runs, for good: a
        # constant in production, but a third of this test's room, and it would stay after the drain.
        admin.config_set("latency-tracking", "no")
        queue = QueueSettings(
            redis_url=server.url,
            shard_count=SHARDS,
            lease_ttl_s=1.0,
            read_timeout_s=10.0,
            worker_max_embedding_lag_s=0.2,
            batch_entries=BATCH_ENTRIES,
        )
        keys = Keys(queue.redis_namespace)
        first, second, forgotten, late = users()
        writers = (first, second, forgotten)
        bound = queue.worker_max_embedding_lag_s
        # Every page stays in short-term memory: consolidating the pages of a full Redis (the offline
        # LLM's summaries of 4 MB of text) took seconds of the worker's stop, and is not what this is about
        config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never", short_term_capacity=1000)
        embedder = BlockedEmbedder()  # page batches wait for `release`: a running worker holds new writes
        worker: Running | None = None
        with (
            running_api(ApiSettings(port=0, keys={KEY: "acme"}), config, queue=queue) as api,
            httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=30) as http,
        ):
            try:
                if worker_meets_it == "running":
                    worker = Running(queue, config, "w-running", embedder=embedder)
                base = used_bytes(admin)
                admin.config_set("maxmemory", base + ROOM_BYTES)

                # Writes are taken up to the soft limit, then refused with 503 queue_full.
                accepted: dict[str, list[int]] = {user: [] for user in writers}
                refused = None
                for number in range(5000):
                    user = writers[number % len(writers)]
                    answer = http.post(f"{api.space_url(user)}/memories", json=turn(number))
                    if answer.status_code == 503:
                        refused = answer
                        break
                    assert answer.status_code in (201, 202), answer.text
                    accepted[user].append(number)
                    if worker is not None and number == 0:  # held from now on (its page waits for a vector):
                        # none of the forgotten user's writes reaches it before the forget purges them
                        wait_for(lambda: worker.worker.scheduler.embedding_lag_s() > bound)
                assert refused is not None, "the soft limit never refused a write"
                assert refused.json()["error"] == "queue_full", refused.text
                assert int(refused.headers["retry-after"]) >= 1
                soft_full = used_bytes(admin)
                assert soft_full < base + ROOM_BYTES  # refused below maxmemory: room is left

                # A forget still goes through above the soft limit, and purges the user's queued writes.
                forget = http.delete(api.space_url(forgotten))
                assert forget.status_code in (202, 204), forget.text

                # Redis full: below what it holds, every command that may grow memory is refused.
                full = used_bytes(admin)
                queued = queue_depth(admin, keys, queue.shard_count)
                full_limit = base + (full - base) // 2  # full until half the queue is drained
                admin.config_set("maxmemory", full_limit)
                with pytest.raises(OutOfMemoryError):
                    admin.set("probe", "x")
                still = http.post(f"{api.space_url(first)}/memories", json=turn(9999))
                assert still.status_code == 503 and still.json()["error"] == "queue_full", still.text
                if worker is not None:
                    # Held while Redis is full, it keeps its heartbeat and leases (they are renewed).
                    lease, beat = keys.lease(0), keys.worker("w-running")
                    before = int(admin.pttl(lease)), int(admin.pttl(beat))
                    wait_for(lambda: int(admin.pttl(lease)) > before[0] and int(admin.pttl(beat)) > before[1])
                    with pytest.raises(OutOfMemoryError):
                        admin.set("probe", "x")  # still full: renewed at maxmemory
                # A forget is taken even now (a running worker applies its shard's writes before it).
                assert http.delete(api.space_url(late)).status_code in (202, 204)
                started = time.monotonic()
                embedder.release.set()
                if worker is None:  # it takes its leases and makes the consumer groups at maxmemory
                    worker = Running(queue, config, "w-started", embedder=embedder)

                wait_for(lambda: queue_depth(admin, keys, queue.shard_count) == 0, timeout_s=120.0)
                drained_s = time.monotonic() - started
                assert admin.llen(keys.dead_letters()) == 0

                # Every write acknowledged is applied once, in the order accepted; none refused is.
                for user in (first, second):
                    assert listed_notes(http, api.space_url(user)) == accepted[user]
                assert http.get(f"{api.space_url(forgotten)}/stats").status_code == 404

                # Room again: the API takes writes.
                wait_for(
                    lambda: (
                        http.post(f"{api.space_url(first)}/memories", json=turn(10_000)).status_code
                        in (201, 202)
                    )
                )
                after = used_bytes(admin)
                print(
                    f"\nredis-full ({worker_meets_it}): {queued} writes queued ({full - base} bytes over "
                    f"{base} at the start), maxmemory {base + ROOM_BYTES} then {full_limit}; "
                    f"refused at {soft_full} bytes; drained in {drained_s:.2f} s; {after} bytes after"
                )
            finally:
                embedder.release.set()
                if worker is not None:
                    worker.stop()


def test_the_consumer_moves_applies_and_dead_letters_entries_while_redis_is_full(tmp_path: Path) -> None:
    """Each thing a worker does to its queue, with Redis over `maxmemory` throughout (half of what it
    holds): heartbeat, take a lease, make the shard's group, apply and acknowledge, hold a space's writes
    for its reindex, dead-letter an entry that cannot be read (from the stream, and from a held list),
    release the held writes in order, renew and release the lease. The engine is a recording function:
    the queue and Redis are real."""
    maya, held = SpaceKey("acme", "maya", "bot"), SpaceKey("acme", "omar", "bot")
    with running_redis(tmp_path / "redis") as server:
        client = redis.Redis.from_url(server.url)
        settings = QueueSettings(redis_url=server.url, shard_count=1, lease_ttl_s=5.0)
        keys, queue = Keys(settings.redis_namespace), WriteQueue(client, settings)
        for key, text in ((maya, "m1"), (held, "o1"), (maya, "m2"), (held, "o2")):
            turns = [{"user_input": text, "agent_response": "noted"}]
            queue.enqueue(key, plan_write(turns, max_text_chars=100, at=time.time()))
        client.xadd(keys.writes(0), {"space": space_name(maya), "op": "not an op"})
        client.rpush(keys.held(space_name(held)), "not a held write")  # behind the two held below

        applied: list[str] = []
        reindexed: set[SpaceKey] = set()

        def apply(key: SpaceKey, ops: list[AnyOp]) -> None:
            if key == held and key not in reindexed:
                raise EmbeddingModelMismatchError("old-model", 8, "new-model", 8)
            applied.extend(op.turns[0].user_input for op in ops if isinstance(op, AddTurns))

        def drain() -> None:
            for _ in range(20):
                if not consumer.poll([0], block_ms=10):
                    return

        client.config_set("maxmemory", used_bytes(client) // 2)
        with pytest.raises(OutOfMemoryError):
            client.set("probe", "x")

        leases = ShardLeases(client, settings, "w-full")
        consumer = ShardConsumer(client, settings, "w-full", apply)
        leases.heartbeat()
        assert leases.acquire(1) == {0}
        consumer.take_over(0)
        drain()
        assert applied == ["m1", "m2"]
        assert client.xlen(keys.writes(0)) == 0
        assert client.llen(keys.dead_letters()) == 1  # the entry that is no op
        assert client.llen(keys.held(space_name(held))) == 3  # o1, o2 moved behind the unreadable one

        reindexed.add(held)
        consumer.held.ask_release(held)
        drain()
        assert applied == ["m1", "m2", "o1", "o2"]
        assert client.llen(keys.dead_letters()) == 2  # the oldest held record, unreadable
        assert client.exists(keys.held(space_name(held))) == 0
        assert not client.smembers(keys.held_spaces(0))

        with pytest.raises(OutOfMemoryError):
            client.set("probe", "x")  # full all along
        assert leases.renew() == set()
        leases.release_all()
        assert client.get(keys.lease(0)) is None
