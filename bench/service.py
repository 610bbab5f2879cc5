"""The service's write path on one box: Redis + one worker, MiniLM on CPU (issue 14's figures).

- ingest to searchable: `--users` clients write `--turns` exchanges each at once through the Redis queue;
  one worker applies and embeds them. Throughput against raw `encode` of the same texts at the same batch
  size and threads, and the batcher's mean batch size.
- acknowledged-write latency (XADD until Redis holds it) at fixed offered rates, open loop.
- takeover: a worker dies without releasing its leases; time until another owns every shard.

    python -m bench.service [--users 100 --turns 20]
"""

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis

from bench.corpus import dev_conversations, exchanges
from memoryos import MemoryConfig
from memoryos.embedding.shared import shared_embedder
from memoryos.scheduler import shared_scheduler
from memoryos.space_pool import SpaceKey
from memoryos.writes import plan_write
from services.queue.calls import WRITE_STATUS
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.reads import ReadClient
from services.queue.settings import QueueSettings
from services.worker.main import Worker
from tests.support.redis_server import running_redis


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(samples_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(samples_ms, 99)), 2),
    }


def raw_encode_rate(config: MemoryConfig, texts: list[str]) -> float:
    """Texts per second of the embedder alone, in batches of the batcher's size."""
    embedder = shared_embedder(config)
    embedder.encode(texts[:8])
    started = time.perf_counter()
    size = config.embedding_batch_size
    for start in range(0, len(texts), size):
        embedder.encode([f"raw {t}" for t in texts[start : start + size]])  # uncached copies
    return len(texts) / (time.perf_counter() - started)


def ingest(settings: QueueSettings, config: MemoryConfig, users: int, turns: int) -> dict[str, Any]:
    fill = exchanges(users * turns, dev_conversations())
    raw = raw_encode_rate(config, [f"User: {t['user_input']} Assistant: {t['agent_response']}" for t in fill])
    worker = Worker(settings, config, worker_id="bench")
    worker.spaces.warm_up()
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    client = redis.Redis.from_url(settings.redis_url)
    while len(worker.leases.owned) < settings.shard_count:
        time.sleep(0.05)
    keys = [SpaceKey("bench", f"user{u}", "helper") for u in range(users)]

    def write_all(u: int) -> None:
        queue = WriteQueue(client, settings)
        for i in range(turns):
            turn = fill[u * turns + i]
            op = plan_write([turn], max_text_chars=20_000, at=time.time(), write_id=f"u{u}t{i}")
            queue.enqueue(keys[u], op)

    started = time.perf_counter()
    writers = [threading.Thread(target=write_all, args=(u,)) for u in range(users)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    reads = ReadClient(client, settings)
    for u, key in enumerate(keys):
        while not getattr(
            reads.ask(key, WRITE_STATUS, {"write_id": f"u{u}t{turns - 1}"}), "searchable", False
        ):
            time.sleep(0.02)
    elapsed = time.perf_counter() - started
    batcher = shared_scheduler(config).batcher(shared_embedder(config)).stats()
    stop.set()
    thread.join(timeout=60)
    rate = users * turns / elapsed
    return {
        "users": users,
        "turns_per_user": turns,
        "searchable_s": round(elapsed, 2),
        "turns_per_s": round(rate, 1),
        "raw_encode_texts_per_s": round(raw, 1),
        "share_of_raw_encode": round(rate / raw, 3),
        "mean_batch_size": round(batcher.mean_batch_size, 1),
        "batches": batcher.batches,
    }


def ack_latency(settings: QueueSettings, rates: list[int], seconds: float) -> list[dict[str, Any]]:
    """Open loop: writes sent at a fixed rate whatever the replies; latency of each XADD."""
    client = redis.Redis.from_url(settings.redis_url)
    queue = WriteQueue(client, settings.model_copy(update={"queue_max_entries": 10**9}))
    op = plan_write([{"user_input": "hello", "agent_response": "hi"}], max_text_chars=100, at=time.time())
    rows = []
    for rate in rates:
        samples: list[float] = []
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for i in range(int(rate * seconds)):
            now = time.perf_counter()
            if now < next_at:
                time.sleep(next_at - now)
            queue.enqueue(SpaceKey("ack", f"user{i % 100}", "helper"), op)
            samples.append((time.perf_counter() - next_at) * 1000)  # from when it was due: open loop
            next_at += interval
        rows.append({"offered_per_s": rate, **_percentiles(samples)})
    return rows


def takeover(settings: QueueSettings, config: MemoryConfig) -> float:
    """Seconds from a worker's death (leases not released) until another owns every shard."""
    client = redis.Redis.from_url(settings.redis_url)
    keys = Keys(settings.redis_namespace)
    dying = Worker(settings, config, worker_id="dying")
    dying.spaces.warm_up()
    dying.leases.release_all = lambda: None  # type: ignore[method-assign]
    stop_dying = threading.Event()
    dying_thread = threading.Thread(target=dying.run, args=(stop_dying,), daemon=True)
    dying_thread.start()
    while len(dying.leases.owned) < settings.shard_count:
        time.sleep(0.05)
    heir = Worker(settings, config, worker_id="heir")
    stop_heir = threading.Event()
    heir_thread = threading.Thread(target=heir.run, args=(stop_heir,), daemon=True)
    heir_thread.start()
    while len(heir.leases.owned) < settings.shard_count // 2:
        time.sleep(0.05)
    stop_dying.set()  # dies holding its leases
    died = time.perf_counter()
    while any(client.get(keys.lease(s)) != b"heir" for s in range(settings.shard_count)):
        time.sleep(0.01)
    elapsed = time.perf_counter() - died
    stop_heir.set()
    for thread in (dying_thread, heir_thread):
        thread.join(timeout=30)
    return round(elapsed, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rates", type=int, nargs="+", default=[250, 500, 1000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, running_redis(Path(workdir) / "redis") as server:
        settings = QueueSettings(redis_url=server.url, shard_count=16, lease_ttl_s=2.0)
        config = MemoryConfig(data_dir=Path(workdir) / "data", faiss_use_gpu="never")
        report = {
            "ingest": ingest(settings, config, args.users, args.turns),
            "ack_latency": ack_latency(
                settings.model_copy(update={"redis_namespace": "ack"}), args.rates, 5.0
            ),
            "takeover_s": takeover(settings.model_copy(update={"redis_namespace": "takeover"}), config),
            "lease_ttl_s": 2.0,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
