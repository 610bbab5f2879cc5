"""A write id reused for other content over real HTTP (issue 35), in both modes: a retry with the same
content answers the first write's ids, another write under the id is 409 naming it and stores nothing.

Embedded (`memoryos serve`): the space's op log tells them apart inside the write's transaction. With
Redis (`--redis-url`): the API remembers each caller write id's content digest next to the enqueue, before
any worker runs; a forget of the user purges those digests with the rest of the space's keys.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

KEY = "reuse-key-0123456789"
AUTH = {"authorization": f"Bearer {KEY}"}
DOG = {"user_input": "I adopted a dog called Pico.", "agent_response": "Lovely name!"}
CAT = {"user_input": "I adopted a cat called Miso.", "agent_response": "Lovely name!"}


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


def post(api: RunningApi, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(api.space_url("maya") + path, json=body, headers=AUTH, timeout=30)


def assert_conflict(response: httpx.Response, write_id: str) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["error"] == "write_id_conflict" and body["field"] == "write_id"
    assert repr(write_id) in body["message"]


def stored_texts(api: RunningApi) -> list[str]:
    listed = httpx.get(api.space_url("maya") + "/memories", headers=AUTH, timeout=30)
    assert listed.status_code in (200, 404), listed.text
    return [page["user_input"] for page in listed.json()["pages"]] if listed.status_code == 200 else []


def reuse_both_routes(api: RunningApi) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each write route: the first write, its retry (same answer), the id with other content (409)."""
    first = post(api, "/memories", {**DOG, "write_id": "chat-1"})
    assert first.status_code == 201, first.text
    assert post(api, "/memories", {**DOG, "write_id": "chat-1"}).json() == first.json()
    assert_conflict(post(api, "/memories", {**CAT, "write_id": "chat-1"}), "chat-1")
    assert_conflict(post(api, "/memories", {**DOG, "write_id": "chat-1", "ttl_s": 60}), "chat-1")
    batch = post(api, "/memories/batch", {"turns": [DOG, CAT], "write_id": "batch-1"})
    assert batch.status_code == 202, batch.text
    assert post(api, "/memories/batch", {"turns": [DOG, CAT], "write_id": "batch-1"}).json() == batch.json()
    assert_conflict(post(api, "/memories/batch", {"turns": [CAT, DOG], "write_id": "batch-1"}), "batch-1")
    return first.json(), batch.json()


def test_embedded_a_reused_write_id_is_409_and_a_retry_gets_the_first_ids(tmp_path: Path) -> None:
    settings = ApiSettings(port=0, keys={KEY: "acme"}, rate_limit_per_s=0)
    with running_api(settings, offline_config(tmp_path / "data"), embedder=HashEmbedder()) as api:
        first, batch = reuse_both_routes(api)
        assert first["page_ids"] and batch["page_ids"]
        assert stored_texts(api) == [DOG["user_input"], DOG["user_input"], CAT["user_input"]]


def test_with_redis_a_reused_write_id_is_409_before_it_is_queued_and_forget_purges_the_digests(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    queue = QueueSettings(
        redis_url=redis_server.url,
        redis_namespace="reuse",
        shard_count=2,
        lease_ttl_s=1.0,
        read_timeout_s=5.0,
    )
    client = redis.Redis.from_url(redis_server.url)

    def digest_keys() -> list[bytes]:
        return sorted(client.scan_iter("reuse:write-digest*"))

    settings = ApiSettings(port=0, keys={KEY: "acme"}, rate_limit_per_s=0)
    with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api:
        reuse_both_routes(api)  # no worker yet: Redis alone refuses the reuse
        assert digest_keys() == [
            b"reuse:write-digest-times:acme/maya/bot",
            b"reuse:write-digests:acme/maya/bot",
        ]
        assert client.ttl(b"reuse:write-digests:acme/maya/bot") > queue.write_digest_ttl_s - 60
        worker = Running(queue, MemoryConfig(data_dir=tmp_path / "workers", faiss_use_gpu="never"), "w-reuse")
        try:
            wait_for(lambda: stored_texts(api) == [DOG["user_input"], DOG["user_input"], CAT["user_input"]])
            status = httpx.get(api.space_url("maya") + "/writes/chat-1", headers=AUTH, timeout=30).json()
            assert len(status["page_ids"]) == 1  # the retry was applied once
            forgotten = httpx.delete(api.space_url("maya"), headers=AUTH, timeout=30)
            assert forgotten.status_code == 204, forgotten.text
            assert digest_keys() == []
            again = post(api, "/memories", {**CAT, "write_id": "chat-1"})  # a new space: a new write
            assert again.status_code == 201, again.text
            wait_for(lambda: stored_texts(api) == [CAT["user_input"]])
        finally:
            worker.stop()
