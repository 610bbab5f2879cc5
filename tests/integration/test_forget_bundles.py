"""A forget deletes the space's bundles still in Redis (issue 14: "a forget also purges the user's entries
still in Redis (stream, job payloads)"), against a real `redis-server` and a worker: an export waiting to
be downloaded and an import job's upload hold the space's text, and the import would bring it back. The
API purges them with the space's writes; the owner again once it applied the forget (an export that
finished in between); and an export whose space was forgotten while it was being read is not kept."""

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus

from memoryos import MemoryConfig
from memoryos.errors import InvalidInputError
from memoryos.space.ops import ForgetSpace
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.api.settings import ApiSettings
from services.jobs.bundles import enqueue_export, enqueue_import
from services.jobs.tasks import QUEUE_NAME
from services.queue.bundle_transfer import CHUNK_BYTES, chunks, purge_bundles, upload
from services.queue.keys import Keys
from services.queue.owner_calls import OwnerCallClient, OwnerRefusedError
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import EXPORT_BUNDLE, LIST_PAGES
from services.spaces.queued import QueuedSpaces
from services.worker import bundles as worker_bundles
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

MAYA = SpaceKey("default", "maya", "helper")
OMAR = SpaceKey("default", "omar", "helper")
MIB = 1024 * 1024


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


class Deployment:
    def __init__(self, server: RedisServer, tmp_path: Path) -> None:
        self.settings = QueueSettings(
            redis_url=server.url, redis_namespace="bundles", shard_count=2, lease_ttl_s=2.0
        )
        self.client = redis.Redis.from_url(server.url)
        self.queue = WriteQueue(self.client, self.settings)
        self.owner_calls = OwnerCallClient(self.client, self.settings)
        self.keys = Keys("bundles")
        self.config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")

    def write(self, key: SpaceKey, text: str) -> None:
        turns = [{"user_input": text, "agent_response": "noted"}]
        self.queue.enqueue(key, plan_write(turns, max_text_chars=500, at=time.time()))

    def store_maya(self) -> None:
        """MAYA's one exchange, written and applied (a worker runs)."""
        self.write(MAYA, "my passport number is X1234")
        wait_for(lambda: self.owner_calls.ask(MAYA, LIST_PAGES, {}).total == 1)

    def export(self, key: SpaceKey) -> str:
        sent = self.owner_calls.ask(key, EXPORT_BUNDLE, {"max_bytes": 64 * MIB, "ttl_s": 3600})
        return sent.transfer_id

    def held(self, transfer_id: str) -> bool:
        return bool(self.client.exists(self.keys.bundle(transfer_id)))


def test_a_forget_deletes_the_spaces_exports_and_queued_imports(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(redis_server, tmp_path)
    worker = Running(deployment.settings, deployment.config, "w-bundles")
    try:
        deployment.write(OMAR, "I like chess")
        deployment.store_maya()
        exported = deployment.export(MAYA)
        others = deployment.export(OMAR)
        bundle = tmp_path / "maya.bundle"
        bundle.write_bytes(b"not read before the forget")
        job = enqueue_import(deployment.client, deployment.settings, MAYA, bundle)
        queued = job.args[1]
        export_job = enqueue_export(deployment.client, deployment.settings, MAYA)
        omars_job = enqueue_export(deployment.client, deployment.settings, OMAR)
        running = enqueue_export(deployment.client, deployment.settings, MAYA)
        Queue(QUEUE_NAME, connection=deployment.client).remove(running)
        running.set_status(JobStatus.STARTED)  # an rq worker runs it now: left to finish or fail
        assert deployment.held(exported) and deployment.held(queued) and deployment.held(others)

        api = QueuedSpaces(deployment.config, deployment.settings, ApiSettings())
        anyio.run(api.forget, MAYA)  # the API's forget (no rq worker: the jobs are still queued)
        assert not deployment.held(exported) and not deployment.held(queued)
        assert deployment.held(others)  # another user's export stays
        assert not deployment.client.exists(deployment.keys.space_bundles("default/maya/helper"))
        assert not Job.exists(job.id, connection=deployment.client)  # her jobs name her: gone
        assert not Job.exists(export_job.id, connection=deployment.client)
        assert Queue(QUEUE_NAME, connection=deployment.client).job_ids == [omars_job.id]
        assert Job.exists(running.id, connection=deployment.client)
        wait_for(lambda: not deployment.config.space_dir(MAYA.user_id, MAYA.assistant_id).exists())
    finally:
        worker.stop()


def test_the_owner_deletes_an_export_that_finished_after_the_apis_purge(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(redis_server, tmp_path)
    worker = Running(deployment.settings, deployment.config, "w-first")
    try:
        deployment.store_maya()
    finally:
        worker.stop()
    deployment.queue.purge(MAYA)
    late = tmp_path / "late.bundle"
    late.write_bytes(b"an export that finished after the purge")
    transfer_id = upload(deployment.client, deployment.keys, MAYA, late, MIB)
    deployment.queue.enqueue(MAYA, ForgetSpace())
    worker = Running(deployment.settings, deployment.config, "w-second")
    try:
        space_dir = deployment.config.space_dir(MAYA.user_id, MAYA.assistant_id)
        wait_for(lambda: not space_dir.exists() and not deployment.held(transfer_id))
    finally:
        worker.stop()


def test_an_export_of_a_space_forgotten_while_it_was_read_is_not_kept(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = Deployment(redis_server, tmp_path)
    exporting = worker_bundles.export_space

    def export_then_forgotten(config: MemoryConfig, user_id: str, assistant_id: str, path: Path) -> object:
        done = exporting(config, user_id, assistant_id, path)
        (config.space_dir(user_id, assistant_id) / "memory.sqlite").unlink()  # the forget lands here
        return done

    worker = Running(deployment.settings, deployment.config, "w-race")
    try:
        deployment.store_maya()
        monkeypatch.setattr(worker_bundles, "export_space", export_then_forgotten)
        with pytest.raises(OwnerRefusedError) as refused:
            deployment.export(MAYA)
        assert refused.value.kind == "SpaceNotFoundError"
        assert list(deployment.client.scan_iter(match=deployment.keys.bundle("*"))) == []
    finally:
        worker.stop()


def test_a_bundle_deleted_while_it_is_read_is_never_taken_for_a_whole_one(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A forget purging a bundle between two of its pieces: the read fails, rather than a short file
    passing for the space's export."""
    deployment = Deployment(redis_server, tmp_path)
    bundle = tmp_path / "big.bundle"
    bundle.write_bytes(b"x" * (CHUNK_BYTES + 1024))  # two pieces
    transfer_id = upload(deployment.client, deployment.keys, MAYA, bundle, 64 * MIB)
    pieces = chunks(deployment.client, deployment.keys, transfer_id)
    assert len(next(pieces)) == CHUNK_BYTES
    assert purge_bundles(deployment.client, deployment.keys, MAYA) == 1
    with pytest.raises(InvalidInputError, match="deleted while it was read"):
        next(pieces)
