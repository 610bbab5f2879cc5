"""Export, import and reindex as rq jobs through the API and the CLI (issue 14), against a real
`redis-server`, the API under uvicorn (real HTTP), a space worker on a thread and rq's own workers: each
job asks the space's owner and never opens the space; a tenant sees only its own jobs."""

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job

from memoryos import MemoryConfig
from memoryos.cli.main import main
from memoryos.portability.bundles.read import BundleReader
from services.api.settings import ApiSettings
from services.client import MemoryClient
from services.jobs.tasks import QUEUE_NAME, RETRY_INTERVALS_S
from services.queue.keys import Keys
from services.queue.settings import QueueSettings
from tests.integration.test_reindex_job import run_rq_worker_process
from tests.support.api_server import RunningApi, running_api
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

KEYS = {"key-acme-0123456789": "acme", "key-globex-0123456789": "globex"}
ACME, GLOBEX = (
    {"Authorization": "Bearer key-acme-0123456789"},
    {"Authorization": "Bearer key-globex-0123456789"},
)
MODEL = "fake-hash-embedder"  # the model the test workers serve
ASSISTANT = "default_assistant_profile"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def queue(
    redis_server: RedisServer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> QueueSettings:
    """A namespace per test, in the environment too: rq jobs read their settings from it."""
    for name, value in {
        "MEMORYOS_REDIS_URL": redis_server.url,
        "MEMORYOS_REDIS_NAMESPACE": f"jobs{abs(hash(request.node.name)) % 10**8}",
        "MEMORYOS_SHARD_COUNT": "4",
        "MEMORYOS_LEASE_TTL_S": "1",
        "MEMORYOS_READ_TIMEOUT_S": "5",
        "MEMORYOS_BUNDLE_TIMEOUT_S": "60",
        "MEMORYOS_TENANT": "acme",  # the CLI's tenant
    }.items():
        monkeypatch.setenv(name, value)
    return QueueSettings()


@pytest.fixture
def quick_job_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands that wait for a job look at it every 0.05 s, not 0.5 s: a test waits on the command
    after each burst of jobs."""
    monkeypatch.setattr("services.jobs.request.POLL_S", 0.05)


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    return MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")


@pytest.fixture
def api(queue: QueueSettings, tmp_path: Path) -> Iterator[RunningApi]:
    """`KEYS`, and an acme key bound to user ann. The API's own MemoryConfig points elsewhere: it must
    never open the workers' data directory."""
    keys_file = tmp_path / "keys.json"
    entries = [{"key": key, "tenant": tenant} for key, tenant in KEYS.items()]
    entries.append({"key": "key-acme-ann-0123456789", "tenant": "acme", "user_id": "ann"})
    keys_file.write_text(json.dumps({"keys": entries}))
    settings = ApiSettings(keys_file=keys_file, port=0)
    with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as up:
        yield up


@pytest.fixture
def rq_queue(queue: QueueSettings) -> Iterator[Queue]:
    client = redis.Redis.from_url(queue.redis_url)
    yield Queue(QUEUE_NAME, connection=client)
    client.close()


class BurstWorker(SimpleWorker):
    """rq's in-process worker without its command channel (pub/sub), which nothing here sends to: at
    teardown rq waits up to 1 s for that channel's thread, which misses its own unsubscribe reply about
    every other time (a second of nothing per burst). Jobs are taken, run and recorded as rq does."""

    def subscribe(self) -> None:
        """No channel: `unsubscribe` then has no thread to wait for."""


def run_jobs(jobs: Queue) -> None:
    """rq's worker in this process, in burst mode: runs what is queued now, then returns."""
    BurstWorker([jobs], connection=jobs.connection).work(burst=True)


def queued(response: httpx.Response) -> str:
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status_url"] == f"/v1/jobs/{body['job_id']}"
    return str(body["job_id"])


def bundle_keys(queue: QueueSettings) -> list[bytes]:
    return list(redis.Redis.from_url(queue.redis_url).scan_iter(Keys(queue.redis_namespace).bundle("*")))


def write_turns(api: RunningApi, user: str, texts: list[str]) -> None:
    with MemoryClient(api.url, api_key="key-acme-0123456789", timeout_s=30) as memory:
        memory.add_batch(user, [{"user_input": text, "agent_response": "Noted."} for text in texts])


def pages_of(api: RunningApi, user: str) -> list[str]:
    with MemoryClient(api.url, api_key="key-acme-0123456789", timeout_s=30) as memory:
        return [page.user_input for page in memory.list_pages(user).pages]


def test_export_and_import_jobs_go_through_the_owner_and_stay_with_their_tenant(
    api: RunningApi, queue: QueueSettings, config: MemoryConfig, rq_queue: Queue, tmp_path: Path
) -> None:
    texts = ["I keep my bike in the blue shed.", "My sister lives in Lisbon.", "I play the cello."]
    write_turns(api, "rui", texts)  # accepted by Redis alone: no worker yet
    space_jobs = f"{api.url}/v1/users/rui/assistants/{ASSISTANT}"
    job_id = queued(api.http.post(f"{space_jobs}/export-jobs", headers=ACME))
    job = Job.fetch(job_id, connection=rq_queue.connection)
    assert job.retries_left == queue.bundle_job_retries and job.retry_intervals == RETRY_INTERVALS_S
    info = subprocess.run(
        [sys.executable, "-m", "rq.cli", "info", "--url", queue.redis_url, QUEUE_NAME],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"{QUEUE_NAME} |" in info.stdout and "1 jobs total" in info.stdout, info.stdout
    status = api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=ACME).json()
    assert (status["kind"], status["status"], status["user_id"]) == ("export", "queued", "rui")
    early = api.http.get(f"{api.url}/v1/jobs/{job_id}/bundle", headers=ACME)
    assert (early.status_code, early.json()["error"]) == (409, "job_not_finished")

    # No owner yet: the job fails and rq schedules its retry.
    run_jobs(rq_queue)
    waiting = api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=ACME).json()
    assert (waiting["status"], waiting["retries_left"]) == ("scheduled", queue.bundle_job_retries - 1)

    # Another tenant's key, a key bound to another user, or an id that is not one, learn nothing of it.
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/bundle"):
        for headers in (GLOBEX, {"Authorization": "Bearer key-acme-ann-0123456789"}):
            other = api.http.get(f"{api.url}{path}", headers=headers)
            assert (other.status_code, other.json()["error"]) == (404, "job_not_found"), path
    malformed = api.http.get(f"{api.url}/v1/jobs/..%2F..%2Fetc", headers=ACME)
    assert malformed.status_code in (404, 422) and "etc" not in malformed.text
    assert api.http.get(f"{api.url}/v1/jobs/not-a-job", headers=ACME).json()["field"] == "job_id"

    worker = Running(queue, config, "w-jobs")
    try:
        wait_for(lambda: len(pages_of(api, "rui")) == 3)
        rq_queue.enqueue_job(job)  # the retry, now rather than in RETRY_INTERVALS_S[0] s
        job_data = tmp_path / "rq-has-no-data"
        run_rq_worker_process(queue.redis_url, job_data)  # rq's own forking worker, as deployed
        assert not job_data.exists()  # the job's process never looked for a space
        done = api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=ACME).json()
        assert done["status"] == "finished" and done["error"] is None, done
        assert done["result"]["download"] == f"/v1/jobs/{job_id}/bundle"
        downloaded = api.http.get(f"{api.url}{done['result']['download']}", headers=ACME)
        assert downloaded.status_code == 200 and len(downloaded.content) == done["result"]["size_bytes"]
        again = api.http.get(f"{api.url}{done['result']['download']}", headers=ACME)
        assert again.content == downloaded.content  # kept until it expires, not taken by a download
        synchronous = api.http.get(f"{space_jobs}/export", headers=ACME, timeout=60)
        (tmp_path / "job.bundle").write_bytes(downloaded.content)
        (tmp_path / "sync.bundle").write_bytes(synchronous.content)
        with (
            BundleReader(tmp_path / "job.bundle") as by_job,
            BundleReader(tmp_path / "sync.bundle") as by_api,
        ):
            assert by_job.manifest.items_sha256 == by_api.manifest.items_sha256
            assert by_job.manifest.counts() == by_api.manifest.counts()
        assert api.http.get(f"{api.url}/v1/jobs/{job_id}/bundle", headers=GLOBEX).status_code == 404

        # The bundle back, into another user's empty space, through an import job (the typed client).
        with MemoryClient(api.url, api_key="key-acme-0123456789", timeout_s=30) as acme:
            assert acme.job_bundle(job_id) == downloaded.content
            import_id = acme.import_job("rui-copy", downloaded.content).job_id
            assert len(bundle_keys(queue)) == 2  # the export's, and the upload waiting for its job
            run_jobs(rq_queue)
            imported = acme.job(import_id)
        assert imported.status == "finished" and imported.kind == "import", imported
        assert imported.result is not None and imported.result["counts"]["pages"] == 3
        assert imported.result["space"] == f"rui-copy/{ASSISTANT}"
        assert pages_of(api, "rui-copy") == pages_of(api, "rui") == texts
        assert len(bundle_keys(queue)) == 1  # the upload deleted once imported
        assert api.http.get(f"{api.url}/v1/jobs/{import_id}", headers=GLOBEX).status_code == 404
        not_export = api.http.get(f"{api.url}/v1/jobs/{import_id}/bundle", headers=ACME)
        assert not_export.status_code == 404
    finally:
        worker.stop()


def test_an_import_job_with_no_bundle_is_422_and_queues_nothing(api: RunningApi, rq_queue: Queue) -> None:
    empty = api.http.post(f"{api.url}/v1/users/zed/assistants/{ASSISTANT}/import-jobs", headers=ACME)
    assert empty.status_code == 422 and empty.json()["field"] == "body", empty.text
    assert rq_queue.count == 0


def test_a_poison_bundle_fails_its_import_job_at_once_and_writes_nothing(
    api: RunningApi, queue: QueueSettings, config: MemoryConfig, rq_queue: Queue
) -> None:
    worker = Running(queue, config, "w-poison")
    try:
        poison = f"{api.url}/v1/users/zed/assistants/{ASSISTANT}/import-jobs"
        job_id = queued(api.http.post(poison, headers=ACME, content=b"PK\x03\x04 not a bundle at all"))
        run_jobs(rq_queue)
        failed = api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=ACME).json()
        assert failed["status"] == "failed" and failed["result"] is None, failed
        error = failed["error"]
        assert (error["status"], error["field"]) == (422, "bundle")
        assert "not a MemoryOS bundle" in error["message"] and "/tmp" not in error["message"]
        # Failed, not scheduled for a retry: a retry would only be refused again.
        assert not config.space_dir("zed", ASSISTANT).exists()
        assert bundle_keys(queue) == []  # the upload went with the job
        assert api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=GLOBEX).status_code == 404

        # An export of a space that does not exist: 404 at once, in words that name no path of the owner's.
        nobody = queued(
            api.http.post(f"{api.url}/v1/users/nobody/assistants/{ASSISTANT}/export-jobs", headers=ACME)
        )
        run_jobs(rq_queue)
        missing = api.http.get(f"{api.url}/v1/jobs/{nobody}", headers=ACME).json()
        assert missing["status"] == "failed" and missing["error"]["status"] == 404, missing
        assert (
            missing["error"]["message"]
            == "no memory for user 'nobody' (assistant 'default_assistant_profile')"
        )
        assert not config.space_dir("nobody", ASSISTANT).exists()

        # A space that already holds memory is refused the same way (409), and keeps what it held.
        write_turns(api, "ann", ["I like tea."])
        wait_for(lambda: pages_of(api, "ann") == ["I like tea."])
        exported = api.http.get(f"{api.url}/v1/users/ann/assistants/{ASSISTANT}/export", headers=ACME)
        into_full = f"{api.url}/v1/users/ann/assistants/{ASSISTANT}/import-jobs"
        conflict_id = queued(api.http.post(into_full, headers=ACME, content=exported.content))
        run_jobs(rq_queue)
        conflict = api.http.get(f"{api.url}/v1/jobs/{conflict_id}", headers=ACME).json()
        assert (conflict["status"], conflict["error"]["status"]) == ("failed", 409), conflict
        assert pages_of(api, "ann") == ["I like tea."]
    finally:
        worker.stop()

    # Bundles held in Redis up to MEMORYOS_MAX_HELD_BUNDLES_MB: past it a bundle job is refused (503),
    # nothing queued, nothing stored.
    held = Keys(queue.redis_namespace).bundle("f" * 32)
    rq_queue.connection.set(held, b"x" * 1024 * 1024, ex=60)
    full = queue.model_copy(update={"max_held_bundles_mb": 1})
    api_side = MemoryConfig(data_dir=config.data_dir.parent / "api-side-2")
    with running_api(ApiSettings(keys=KEYS, port=0), api_side, queue=full) as small:
        for route in ("export-jobs", "import-jobs"):
            refused = small.http.post(
                f"{small.url}/v1/users/ann/assistants/{ASSISTANT}/{route}", headers=ACME, content=b"PK"
            )
            assert refused.status_code == 503 and refused.headers["retry-after"] == "60", refused.text
    assert rq_queue.count == 0 and bundle_keys(queue) == [held.encode()]


def in_thread(run: Callable[[], int]) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run()), daemon=True)
    thread.start()
    return thread, codes


@pytest.mark.usefixtures("quick_job_polls")
def test_reindex_route_every_space_reindex_and_the_cli_bundles_through_jobs(
    api: RunningApi,
    queue: QueueSettings,
    config: MemoryConfig,
    rq_queue: Queue,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_turns(api, "rui", ["I keep my bike in the blue shed.", "My sister lives in Lisbon."])
    with MemoryClient(api.url, api_key="key-globex-0123456789", timeout_s=30) as globex:
        globex.add("gil", "I collect stamps.", "Nice.")
    worker = Running(queue, config, "w-reindex")
    try:
        wait_for(lambda: len(pages_of(api, "rui")) == 2)
        reindex = f"{api.url}/v1/users/rui/assistants/{ASSISTANT}/reindex-jobs"
        job_id = queued(api.http.post(reindex, headers=ACME, json={"model": MODEL}))
        wrong_id = queued(api.http.post(reindex, headers=ACME, json={"model": "another-model"}))
        assert api.http.post(reindex, headers=ACME, json={"model": ""}).status_code == 422
        run_jobs(rq_queue)
        done = api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=ACME).json()
        assert done["status"] == "finished" and done["result"] == {
            "model": MODEL,
            "dim": worker.embedder.dim,
            "pages": 2,
            "facts": 0,
        }
        wrong = api.http.get(f"{api.url}/v1/jobs/{wrong_id}", headers=ACME).json()
        assert wrong["status"] == "failed" and wrong["error"]["status"] == 422
        assert "MEMORYOS_EMBEDDING_MODEL_NAME=another-model" in wrong["error"]["message"]
        assert api.http.get(f"{api.url}/v1/jobs/{job_id}", headers=GLOBEX).status_code == 404

        # Every space the queue knows, every tenant's: one job each.
        assert main(["reindex", "--redis-url", queue.redis_url, "--all", "--model", MODEL]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [job["space"] for job in listed["jobs"]] == [
            f"acme/rui/{ASSISTANT}",
            f"globex/gil/{ASSISTANT}",
        ]
        run_jobs(rq_queue)
        for job in listed["jobs"]:
            assert Job.fetch(job["job_id"], connection=rq_queue.connection).get_status() == "finished"
        following, codes = in_thread(
            lambda: main(["reindex", "--redis-url", queue.redis_url, "--all", "--model", MODEL, "--wait"])
        )
        wait_for(lambda: rq_queue.count == 2, timeout_s=60)
        run_jobs(rq_queue)
        following.join(60)
        assert codes == [0], capsys.readouterr().err
        reports = json.loads(capsys.readouterr().out)["spaces"]
        assert [(report["space"], report["pages"]) for report in reports] == [
            (f"acme/rui/{ASSISTANT}", 2),
            (f"globex/gil/{ASSISTANT}", 1),
        ]
        assert main(["reindex", "--all", "--model", MODEL]) == 2
        assert "--all" in capsys.readouterr().err

        # `memoryos export|import --redis-url` queue the same jobs and wait for them.
        out = tmp_path / "rui.bundle"
        exporting, codes = in_thread(
            lambda: main(["export", "--redis-url", queue.redis_url, "--user", "rui", "--out", str(out)])
        )
        wait_for(lambda: rq_queue.count == 1, timeout_s=60)
        run_jobs(rq_queue)
        exporting.join(60)
        assert codes == [0], capsys.readouterr().err
        exported = json.loads(capsys.readouterr().out)
        assert exported["bundle"] == str(out) and exported["counts"]["pages"] == 2
        assert bundle_keys(queue) == []  # the command's own bundle: deleted once written to --out
        importing, codes = in_thread(
            lambda: main(["import", "--redis-url", queue.redis_url, "--user", "rui-cli", str(out)])
        )
        wait_for(lambda: rq_queue.count == 1, timeout_s=60)
        run_jobs(rq_queue)
        importing.join(60)
        assert codes == [0], capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["counts"]["pages"] == 2
        assert pages_of(api, "rui-cli") == pages_of(api, "rui")
        missing = tmp_path / "missing.bundle"
        assert main(["import", "--redis-url", queue.redis_url, "--user", "x", str(missing)]) == 2
        assert capsys.readouterr().err.strip() == f"error: {missing}: no such file"
        assert rq_queue.count == 0  # refused before anything was queued
    finally:
        worker.stop()


@pytest.mark.usefixtures("quick_job_polls")
def test_a_job_no_rq_worker_takes_ends_the_command_with_how_to_start_one(
    queue: QueueSettings,
    rq_queue: Queue,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No rq worker on the queue: the command stops after the grace period (exit 4) instead of waiting
    forever. An export's job is canceled (its bundle would have no reader); a reindex's stays queued."""
    monkeypatch.setattr("services.jobs.request.NO_RQ_WORKER_GRACE_S", 0.3)
    out = tmp_path / "never.bundle"
    assert main(["export", "--redis-url", queue.redis_url, "--user", "rui", "--out", str(out)]) == 4
    error = capsys.readouterr().err
    assert (
        "no rq worker took export job" in error and f"queue {QUEUE_NAME!r}" in error and "canceled" in error
    )
    assert rq_queue.count == 0 and not out.exists()
    assert len(rq_queue.canceled_job_registry) == 1

    assert main(["reindex", "--redis-url", queue.redis_url, "--user", "rui", "--model", MODEL, "--wait"]) == 4
    assert "runs when a worker starts" in capsys.readouterr().err
    assert rq_queue.count == 1  # still queued: a worker started later reindexes the space
