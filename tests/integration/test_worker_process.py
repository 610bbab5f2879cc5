"""The real `memoryos worker` process against a real `redis-server`: SIGTERM drains and gives the shards
back at once; SIGKILL at random instants while a client writes, and a Redis restart (AOF) midway, lose no
acknowledged write and apply none twice. The long form of the fault loop is `python -m bench.faults`."""

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memoryos.space_pool import SpaceKey
from memoryos.writes import plan_write
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

SPACES = [SpaceKey("default", f"user{i}", "helper") for i in range(4)]
KILL_ROUNDS = 10


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def settings_for(server: RedisServer) -> QueueSettings:
    return QueueSettings(redis_url=server.url, redis_namespace="faults", shard_count=4, lease_ttl_s=1.0)


def start_worker(server: RedisServer, data_dir: Path, name: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_REDIS_URL": server.url,
        "MEMORYOS_REDIS_NAMESPACE": "faults",
        "MEMORYOS_SHARD_COUNT": "4",
        "MEMORYOS_LEASE_TTL_S": "1.0",
        "MEMORYOS_FAISS_USE_GPU": "never",
        "MEMORYOS_WORKER_METRICS_PORT": "0",
    }
    env.pop("MEMORYOS_OPENAI_API_KEY", None)
    env.pop("MEMORYOS_OPENAI_BASE_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "memoryos.cli", "worker", "--worker-id", name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def wait_ready(worker: subprocess.Popen[bytes]) -> None:
    """Until the worker says it serves (its model loaded): kills then land while it applies writes."""
    assert worker.stdout is not None
    assert b"serving shards" in worker.stdout.readline()


def owned_shards(client: redis.Redis, name: str) -> int:
    return sum(client.get(Keys("faults").lease(s)) == name.encode() for s in range(4))


def wait_for(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def stored_texts(data_dir: Path) -> Counter[str]:
    """Every page's user_input over the spaces, read from their stores directly."""
    texts: Counter[str] = Counter()
    for store in data_dir.glob("*/*/*/memory.sqlite"):
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            texts.update(row[0] for row in db.execute("SELECT user_input FROM pages"))
    return texts


def test_sigterm_drains_and_gives_the_shards_back_at_once(redis_server: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    queue = WriteQueue(client, settings_for(redis_server))
    worker = start_worker(redis_server, tmp_path / "data", "w-term")
    try:
        wait_for(lambda: owned_shards(client, "w-term") == 4)
        for i in range(40):
            op = plan_write(
                [{"user_input": f"t{i}", "agent_response": "ok"}], max_text_chars=100, at=time.time()
            )
            queue.enqueue(SPACES[i % 4], op)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
    assert all(client.get(Keys("faults").lease(s)) is None for s in range(4))  # no TTL wait for others
    applied = stored_texts(tmp_path / "data")
    assert max(applied.values(), default=1) == 1
    assert len(applied) + queue.depth() == 40  # applied, or still queued for the next owner: none lost


def test_killed_workers_and_a_redis_restart_lose_no_acknowledged_write(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    settings = settings_for(redis_server)
    acknowledged: list[str] = []
    stop = threading.Event()

    def client_writes() -> None:
        queue = WriteQueue(redis.Redis.from_url(settings.redis_url), settings)
        for i in range(10**6):
            if stop.is_set():
                return
            text = f"write {i}"
            op = plan_write(
                [{"user_input": text, "agent_response": "ok"}],
                max_text_chars=100,
                at=time.time(),
                write_id=f"w{i}",
            )
            while not stop.is_set():
                try:
                    queue.enqueue(SPACES[i % 4], op)  # a retry after a lost reply resends the same write id
                    acknowledged.append(text)
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            time.sleep(0.005)

    writer = threading.Thread(target=client_writes, daemon=True)
    writer.start()
    rng = random.Random(7)
    try:
        for round_ in range(KILL_ROUNDS):
            worker = start_worker(redis_server, tmp_path / "data", f"w-{round_}")
            wait_ready(worker)
            time.sleep(rng.uniform(0.2, 1.5))
            worker.kill()  # SIGKILL at a random instant: mid-batch, mid-apply, mid-commit
            worker.wait()
            if round_ == KILL_ROUNDS // 2:
                redis_server.restart()  # AOF, fsync always: every acknowledged entry comes back
    finally:
        stop.set()
        writer.join(timeout=10)
    print(
        "applied before the final worker:",
        sum(stored_texts(tmp_path / "data").values()),
        "of",
        len(acknowledged),
    )
    final = start_worker(redis_server, tmp_path / "data", "w-final")
    try:
        queue = WriteQueue(redis.Redis.from_url(settings.redis_url), settings)
        wait_for(lambda: queue.depth() == 0, timeout_s=120)
    finally:
        final.send_signal(signal.SIGTERM)
        final.wait(timeout=60)
    applied = stored_texts(tmp_path / "data")
    assert len(acknowledged) > 100
    assert [t for t in acknowledged if applied[t] != 1] == []  # every acknowledged write, exactly once
    assert max(applied.values()) == 1
