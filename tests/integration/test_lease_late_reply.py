"""Commands that a partition delays between a worker and Redis, made timing-free by a proxy that holds
one of them (`tests/support/held_replies.py`).

A lease renewal answered late must not be trusted: Redis renewed the lease when the command arrived,
but the worker hears "renewed" only after the lease expired and another worker took the shard.

Worker a renews through a proxy that holds Redis's reply to its renewal (`tests/support/held_replies.py`)
while it is in the middle of a batch; worker b takes the shard over when the lease expires and applies
what a left. Once the reply is let through, a must not apply a single further entry of that shard. A
worker that trusted the reply from the moment it arrived applied the rest of its batch to a shard b
owned (harmless here only because the engine's apply is idempotent and SQLite serializes the two
writers on a local disk; on a network volume the lease is all there is).
"""

import hashlib
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from memoryos import MemoryConfig
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space.ops import AnyOp
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.keys import CONSUMER_GROUP, Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.worker.leases import _RENEW
from services.worker.main import Worker
from tests.support.fakes import HashEmbedder
from tests.support.held_replies import ReplyHoldingProxy
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

SPACE = SpaceKey("default", "maya", "helper")
WRITES = 600
"""More than a batch takes in one renewal period, so the held renewal falls mid-batch."""


class RecordingWorker(Worker):
    """A real worker that notes, at each apply, who held the shard's lease in Redis at that instant."""

    def __init__(self, *args: Any, observer_url: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observer: redis.Redis = redis.Redis.from_url(observer_url)
        self.applied_under: list[str | None] = []

    def _apply(self, key: SpaceKey, ops: list[AnyOp]) -> object:
        owner = self.observer.get(Keys(self.settings.redis_namespace).lease(0))
        self.applied_under += [None if owner is None else bytes(owner).decode()] * len(ops)
        return super()._apply(key, ops)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def test_a_renewal_answered_after_the_lease_expired_is_not_trusted(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    settings = QueueSettings(
        redis_url=redis_server.url, redis_namespace="late", shard_count=1, lease_ttl_s=1.0
    )
    config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")
    client = redis.Redis.from_url(redis_server.url)
    client.script_load(_RENEW)  # a's first renewal runs at once (not a NOSCRIPT answer, re-sent later)
    queue = WriteQueue(client, settings)
    for i in range(WRITES):
        turns = [{"user_input": f"write {i}", "agent_response": "ok"}]
        queue.enqueue(SPACE, plan_write(turns, max_text_chars=100, at=time.time(), write_id=f"w{i}"))

    proxy = ReplyHoldingProxy(redis_server.port)
    a = RecordingWorker(
        settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{proxy.port}/0"}),
        config,
        worker_id="a",
        embedder=HashEmbedder(),
        llm=OfflineLLM(),
        observer_url=redis_server.url,
    )
    stop_a = threading.Event()
    thread_a = threading.Thread(target=a.run, args=(stop_a,), daemon=True)
    b: Running | None = None
    try:
        thread_a.start()
        wait_for(lambda: len(a.applied_under) >= 10)  # a owns the shard and is applying its first batch
        proxy.hold_reply_to(hashlib.sha1(_RENEW.encode()).hexdigest().encode())
        wait_for(proxy.holding.is_set)  # a renewed mid-batch; Redis extended the lease; a hears nothing
        applied_before = len(a.applied_under)
        b = Running(settings, config, "b")  # returns once b holds the shard: a's lease expired
        wait_for(lambda: queue.depth() == 0, timeout_s=60)  # b applied what a left pending, and the rest
        proxy.release()  # a now hears "renewed", long after it stopped being true
        wait_for(lambda: 0 not in a.leases.owned)  # a found out at its next renewal
        late = a.applied_under[applied_before:]
    finally:
        stop_a.set()
        thread_a.join(timeout=30)
        if b is not None:
            b.stop()
        proxy.close()

    assert late == []  # not one entry applied by a after its renewal's reply was held
    assert all(owner == "a" for owner in a.applied_under)
    stores = list((tmp_path / "data").glob("*/*/*/memory.sqlite"))
    with sqlite3.connect(stores[0]) as db:
        stored = Counter(text for (text,) in db.execute("SELECT user_input FROM pages"))
    assert stored == Counter(f"write {i}" for i in range(WRITES))  # each exactly once


def pending_for(client: redis.Redis, stream: str, consumer: str) -> int:
    """Entries delivered to `consumer` and not acknowledged."""
    summary = client.xpending(stream, CONSUMER_GROUP)
    names = {consumer, consumer.encode()}
    return sum(int(c["pending"]) for c in summary["consumers"] if c["name"] in names)


def test_a_read_of_new_entries_reaching_redis_late_delivers_nothing(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """a sends its read of new entries while it owns the shard; the read reaches Redis after b took the
    shard (and claimed what a had pending). Delivered to a then, those entries would sit in a's pending
    list, applied by nobody (a lost the lease; b claimed once, at takeover) until the shard moves again."""
    settings = QueueSettings(
        redis_url=redis_server.url, redis_namespace="lateread", shard_count=1, lease_ttl_s=1.0
    )
    config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")
    client = redis.Redis.from_url(redis_server.url)
    queue = WriteQueue(client, settings)
    proxy = ReplyHoldingProxy(redis_server.port)
    a = Running(settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{proxy.port}/0"}), config, "a")
    b: Running | None = None
    try:
        proxy.hold_request(b"$1\r\n>\r\n")  # a's next read of new entries (">") waits on the wire
        wait_for(proxy.holding.is_set)
        b = Running(settings, config, "b")  # returns once b holds the shard: a's lease expired
        for i in range(WRITES):
            turns = [{"user_input": f"write {i}", "agent_response": "ok"}]
            queue.enqueue(SPACE, plan_write(turns, max_text_chars=100, at=time.time(), write_id=f"w{i}"))
        proxy.release()  # a's read reaches Redis now, with b's batches still undelivered
        wait_for(lambda: 0 not in a.worker.leases.owned)  # a found out at its next renewal
        stranded = pending_for(client, Keys("lateread").writes(0), "a")
        wait_for(lambda: queue.depth() == 0 or stranded > 0, timeout_s=60)
    finally:
        a.stop()
        if b is not None:
            b.stop()
        proxy.close()

    assert stranded == 0  # nothing delivered to a after it lost the lease
    stores = list((tmp_path / "data").glob("*/*/*/memory.sqlite"))
    with sqlite3.connect(stores[0]) as db:
        stored = [text for (text,) in db.execute("SELECT user_input FROM pages ORDER BY page_id")]
    assert stored == [f"write {i}" for i in range(WRITES)]  # each once, in write order
