"""One trace per memory operation in Redis mode, received for real: `memoryos serve --redis-url` and a
real worker process (`bench.serving.instant_worker`: the worker's code with the tests' hash embedder, so
no model loads) each export over OTLP/HTTP to `tests/support/otlp_receiver.py`, and the test process is
the caller, whose `traceparent` starts each trace. Three processes, one trace per write and per read.

The stream entry's `trace` field is proven apart, in this process (which never turns tracing on): with
tracing off an entry has no such field, and a write retried under its write id with another trace is the
same write.
"""

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis

from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue import streams
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.integration.test_tracing_export import assert_no_memory_text, pseudonym, tracing_env
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.redis_server import RedisServer, free_port, running_redis

pytestmark = pytest.mark.integration

NAMESPACE = "traced"
SHARDS = 4
USER = "alice@example.com"
SECRET = "lemon orchard behind the mill"
SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5
ROOT = Path(__file__).resolve().parents[2]


def caller(trace_id: str, sampled: bool = True) -> dict[str, str]:
    """The `traceparent` of a caller's span (the test process is the trace's first process)."""
    return {"traceparent": f"00-{trace_id}-{'ab' * 8}-{'01' if sampled else '00'}"}


def trace_id(n: int) -> str:
    return f"{n:032x}"


def queue_env(receiver: OtlpReceiver, redis_url: str, **extra: str) -> dict[str, str]:
    return tracing_env(
        receiver,
        MEMORYOS_REDIS_URL=redis_url,
        MEMORYOS_REDIS_NAMESPACE=NAMESPACE,
        MEMORYOS_SHARD_COUNT=str(SHARDS),
        MEMORYOS_LEASE_TTL_S="1.0",
        **extra,
    )


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "memoryos serve did not become ready"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@contextmanager
def served_api(receiver: OtlpReceiver, redis_url: str, root: Path, **env: str) -> Iterator[str]:
    """`memoryos serve --redis-url` in a child process tracing to `receiver` (`env`: more variables);
    its URL once ready."""
    port = free_port()
    log = root / f"api-{port}.log"
    serve = ["serve", "--port", str(port), "--redis-url", redis_url]
    api = subprocess.Popen(
        [sys.executable, "-m", "memoryos.cli.main", "--data-dir", str(root / "api"), *serve],
        env=queue_env(receiver, redis_url, MEMORYOS_API_PRELOAD_MODEL="false", **env),
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, api, log)
        yield url
    finally:
        api.terminate()
        api.wait(timeout=30)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("traced-queue")


@pytest.fixture(scope="module")
def deployment(receiver: OtlpReceiver, redis_server: RedisServer, root: Path) -> Iterator[str]:
    """The API in Redis mode and one worker process, both tracing to `receiver`; the API's URL once the
    worker owns every shard."""
    worker_log = root / "worker.log"
    worker_env = queue_env(
        receiver,
        redis_server.url,
        MEMORYOS_DATA_DIR=str(root / "worker"),
        MEMORYOS_FAISS_USE_GPU="never",
        MEMORYOS_WORKER_METRICS_PORT="0",
        MEMORYOS_WORKER_HEALTH_PORT="0",
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "bench.serving.instant_worker", "--worker-id", "w-traced"],
        env=worker_env,
        stdout=subprocess.PIPE,
        stderr=worker_log.open("wb"),
        cwd=ROOT,
    )
    try:
        with served_api(receiver, redis_server.url, root) as url:
            assert worker.stdout is not None
            assert b"serving shards" in worker.stdout.readline(), worker_log.read_text()
            client, keys = redis.Redis.from_url(redis_server.url), Keys(NAMESPACE)
            deadline = time.monotonic() + 30
            while not all(client.get(keys.lease(shard)) for shard in range(SHARDS)):
                assert time.monotonic() < deadline, "the worker never took every shard"
                time.sleep(0.05)
            yield url
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def space_url(url: str, user: str = USER) -> str:
    return f"{url}/v1/users/{user}/assistants/bot"


def one(spans: list[ReceivedSpan], name: str, trace: str) -> ReceivedSpan:
    (found,) = [span for span in spans if span.name == name and span.trace_id == trace]
    return found


def test_a_queued_write_is_one_trace_from_the_caller_through_the_api_and_the_queue_to_its_apply(
    deployment: str, receiver: OtlpReceiver
) -> None:
    trace = trace_id(1)
    written = httpx.post(
        f"{space_url(deployment)}/memories",
        json={"user_input": f"My {SECRET}.", "agent_response": "Noted.", "write_id": "w-orchard"},
        headers=caller(trace),
    )
    assert written.status_code == 201, written.text

    def applied(spans: list[ReceivedSpan]) -> bool:
        names = {s.name for s in spans if s.trace_id == trace}
        return {
            "POST /v1/users/{user_id}/assistants/{assistant_id}/memories",
            "create_memory",
            "enqueue create_memory",
            "apply create_memory",
        } <= names and any(s.name == "apply batch" for s in spans)

    spans = receiver.wait_for(applied)
    server = one(spans, "POST /v1/users/{user_id}/assistants/{assistant_id}/memories", trace)
    create = one(spans, "create_memory", trace)
    enqueue = one(spans, "enqueue create_memory", trace)
    apply = one(spans, "apply create_memory", trace)
    # Parented across the processes: the caller (this test) -> the API -> the worker.
    assert server.parent_span_id == "ab" * 8 and server.kind == SERVER
    assert (create.parent_span_id, enqueue.parent_span_id) == (server.span_id, create.span_id)
    assert apply.parent_span_id == enqueue.span_id and apply.kind == CONSUMER and enqueue.kind == PRODUCER
    assert {s.service_name for s in (server, create, enqueue)} == {"memoryos-api"}
    assert apply.service_name == "memoryos-worker"
    # The run's span starts a trace of its own and links the write's; the write links it back.
    (batch,) = [s for s in spans if s.name == "apply batch" and (trace, apply.span_id) in s.links]
    assert batch.trace_id != trace and batch.service_name == "memoryos-worker"
    assert (batch.trace_id, batch.span_id) in apply.links
    store = pseudonym(f"default/{USER}/bot")
    for span in (create, enqueue, apply, batch):
        assert span.attributes["gen_ai.memory.store.id"] == store
        assert span.attributes["memoryos.user.id"] == pseudonym(USER)
        assert span.attributes["memoryos.tenant.id"] == pseudonym("default")
    for span in (create, enqueue, apply):
        assert span.attributes["gen_ai.operation.name"] == "create_memory"
    shard = enqueue.attributes["memoryos.shard"]
    assert apply.attributes["memoryos.shard"] == batch.attributes["memoryos.shard"] == shard
    assert enqueue.attributes["messaging.destination.name"] == f"{NAMESPACE}:writes:{shard}"
    assert apply.attributes["messaging.message.id"] == enqueue.attributes["messaging.message.id"]
    assert apply.attributes["memoryos.write.id"] == enqueue.attributes["memoryos.write.id"]
    assert apply.attributes["memoryos.write.id"] == pseudonym("w-orchard")
    assert apply.attributes["memoryos.batch.size"] == batch.attributes["memoryos.batch.size"] >= 1
    assert apply.attributes["memoryos.queue.wait_s"] >= 0
    status = httpx.get(f"{space_url(deployment)}/writes/w-orchard").json()
    assert apply.attributes["gen_ai.memory.record.id"] == [str(page) for page in status["page_ids"]]
    assert receiver.refused == []
    assert_no_memory_text(spans)


def test_a_read_in_redis_mode_is_one_trace_with_the_owner_call_at_the_worker(
    deployment: str, receiver: OtlpReceiver
) -> None:
    written = httpx.post(
        f"{space_url(deployment)}/memories", json={"user_input": f"The {SECRET}.", "agent_response": "Ok."}
    )
    assert written.status_code == 201, written.text
    trace = trace_id(2)
    found = httpx.post(
        f"{space_url(deployment)}/retrieve",
        json={"query": f"Where is the {SECRET}?", "wait_for_write_ids": [written.json()["write_id"]]},
        headers=caller(trace),
    )
    assert found.status_code == 200, found.text

    def answered(spans: list[ReceivedSpan]) -> bool:
        mine = {(s.name, s.kind) for s in spans if s.trace_id == trace}
        return {
            ("POST /v1/users/{user_id}/assistants/{assistant_id}/retrieve", SERVER),
            ("owner_call retrieve", CLIENT),
            ("owner_call retrieve", SERVER),
        } <= mine

    spans = [s for s in receiver.wait_for(answered) if s.trace_id == trace]
    server = one(spans, "POST /v1/users/{user_id}/assistants/{assistant_id}/retrieve", trace)
    search = one(spans, "search_memory", trace)
    (call,) = [s for s in spans if s.name == "owner_call retrieve" and s.kind == CLIENT]
    (owner,) = [s for s in spans if s.name == "owner_call retrieve" and s.kind == SERVER]
    assert search.parent_span_id == server.span_id and call.parent_span_id == search.span_id
    assert owner.parent_span_id == call.span_id
    assert (call.service_name, owner.service_name) == ("memoryos-api", "memoryos-worker")
    assert search.attributes["gen_ai.operation.name"] == owner.attributes["gen_ai.operation.name"]
    assert owner.attributes["gen_ai.operation.name"] == "search_memory"
    assert owner.attributes["memoryos.owner_call.name"] == "retrieve"
    assert owner.attributes["gen_ai.memory.store.id"] == pseudonym(f"default/{USER}/bot")
    # The read's wait for its write: owner calls of the same trace, before the retrieve.
    statuses = [s for s in spans if s.name == "owner_call write_status" and s.kind == SERVER]
    assert statuses and all(s.attributes["memoryos.owner_call.name"] == "write_status" for s in statuses)
    assert_no_memory_text(receiver.wait_for(answered))


def test_writes_the_api_did_not_sample_make_no_span_downstream_and_are_still_applied(
    deployment: str, receiver: OtlpReceiver, redis_server: RedisServer, root: Path
) -> None:
    """Not sampled at the API, by its sampler (`always_off`) or by the caller's flag (parent-based): the
    worker records nothing of the write, and applies it."""
    user, unsampled, sampled = "bob", trace_id(3), trace_id(4)
    space = space_url(deployment, user)
    with served_api(receiver, redis_server.url, root, OTEL_TRACES_SAMPLER="always_off") as sampling_off:
        off = httpx.post(
            f"{space_url(sampling_off, user)}/memories",
            json={"user_input": "Unsampled.", "agent_response": "Ok.", "write_id": "w-off"},
        )
        assert off.status_code == 201, off.text
    flagged = httpx.post(
        f"{space}/memories",
        json={"user_input": "Unsampled too.", "agent_response": "Ok.", "write_id": "w-flagged"},
        headers=caller(unsampled, sampled=False),
    )
    assert flagged.status_code == 201, flagged.text
    # A sampled write of the same space after them: applied after them, its spans exported after theirs.
    last = httpx.post(
        f"{space}/memories", json={"user_input": "Sampled.", "agent_response": "Ok."}, headers=caller(sampled)
    )
    assert last.status_code == 201, last.text
    spans = receiver.wait_for(
        lambda spans: any(s.name == "apply create_memory" and s.trace_id == sampled for s in spans)
    )
    unsampled_ids = {pseudonym("w-off"), pseudonym("w-flagged")}
    assert not [s for s in spans if s.attributes.get("memoryos.write.id") in unsampled_ids]
    assert [s for s in spans if s.trace_id == unsampled] == []  # neither the API's nor the worker's
    assert not [s for s in spans if any(link[0] == unsampled for link in s.links)]
    (batch,) = [
        s for s in spans if s.name == "apply batch" and s.attributes["memoryos.user.id"] == pseudonym(user)
    ]
    assert [trace for trace, _ in batch.links] == [sampled]  # links the sampled write alone
    for write_id in ("w-off", "w-flagged"):  # sampling changes no result
        status = httpx.get(f"{space}/writes/{write_id}")
        assert status.status_code == 200 and status.json()["page_ids"], status.text


def test_the_trace_travels_in_a_field_of_its_own_beside_the_op(redis_server: RedisServer) -> None:
    settings = QueueSettings(redis_url=redis_server.url, redis_namespace="fields", shard_count=1)
    client = redis.Redis.from_url(redis_server.url)
    queue = WriteQueue(client, settings)
    key = SpaceKey("default", USER, "bot")
    op = plan_write(
        [{"user_input": SECRET, "agent_response": "ok"}], max_text_chars=100, at=1.0, write_id="w-1"
    )
    untraced = queue.enqueue(key, op)  # tracing is off in this process: no field
    carrier = '{"traceparent":"00-' + trace_id(5) + "-" + "cd" * 8 + '-01"}'
    traced = queue.enqueue_on(client, key, op, trace=carrier)  # the same write, retried under another trace
    assert isinstance(traced, bytes)  # an entry id: a retry of the write, not a conflict
    entries = dict(streams.entries(client, Keys("fields").writes(0)))
    assert set(entries[untraced.encode()]) == {b"space", b"op"}
    assert entries[traced][b"trace"] == carrier.encode()
    assert entries[traced][b"op"] == entries[untraced.encode()][b"op"]  # the op's JSON is untouched
