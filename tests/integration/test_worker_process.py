"""The real `memoryos worker` process against a real `redis-server`: SIGTERM drains and gives the shards
back at once; its health port serves the same metrics as its metrics port; SIGKILL at random instants while a client writes, and a Redis restart (AOF) midway under
the running worker, lose no acknowledged write, apply none twice and reorder none; the same on the
PostgreSQL store with the database server SIGKILLed and started again too. The long form of the fault loop is `python -m bench.serving.faults`."""

import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from bench.serving.faults import (
    NAMESPACE,
    SHARDS,
    SPACES,
    run_fault_loop,
    start_worker,
    start_worker_process,
    stored_texts,
    worker_env,
)
from memoryos.space.writes import plan_write
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.postgres_server import running_postgres
from tests.support.redis_server import RedisServer, free_port, running_redis

pytestmark = pytest.mark.integration

KILL_ROUNDS = 6


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def settings_for(server: RedisServer) -> QueueSettings:
    return QueueSettings(redis_url=server.url, redis_namespace=NAMESPACE, shard_count=SHARDS, lease_ttl_s=1.0)


def owned_shards(client: redis.Redis, name: str) -> int:
    return sum(client.get(Keys(NAMESPACE).lease(s)) == name.encode() for s in range(SHARDS))


def wait_for(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


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


def series(port: int) -> set[tuple[str, frozenset[tuple[str, str]]]] | None:
    """The sample names and labels `GET /metrics` on `port` answers; None while it is not served yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except urllib.error.URLError:
        return None
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_one_process_serves_its_metrics_on_the_health_port_as_on_its_metrics_port(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    health_port, metrics_port = free_port(), free_port()
    env = worker_env(redis_server.url, tmp_path / "data") | {
        "MEMORYOS_WORKER_HEALTH_PORT": str(health_port),
        "MEMORYOS_WORKER_METRICS_PORT": str(metrics_port),
    }
    worker = start_worker_process(env, "w-one")
    try:
        wait_for(lambda: series(health_port) is not None)
        on_health, on_metrics = series(health_port), series(metrics_port)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
    assert on_health == on_metrics  # no worker_process label: the series a scrape of 9400 knew
    assert on_health is not None and ("memoryos_queue_depth", frozenset()) in on_health


def test_killed_workers_and_a_redis_restart_lose_no_acknowledged_write(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    report = run_fault_loop(redis_server, tmp_path / "data", rounds=KILL_ROUNDS, redis_restarts=1)
    assert report.acknowledged > 100 and report.redis_restarts == 1
    assert report.workers_alive_after_redis_restarts == 1  # Redis restarted under it; it went on
    assert report.applied_before_last_worker > 0  # the kills landed on workers at work
    assert report.lost == 0 and report.applied_twice == 0 and report.reordered == 0


def test_killed_workers_and_redis_and_database_restarts_lose_no_write_on_the_database(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The same loop on the PostgreSQL store, each worker with a data directory of its own, and the
    database server SIGKILLed and started again under a running worker and the writing client."""
    with running_postgres() as database:
        report = run_fault_loop(
            redis_server,
            tmp_path / "data",
            rounds=4,
            redis_restarts=1,
            database=database,
            database_restarts=1,
        )
    assert report.store == "postgres" and report.acknowledged > 100
    assert (
        report.workers_alive_after_redis_restarts == 1 and report.workers_alive_after_database_restarts == 1
    )
    assert report.applied_before_last_worker > 0
    assert (report.lost, report.applied_twice, report.reordered, report.dead_letters) == (0, 0, 0, 0)


def test_a_worker_rides_through_a_redis_restart(redis_server: RedisServer, tmp_path: Path) -> None:
    """Redis stops for longer than the lease TTL and comes back from its AOF: the worker process keeps
    running, re-wins its leases (they expired meanwhile) and applies what was written before and after."""
    client = redis.Redis.from_url(redis_server.url)
    queue = WriteQueue(client, settings_for(redis_server))
    worker = start_worker(redis_server, tmp_path / "data", "w-ride")

    def write(first: int) -> None:
        for i in range(first, first + 20):
            op = plan_write(
                [{"user_input": f"t{i}", "agent_response": "ok"}], max_text_chars=100, at=time.time()
            )
            queue.enqueue(SPACES[i % 4], op)

    try:
        wait_for(lambda: owned_shards(client, "w-ride") == 4)
        write(0)
        wait_for(lambda: queue.depth() == 0)
        redis_server.stop()
        # past the 1 s lease TTL, counted from the worker's last renewal, which reached Redis before the
        # stop: the leases expire while Redis is away
        time.sleep(1.2)
        redis_server.start()
        write(20)
        wait_for(lambda: queue.depth() == 0 and owned_shards(client, "w-ride") == 4)
        assert worker.poll() is None, "the worker exited when Redis went away"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
    applied = stored_texts(tmp_path / "data")
    assert sorted(applied) == sorted(f"t{i}" for i in range(40)) and set(applied.values()) == {1}
