"""rq maintenance jobs against a real `redis-server`: the scheduled expiry sweep asks each space's owner
(through the queue) to erase what expired; the job never opens a space itself."""

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.cron import CronScheduler
from rq.job import JobStatus

import services.jobs as jobs_module
from memoryos import MemoryConfig
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space.ops import ForgetSpace
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.jobs.tasks import (
    QUEUE_NAME,
    reindex_space_job,
    rewrite_aof_after_forgets,
    sweep_every_space,
    sweep_space,
)
from services.queue.owner_calls import OwnerCallClient
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import LIST_PAGES
from services.worker.main import Worker
from tests.support.fakes import FAKE_MODEL_NAME, FakeClock, HashEmbedder
from tests.support.queue_worker import Running
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def job_environment(monkeypatch: pytest.MonkeyPatch, redis_url: str, namespace: str) -> QueueSettings:
    """The `MEMORYOS_*` environment the jobs read (a namespace per test, 4 shards), and the settings of
    the test's own queue and worker under it."""
    monkeypatch.setenv("MEMORYOS_REDIS_URL", redis_url)
    monkeypatch.setenv("MEMORYOS_REDIS_NAMESPACE", namespace)
    monkeypatch.setenv("MEMORYOS_SHARD_COUNT", "4")
    return QueueSettings(lease_ttl_s=1.0)


def test_the_scheduled_sweep_erases_expired_pages_through_their_owner(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = job_environment(monkeypatch, redis_server.url, "jobs")  # the job reads the same
    client = redis.Redis.from_url(redis_server.url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")
    # A frozen clock: the worker's own expiry timer never fires, so only the job can sweep.
    worker = Worker(settings, config, "w-jobs", embedder=HashEmbedder(), llm=OfflineLLM(), clock=FakeClock())
    assert worker.spaces.config.embedding_yield_ms == 0, (
        "a worker embeds the writes Redis acknowledged at once"
    )
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        maya = SpaceKey("default", "maya", "helper")
        now = time.time()
        queue.enqueue(
            maya,
            plan_write(
                [{"user_input": "short-lived", "agent_response": "ok"}], max_text_chars=99, at=now, ttl_s=1
            ),
        )
        queue.enqueue(
            maya, plan_write([{"user_input": "kept", "agent_response": "ok"}], max_text_chars=99, at=now)
        )
        deadline = time.monotonic() + 20
        while not worker.leases.owned and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reads.ask(maya, LIST_PAGES, {}).total == 2
        time.sleep(1.2)
        jobs = Queue(QUEUE_NAME, connection=client)
        job = jobs.enqueue(sweep_every_space)
        SimpleWorker([jobs], connection=client).work(burst=True)
        assert job.return_value() == 1  # one known space asked
        store = config.space_dir("maya", "helper") / "memory.sqlite"

        def stored() -> list[str]:
            with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
                return [row[0] for row in db.execute("SELECT user_input FROM pages")]

        while stored() != ["kept"]:
            assert time.monotonic() < deadline, stored()
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=30)


def test_jobs_use_the_redis_of_their_rq_worker_not_the_environments(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rq worker memoryos-maintenance --url URL`: the jobs it runs ask the owners behind URL, even where
    MEMORYOS_REDIS_URL names another Redis (here, a port where nothing listens)."""
    nowhere = job_environment(monkeypatch, "redis://127.0.0.1:9/0", "jobs")
    settings = nowhere.model_copy(update={"redis_url": redis_server.url})
    client = redis.Redis.from_url(redis_server.url)
    worker = Running(settings, MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never"), "w-url")
    try:
        maya = "default/maya/helper"
        op = plan_write([{"user_input": "kept", "agent_response": "ok"}], max_text_chars=99, at=time.time())
        WriteQueue(client, settings).enqueue(SpaceKey("default", "maya", "helper"), op)
        jobs = Queue(QUEUE_NAME, connection=client)  # what `rq worker --url` connects to
        swept = jobs.enqueue(sweep_space, maya)  # writes to the queue
        reindexed = jobs.enqueue(reindex_space_job, maya, FAKE_MODEL_NAME)  # asks the owner
        SimpleWorker([jobs], connection=client).work(burst=True)
        assert swept.get_status() == JobStatus.FINISHED, swept.latest_result()
        assert reindexed.get_status() == JobStatus.FINISHED, reindexed.latest_result()
        assert reindexed.return_value()["pages"] == 1
    finally:
        worker.stop()


def test_the_cron_file_schedules_the_sweep(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYOS_SWEEP_INTERVAL_S", "120")
    scheduler = CronScheduler(connection=redis.Redis.from_url(redis_server.url))
    scheduler.load_config_from_file(str(Path(jobs_module.__file__).with_name("cron.py")))
    jobs = {job.func: job for job in scheduler.get_jobs()}
    assert set(jobs) == {sweep_every_space, rewrite_aof_after_forgets}
    assert all(job.queue_name == QUEUE_NAME and job.interval == 120 for job in jobs.values())


def aof_holds(server: RedisServer, text: bytes) -> bool:
    return any(text in path.read_bytes() for path in server.directory.rglob("*.aof*"))


def test_a_forgotten_users_text_leaves_the_aof_at_the_next_rewrite_job(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = job_environment(monkeypatch, redis_server.url, "aof")
    client = redis.Redis.from_url(redis_server.url)
    queue = WriteQueue(client, settings)
    worker = Running(settings, MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never"), "w-aof")
    secret = "Zanzibar-quokka-7731"
    omar = SpaceKey("default", "omar", "helper")
    jobs = Queue(QUEUE_NAME, connection=client)
    try:
        turn = {"user_input": f"My locker code is {secret}", "agent_response": "Noted."}
        queue.enqueue(omar, plan_write([turn], max_text_chars=99, at=time.time()))
        deadline = time.monotonic() + 30
        while queue.depth():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert aof_holds(redis_server, secret.encode())
        job = jobs.enqueue(rewrite_aof_after_forgets)
        SimpleWorker([jobs], connection=client).work(burst=True)
        assert job.return_value() is False  # nothing forgotten yet: no rewrite
        queue.purge(omar)  # what the API's DELETE does, then the forget behind anything in flight
        queue.enqueue(omar, ForgetSpace())
        while queue.known_spaces() or queue.depth():
            assert time.monotonic() < deadline, "the forget did not apply"
            time.sleep(0.05)
    finally:
        worker.stop()
    job = jobs.enqueue(rewrite_aof_after_forgets)
    SimpleWorker([jobs], connection=client).work(burst=True)
    assert job.return_value() is True
    while client.info("persistence")["aof_rewrite_in_progress"]:
        time.sleep(0.05)
    assert not aof_holds(redis_server, secret.encode())
    assert not aof_holds(redis_server, b"omar")
