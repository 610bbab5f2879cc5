"""The worker fault loop: the real `memoryos worker` process SIGKILLed at random instants while a client
writes through the Redis queue, with Redis restarted (AOF) along the way; then one last worker drains the
queue and every acknowledged write is counted in the stores: lost (0 expected) and applied twice (0).

    python -m bench.faults [--rounds 50] [--redis-restarts 3]

CI runs the short form (`tests/integration/test_worker_process.py`: 10 rounds, one restart).
"""

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from memoryos.space_pool import SpaceKey
from memoryos.writes import plan_write
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.redis_server import RedisServer, running_redis

NAMESPACE = "faults"
SHARDS = 4
SPACES = [SpaceKey("default", f"user{i}", "helper") for i in range(SHARDS)]


@dataclass
class FaultReport:
    rounds: int
    redis_restarts: int
    acknowledged: int
    applied_before_last_worker: int
    lost: int
    applied_twice: int
    unacknowledged_applied: int
    """Writes whose acknowledgement the client never got (Redis restarted mid-call) but that applied:
    allowed, once."""


def worker_env(server: RedisServer, data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_REDIS_URL": server.url,
        "MEMORYOS_REDIS_NAMESPACE": NAMESPACE,
        "MEMORYOS_SHARD_COUNT": str(SHARDS),
        "MEMORYOS_LEASE_TTL_S": "1.0",
        "MEMORYOS_FAISS_USE_GPU": "never",
        "MEMORYOS_WORKER_METRICS_PORT": "0",
    }
    env.pop("MEMORYOS_OPENAI_API_KEY", None)
    env.pop("MEMORYOS_OPENAI_BASE_URL", None)
    return env


def start_worker(server: RedisServer, data_dir: Path, name: str) -> subprocess.Popen[bytes]:
    """A `memoryos worker` process, returned once it says it serves (its model loaded)."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "memoryos.cli", "worker", "--worker-id", name],
        env=worker_env(server, data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if b"serving shards" not in line:
        raise RuntimeError(f"worker {name} did not start: {line!r}")
    return worker


def stored_texts(data_dir: Path) -> Counter[str]:
    """Every page's user_input over the spaces, read from their stores directly."""
    texts: Counter[str] = Counter()
    for store in data_dir.glob("*/*/*/memory.sqlite"):
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            texts.update(row[0] for row in db.execute("SELECT user_input FROM pages"))
    return texts


class Client:
    """Writes until stopped, each with its own write id; a write is acknowledged when `enqueue`
    returns. A failed call is retried with the same write id (the engine stores it once)."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        self.acknowledged: list[str] = []
        self.attempted: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        queue = WriteQueue(redis.Redis.from_url(self.settings.redis_url), self.settings)
        i = 0
        while not self.stop.is_set():
            text = f"write {i}"
            op = plan_write(
                [{"user_input": text, "agent_response": "ok"}],
                max_text_chars=100,
                at=time.time(),
                write_id=f"w{i}",
            )
            self.attempted.append(text)
            while not self.stop.is_set():
                try:
                    queue.enqueue(SPACES[i % len(SPACES)], op)
                    self.acknowledged.append(text)
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            i += 1
            time.sleep(0.005)


def run_fault_loop(
    server: RedisServer, data_dir: Path, rounds: int, redis_restarts: int, seed: int = 7
) -> FaultReport:
    settings = QueueSettings(redis_url=server.url, redis_namespace=NAMESPACE, shard_count=SHARDS)
    client = Client(settings)
    client.thread.start()
    rng = random.Random(seed)
    restart_at = {int(rounds * (k + 1) / (redis_restarts + 1)) for k in range(redis_restarts)}
    try:
        for round_ in range(rounds):
            worker = start_worker(server, data_dir, f"w-{round_}")
            time.sleep(rng.uniform(0.2, 1.5))
            worker.kill()  # SIGKILL: mid-batch, mid-apply, mid-commit
            worker.wait()
            if round_ in restart_at:
                server.restart()
    finally:
        client.stop.set()
        client.thread.join(timeout=10)
    before_last = sum(stored_texts(data_dir).values())
    last = start_worker(server, data_dir, "w-last")
    try:
        queue = WriteQueue(redis.Redis.from_url(settings.redis_url), settings)
        deadline = time.monotonic() + 300
        while queue.depth() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        last.send_signal(signal.SIGTERM)
        last.wait(timeout=60)
    applied = stored_texts(data_dir)
    acknowledged = set(client.acknowledged)
    return FaultReport(
        rounds=rounds,
        redis_restarts=len(restart_at),
        acknowledged=len(acknowledged),
        applied_before_last_worker=before_last,
        lost=sum(1 for text in acknowledged if applied[text] == 0),
        applied_twice=sum(1 for count in applied.values() if count > 1),
        unacknowledged_applied=sum(1 for text in applied if text not in acknowledged),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--redis-restarts", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, running_redis(Path(workdir) / "redis") as server:
        started = time.perf_counter()
        report = run_fault_loop(server, Path(workdir) / "data", args.rounds, args.redis_restarts)
    print(json.dumps({**asdict(report), "seconds": round(time.perf_counter() - started, 1)}, indent=2))


if __name__ == "__main__":
    main()
