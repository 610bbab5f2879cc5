"""`memoryos worker --processes 2` with its embedding engine child, against a real `redis-server`: the two
applying processes embed through one engine, every space's writes apply once and in order, and an engine
killed with SIGKILL inside a page batch is started again by the supervisor and embeds them all —
writes acknowledged before and while it was dead are stored, none left pending."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.serving.faults import worker_env
from bench.serving.ingest import free_ports
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.integration.test_worker_processes import stored_turns
from tests.support.engine_worker import HOLD_FILE_ENV
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

NAMESPACE = "engine"
SHARDS = 8
SPACES = [SpaceKey("default", f"user{i}", "helper") for i in range(20)]
TIMEOUT_S = 90.0
ENGINE_LINE = re.compile(rb"memoryos embedding-engine (\d+): serving .* on (\S+)")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


class Lines:
    """The worker tree's stdout, read on a thread."""

    def __init__(self, stream: object) -> None:
        self.lines: list[bytes] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def engine_pids(self) -> list[int]:
        return [int(match[1]) for line in list(self.lines) if (match := ENGINE_LINE.search(line))]

    def engine_socket(self) -> Path:
        return next(
            Path(match[2].decode()) for line in list(self.lines) if (match := ENGINE_LINE.search(line))
        )

    def serving_workers(self) -> int:
        return sum(b"serving shards" in line for line in list(self.lines))


def wait_for(condition: object) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def write(queue: WriteQueue, first: int, count: int) -> None:
    for i in range(first, first + count):
        turn = {"user_input": f"turn {i:04d} about topic {i % 7}", "agent_response": "noted"}
        op = plan_write([turn], max_text_chars=100, at=time.time(), write_id=f"w{i}")
        queue.enqueue(SPACES[i % len(SPACES)], op)


def engine_metric(port: int, name: str = "memoryos_embedding_engine_up") -> float:
    """One of a worker's `memoryos_embedding_engine_*` samples, scraped."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        scraped = response.read().decode()
    return float(next(line for line in scraped.splitlines() if line.startswith(f"{name} ")).split()[1])


def stores(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob("*/*/*/memory.sqlite"))


def pending_pages(data_dir: Path) -> int:
    """Pages stored and not embedded yet, every space."""
    pending = 0
    for store in stores(data_dir):
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            pending += db.execute("SELECT COUNT(*) FROM pages WHERE vector IS NULL").fetchone()[0]
    return pending


def test_two_workers_share_one_engine_and_an_engine_killed_mid_batch_loses_nothing(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    env = worker_env(redis_server.url, data_dir, NAMESPACE, SHARDS)
    metrics_port = free_ports(2)
    hold = tmp_path / "hold"
    env |= {
        "MEMORYOS_WORKER_PROCESSES": "2",
        "MEMORYOS_EMBEDDING_ENGINE_TIMEOUT_S": "0.5",
        "MEMORYOS_WORKER_METRICS_PORT": str(metrics_port),
        "MEMORYOS_WORKER_HEALTH_PORT": "0",  # not asked here; its default 9399 may be taken
        HOLD_FILE_ENV: str(hold),
    }
    client = redis.Redis.from_url(redis_server.url)
    queue = WriteQueue(
        client, QueueSettings(redis_url=redis_server.url, redis_namespace=NAMESPACE, shard_count=SHARDS)
    )
    keys = Keys(NAMESPACE)
    parent = subprocess.Popen(
        [sys.executable, "-m", "tests.support.engine_worker", "--worker-id", "pair"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        lines = Lines(parent.stdout)
        wait_for(lambda: len(lines.engine_pids()) == 1 and lines.serving_workers() == 2)
        assert b"2 processes and an embedding engine" in lines.lines[0]
        wait_for(lambda: {client.get(keys.lease(shard)) for shard in range(SHARDS)} == {b"pair-0", b"pair-1"})

        write(queue, 0, 200)  # both applying processes' pages go through the one engine
        wait_for(lambda: queue.depth() == 0 and len(stores(data_dir)) == len(SPACES))
        wait_for(lambda: pending_pages(data_dir) == 0)
        assert int(EngineEmbedder(lines.engine_socket()).stats()["texts"]) >= 200  # the engine embedded them

        hold.touch()
        write(queue, 200, 100)
        wait_for(lambda: Path(f"{hold}.inside").exists() and queue.depth() == 0)
        assert pending_pages(data_dir) > 0  # acknowledged and stored, their batch inside the engine's model
        assert engine_metric(metrics_port) == 1
        os.kill(lines.engine_pids()[0], signal.SIGKILL)  # mid-batch
        hold.unlink()
        wait_for(lambda: engine_metric(metrics_port) == 0)  # the worker's metrics say it is unreachable
        write(queue, 300, 100)  # acknowledged while the engine is dead
        wait_for(lambda: queue.depth() == 0)  # applied (stored) without it
        wait_for(lambda: len(lines.engine_pids()) == 2)  # the supervisor started it again
        wait_for(lambda: pending_pages(data_dir) == 0)  # and every page got its vector
        assert engine_metric(metrics_port + 1) == 1
        assert engine_metric(metrics_port + 1, "memoryos_embedding_engine_stalled") == 0
        assert engine_metric(metrics_port + 1, "memoryos_embedding_engine_batches_total") > 0  # the new one's
        assert engine_metric(metrics_port + 1, "memoryos_embedding_engine_last_success_timestamp_seconds") > 0

        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=TIMEOUT_S) == 0
    finally:
        parent.kill()
    stored = stored_turns(data_dir)
    assert len(stored) == len(SPACES)
    for space, turns in stored.items():  # every write once, in the order accepted
        number = int(space.removeprefix("user"))
        assert turns == list(range(number, 400, len(SPACES))), space
