"""Reindex through a deployment (issue 14), against a real `redis-server`: a space written by workers on
one model is moved to the model the workers now serve by an rq job (run by rq's own `rq worker` process,
and requested with `memoryos reindex --redis-url`) that asks the space's owner; the owner closes the
space in its pool, re-embeds it and reopens it, and the job's process never opens it."""

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job

from memoryos import MemoryConfig
from memoryos.cli.main import main
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.jobs.tasks import QUEUE_NAME, RETRY_INTERVALS_S, enqueue_reindex
from services.queue.keys import Keys, shard_of
from services.queue.owner_calls import OwnerCallClient, OwnerRefusedError
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import LIST_PAGES, REINDEX, RETRIEVE, STATS, ReindexReport
from tests.support.fakes import HashEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

MAYA = SpaceKey("default", "maya", "helper")
NEW_MODEL = "other-model"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def write(queue: WriteQueue, text: str) -> None:
    queue.enqueue(
        MAYA,
        plan_write([{"user_input": text, "agent_response": "noted"}], max_text_chars=500, at=time.time()),
    )


def recorded(config: MemoryConfig) -> dict[str, str]:
    """The space's embedding meta, read straight from its store (read-only)."""
    store = config.space_dir(MAYA.user_id, MAYA.assistant_id) / "memory.sqlite"
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim', 'vector_generation')"
        )
        return {str(k): str(v) for k, v in rows}


def subprocess_env(data_dir: Path) -> dict[str, str]:
    """This test's environment (the queue's settings), this checkout first on the path, and a data
    directory that does not exist: the process has nothing of any space to open."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "MEMORYOS_DATA_DIR": str(data_dir),
    }


def cli_reindex(url: str, model: str) -> list[str]:
    return ["reindex", "--redis-url", url, "--user", "maya", "--assistant", "helper", "--model", model]


def run_rq_worker_process(url: str, data_dir: Path) -> None:
    """rq's own worker as a process, in burst mode: runs the queued jobs, then exits."""
    done = subprocess.run(
        [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", url, QUEUE_NAME],
        env=subprocess_env(data_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_reindex_job_has_the_owner_move_its_space_to_the_model_it_serves(
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MEMORYOS_REDIS_URL", redis_server.url)
    monkeypatch.setenv("MEMORYOS_REDIS_NAMESPACE", "reindex")
    monkeypatch.setenv("MEMORYOS_SHARD_COUNT", "4")
    monkeypatch.setenv("MEMORYOS_LEASE_TTL_S", "2")
    settings = QueueSettings()  # the jobs read the same environment
    client = redis.Redis.from_url(redis_server.url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")

    # Workers on the old model store two exchanges, then are replaced by workers on a new model.
    old = Running(settings, config, "w-old")
    try:
        write(queue, "I keep my bike in the blue shed")
        write(queue, "My sister lives in Lisbon")
        wait_for(lambda: reads.ask(MAYA, LIST_PAGES, {}).total == 2)
    finally:
        old.stop()
    before = recorded(config)
    new_embedder = HashEmbedder(name=NEW_MODEL, dim=128, salt="v2")
    new = Running(settings, config, "w-new", embedder=new_embedder)
    try:
        wait_for(lambda: len(new.worker.leases.owned) == settings.shard_count)
        with pytest.raises(OwnerRefusedError) as refused:
            reads.ask(MAYA, STATS, {})
        assert refused.value.kind == "EmbeddingModelMismatchError"  # unusable until reindexed
        with pytest.raises(OwnerRefusedError) as wrong_model:
            reads.ask(MAYA, REINDEX, {"model": "fake-hash-embedder"})
        assert wrong_model.value.kind == "InvalidInputError" and NEW_MODEL in str(wrong_model.value)
        assert recorded(config) == before  # a refused reindex changes nothing

        # The job, run by rq's own worker process, which has no data directory.
        job = enqueue_reindex(client, settings, MAYA, NEW_MODEL)
        assert job.retries_left == settings.reindex_retries and job.retry_intervals == RETRY_INTERVALS_S
        assert job.timeout is not None and job.timeout > settings.reindex_timeout_s
        encoded_before = new_embedder.encoded_texts
        job_data = tmp_path / "job-has-no-data"
        run_rq_worker_process(redis_server.url, job_data)
        finished = Job.fetch(job.id, connection=client)
        assert finished.get_status() == "finished", finished.latest_result()
        assert finished.return_value() == {"model": NEW_MODEL, "dim": 128, "pages": 2, "facts": 0}
        assert new_embedder.encoded_texts >= encoded_before + 2  # the owner re-embedded them
        assert not job_data.exists()  # the job's process never looked for a space
        assert before["embedding_model"] == "fake-hash-embedder"
        assert recorded(config) == {
            "embedding_model": NEW_MODEL,
            "embedding_dim": "128",
            "vector_generation": "1",
        }
        found = reads.ask(MAYA, RETRIEVE, {"query": "where is my bike"})
        assert "blue shed" in found.retrieved_pages[0].user_input

        # The space is open in the owner's pool now: a second reindex (asked with `memoryos reindex
        # --redis-url --wait`) must close it first, or the engine's exclusive claim is refused; a write
        # after it reopens the space.
        write(queue, "I started learning the cello")
        wait_for(lambda: reads.ask(MAYA, LIST_PAGES, {}).total == 3)
        assert MAYA in new.worker.spaces.pool.open_keys()
        jobs = Queue(QUEUE_NAME, connection=client)
        waiting = subprocess.Popen(
            [sys.executable, "-m", "memoryos.cli.main", *cli_reindex(redis_server.url, NEW_MODEL), "--wait"],
            env={**subprocess_env(tmp_path / "cli-has-no-data"), "MEMORYOS_REINDEX_RETRIES": "0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: jobs.count == 1, timeout_s=120)  # queued by the command, which now waits
            SimpleWorker([jobs], connection=client).work(burst=True)
            out, err = waiting.communicate(timeout=120)
        finally:
            waiting.kill()
        assert waiting.returncode == 0, err
        assert json.loads(out) == {
            "space": "default/maya/helper",
            "model": NEW_MODEL,
            "dim": 128,
            "pages": 3,
            "facts": 0,
        }
        assert recorded(config)["vector_generation"] == "2"
        write(queue, "My favourite dish is bacalhau")
        wait_for(lambda: reads.ask(MAYA, LIST_PAGES, {}).total == 4)
        found = reads.ask(MAYA, RETRIEVE, {"query": "learning the cello"})
        assert "cello" in found.retrieved_pages[0].user_input

        # Asked for a model the workers do not serve: the job fails at once (a retry would only be refused
        # again), saying so, and nothing moves.
        assert main(cli_reindex(redis_server.url, "fake-hash-embedder")) == 0
        queued = json.loads(capsys.readouterr().out)
        assert queued["space"] == "default/maya/helper" and queued["queue"] == QUEUE_NAME
        assert Job.fetch(queued["job_id"], connection=client).retries_left == settings.reindex_retries
        run_rq_worker_process(redis_server.url, job_data)  # rq's forking worker, as deployed
        refused_job = Job.fetch(queued["job_id"], connection=client)
        assert refused_job.get_status() == "failed"
        failure = refused_job.latest_result()
        assert failure is not None and "MEMORYOS_EMBEDDING_MODEL_NAME=fake-hash-embedder" in str(
            failure.exc_string
        )
        assert recorded(config)["embedding_model"] == NEW_MODEL
        assert recorded(config)["vector_generation"] == "2"
    finally:
        new.stop()


class SlowOnce(HashEmbedder):
    """The fake model, taking `delay_s` over the first batch of texts after `arm()`: a long reindex."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.armed, self.entered = threading.Event(), threading.Event()

    def arm(self) -> None:
        self.armed.set()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if self.armed.is_set() and not is_query:
            self.armed.clear()
            self.entered.set()
            time.sleep(self.delay_s)
        return super().encode(texts, is_query=is_query)


def test_a_write_waiting_for_a_long_reindex_keeps_the_leases(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The owner holds the space closed while it re-embeds (2 s here, two lease TTLs); a write of the
    space arriving meanwhile waits for it on the worker's main thread, which renews the leases while it
    waits: the shard never lapses to another writer, and the write applies after the reindex."""
    settings = QueueSettings(
        redis_url=redis_server.url, redis_namespace="slow", shard_count=4, lease_ttl_s=1.0
    )
    client = redis.Redis.from_url(redis_server.url)
    queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
    lease = Keys(settings.redis_namespace).lease(shard_of(MAYA, settings.shard_count))
    config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")
    embedder = SlowOnce(delay_s=2.0)
    worker = Running(settings, config, "w-slow", embedder=embedder)
    try:
        write(queue, "I keep my bike in the blue shed")
        write(queue, "My sister lives in Lisbon")
        wait_for(lambda: reads.ask(MAYA, LIST_PAGES, {}).total == 2)
        answers: list[ReindexReport] = []
        embedder.arm()
        asking = threading.Thread(
            target=lambda: answers.append(reads.ask(MAYA, REINDEX, {"model": embedder.name}, timeout_s=60))
        )
        asking.start()
        assert embedder.entered.wait(30)  # the owner re-embeds, the space held closed
        write(queue, "I started learning the cello")
        owners_seen: list[bytes | None] = []
        while asking.is_alive():
            owners_seen.append(client.get(lease))
            time.sleep(0.05)
        asking.join()
        assert answers and answers[0].pages == 2
        assert len(owners_seen) > 10 and set(owners_seen) == {b"w-slow"}, owners_seen
        wait_for(lambda: reads.ask(MAYA, LIST_PAGES, {}).total == 3)
    finally:
        worker.stop()
