"""A retrieve's wait for `wait_for_write_ids` over real HTTP (uvicorn), in both modes, with a real
`redis-server` and worker for Redis mode (issue 57): a write id the space never acknowledged is 422 naming
`wait_for_write_ids` at once — an API fuzzer used to count its 10 s wait and 504 as a server error — and a
real wait that runs out is 503 with `Retry-After`.

What the space acknowledged: embedded, every write is stored before it is acknowledged; with Redis, the API
records the write ids its callers chose for `write_digest_ttl_s` (an hour by default), and the owner answers
a read after every write acknowledged before it, so an id the server chose is stored before a read names it.
"""

import concurrent.futures
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryos import MemoryConfig
from memoryos.errors import InvalidInputError, StorageError
from memoryos.space.ops import AnyOp
from memoryos.space.pool import SpaceKey
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import BlockedEmbedder, HashEmbedder
from tests.support.queue_worker import Running
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

KEY = "write-wait-key-0123456789"
AUTH = {"authorization": f"Bearer {KEY}"}
DOG = {"user_input": "I adopted a dog called Pico.", "agent_response": "Lovely name!"}
NEVER_WAITED_S = 60.0
"""The `wait_timeout_s` of reads that must be refused at once: far above the client's own timeout, so a
read that waited before refusing fails the test by its timeout."""
CLIENT_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


def queue_settings(redis_server: RedisServer, namespace: str, **overrides: Any) -> QueueSettings:
    return QueueSettings(
        redis_url=redis_server.url,
        redis_namespace=namespace,
        shard_count=2,
        lease_ttl_s=1.0,
        **{"read_timeout_s": 10.0, **overrides},
    )


def api_settings(**overrides: Any) -> ApiSettings:
    return ApiSettings(port=0, keys={KEY: "acme"}, rate_limit_per_s=0, max_wait_for_writes_s=60, **overrides)


def write(api: RunningApi, body: dict[str, Any], user: str = "maya") -> str:
    """Its write id, once acknowledged."""
    answer = api.http.post(
        f"{api.space_url(user)}/memories", json=body, headers=AUTH, timeout=CLIENT_TIMEOUT_S
    )
    assert answer.status_code == 201, answer.text
    write_id: str = answer.json()["write_id"]
    return write_id


def read(
    api: RunningApi, write_ids: Sequence[str], wait_timeout_s: float = NEVER_WAITED_S, **body: Any
) -> httpx.Response:
    request = {"query": "What is my dog called?", "wait_for_write_ids": list(write_ids), **body}
    return api.http.post(
        f"{api.space_url('maya')}/retrieve",
        json={**request, "wait_timeout_s": wait_timeout_s},
        headers=AUTH,
        timeout=CLIENT_TIMEOUT_S,
    )


def assert_never_acknowledged(answer: httpx.Response, *write_ids: str) -> None:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["error"] == "invalid_input" and body["field"] == "wait_for_write_ids", body
    assert "never acknowledged in this space" in body["message"]
    for write_id in write_ids:
        assert repr(write_id) in body["message"], body


def assert_found_dog(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    context = answer.json()
    texts = [page["user_input"] for page in context["short_term_memory"] + context["retrieved_pages"]]
    assert DOG["user_input"] in texts


UNISSUED_SERVER_ID = "0123456789abcdef0123456789abcdef"
"""Shaped as the ids the server chooses (32 hex digits, `memoryos.ids.new_id`), never issued."""


def test_embedded_an_id_the_space_never_acknowledged_is_422_at_once(tmp_path: Path) -> None:
    with running_api(api_settings(), offline_config(tmp_path / "data"), embedder=HashEmbedder()) as api:
        chosen = write(api, {**DOG, "write_id": "chat-1"})
        assigned = write(api, {"user_input": "I live in Porto.", "agent_response": "Nice."})
        assert_found_dog(read(api, [chosen, assigned]))
        assert_never_acknowledged(read(api, ["never-sent"]), "never-sent")
        assert_never_acknowledged(read(api, [chosen, UNISSUED_SERVER_ID]), UNISSUED_SERVER_ID)


def test_with_redis_an_id_the_space_never_acknowledged_is_422_at_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Ids the callers chose and ids the server chose, before and after a worker applied them; an id
    acknowledged to another space is not this space's."""
    queue = queue_settings(redis_server, "unknown-ids")
    with running_api(api_settings(), MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api:
        chosen = write(api, {**DOG, "write_id": "chat-1"})
        assigned = write(api, {"user_input": "I live in Porto.", "agent_response": "Nice."})
        elsewhere = write(api, {**DOG, "write_id": "chat-2"}, user="ana")
        worker = Running(queue, MemoryConfig(data_dir=tmp_path / "workers", faiss_use_gpu="never"), "w-ids")
        try:
            assert_found_dog(read(api, [chosen, assigned]))  # queued when the read came: waited for
            assert_never_acknowledged(read(api, ["never-sent"]), "never-sent")
            assert_never_acknowledged(read(api, [chosen, UNISSUED_SERVER_ID]), UNISSUED_SERVER_ID)
            assert_never_acknowledged(read(api, [chosen, elsewhere]), elsewhere)
        finally:
            worker.stop()


class FaultyApply:
    """The worker's apply, failing for chosen write ids while told to: `StorageError` (a store that cannot
    be written: retried, the write staying in its shard's stream) or `InvalidInputError` (refused: the write
    is dead-lettered at once, never stored)."""

    def __init__(self, worker: Running) -> None:
        self.apply = worker.worker.consumer._apply
        self.failing: dict[str, type[Exception]] = {}
        self.lock = threading.Lock()
        worker.worker.consumer._apply = self  # type: ignore[method-assign]

    def __call__(self, space: SpaceKey, ops: list[AnyOp]) -> object:
        with self.lock:
            for op in ops:
                error = self.failing.get(getattr(op, "write_id", ""))
                if error is StorageError:
                    raise StorageError("the memory store could not be written: disk I/O error")
                if error is InvalidInputError:
                    raise InvalidInputError("turns", "refused by this worker")
        return self.apply(space, ops)


def assert_retry_later(answer: httpx.Response, *named: str) -> None:
    assert answer.status_code == 503, answer.text
    assert int(answer.headers["Retry-After"]) >= 1
    body = answer.json()
    assert body["error"] == "unavailable", body
    for text in named:
        assert text in body["message"], body


def test_with_redis_a_real_wait_that_runs_out_is_503_with_retry_after(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A write acknowledged but held in its shard's stream (the worker's store failing): the read waits
    for the owner until its timeout, 503 with Retry-After, and the same read succeeds once the write is
    applied. A write acknowledged and then dead-lettered is waited for `wait_timeout_s`: 503 again (it was
    acknowledged; the message says where a write that can never apply is listed)."""
    queue = queue_settings(redis_server, "real-waits", read_timeout_s=1.5, max_deliveries=10_000)
    with running_api(api_settings(), MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api:
        worker = Running(queue, MemoryConfig(data_dir=tmp_path / "workers", faiss_use_gpu="never"), "w-waits")
        try:
            faulty = FaultyApply(worker)
            faulty.failing["held-1"] = StorageError
            held = write(api, {**DOG, "write_id": "held-1"})
            assert_retry_later(read(api, [held], wait_timeout_s=5))  # the owner or the API gave up
            with faulty.lock:
                del faulty.failing[held]
            assert_found_dog(read(api, [held], wait_timeout_s=30))

            faulty.failing["refused-1"] = InvalidInputError
            refused = write(
                api, {"user_input": "I sail on Sundays.", "agent_response": "Fun.", "write_id": "refused-1"}
            )
            assert_retry_later(read(api, [refused], wait_timeout_s=0.5), "'refused-1'", "dead-letters")
        finally:
            worker.stop()


def test_with_redis_a_reads_wait_for_its_writes_spends_its_vector_wait(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A read naming a write its owner cannot apply for 1.5 s waits for it, then — the embedder stuck —
    answers at once with the pages found by their words: the wait for the write spent the 1.5 s vector
    bound, rather than waiting that bound again after the write (3 s in all). Moved here from
    test_api_limits.py: embedded, a write is stored before it is acknowledged, so a read never waits for
    one there (a write sent after the read is an id the space never acknowledged, 422)."""
    queue = queue_settings(redis_server, "vector-wait", max_deliveries=10_000)
    settings = api_settings(read_vector_wait_s=1.5)
    embedder = BlockedEmbedder()
    config = MemoryConfig(data_dir=tmp_path / "workers", faiss_use_gpu="never")
    with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api:
        worker = Running(queue, config, "w-vector", embedder=embedder)
        try:
            faulty = FaultyApply(worker)
            first = write(api, {"user_input": "I live in Lisbon.", "agent_response": "Noted."})
            # Applied, so the space exists; asked with no vector wait (the stuck embedder makes it 1.5 s).
            assert read(api, [first], max_vector_wait_s=0).status_code == 200
            faulty.failing["w1"] = StorageError
            later = write(
                api,
                {
                    "user_input": "My zeppelin model is painted red.",
                    "agent_response": "Lovely.",
                    "write_id": "w1",
                },
            )

            def applied_later() -> None:
                time.sleep(1.5)
                with faulty.lock:
                    del faulty.failing[later]

            with concurrent.futures.ThreadPoolExecutor(1) as releaser:
                began = time.monotonic()
                released = releaser.submit(applied_later)
                answer = read(api, [later], wait_timeout_s=8, query="zeppelin")
                took = time.monotonic() - began
                released.result()
            assert answer.status_code == 200, answer.text
            assert answer.json()["pages_without_vectors"] == 2
            newest = [page["user_input"] for page in answer.json()["short_term_memory"]]
            assert newest == ["I live in Lisbon.", "My zeppelin model is painted red."]
            assert 1.5 <= took < 2.75, f"the read took {took:.2f} s: it waited for vectors after its writes"
        finally:
            embedder.release.set()
            worker.stop()
