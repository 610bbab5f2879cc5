"""The API in Redis mode when its Redis is full (`maxmemory` reached under `noeviction`, as the compose
files and deploy/base/redis.conf run it, or the API's soft limit below it), through real HTTP: writes
answer 503 `queue_full` with `Retry-After`, never 500; forgets are still taken; every write acknowledged
before is applied by the worker; and writes are taken again once Redis has room.
tests/integration/test_worker_redis_full.py has the worker's side."""

from pathlib import Path

import httpx
import pytest
import redis

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import running_api
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

KEY = "key-full"
ROOM_BYTES = 256 * 1024
"""What Redis may hold beyond its use when the test starts: some writes fit, then it is full."""


def turn(number: int) -> dict[str, str]:
    """A write of ~4 KB, so a few dozen fill the room the test leaves."""
    return {
        "user_input": f"Note {number}: " + "I keep a long diary of my garden. " * 120,
        "agent_response": "Noted.",
        "write_id": f"w-{number}",
    }


def written_until_refused(
    http: httpx.Client, space: str, at_most: int
) -> tuple[list[str], httpx.Response | None]:
    """Writes to `space` until one is answered 503 (at most `at_most`): the write ids acknowledged
    before it, and that answer (None when none was refused)."""
    acknowledged: list[str] = []
    for number in range(at_most):
        answer = http.post(f"{space}/memories", json=turn(number))
        if answer.status_code == 503:
            return acknowledged, answer
        assert answer.status_code in (201, 202), answer.text
        acknowledged.append(turn(number)["write_id"])
    return acknowledged, None


def test_a_full_redis_refuses_writes_with_503_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    with running_redis(tmp_path / "redis") as server:
        admin = redis.Redis.from_url(server.url)
        # Soft limit at maxmemory: Redis's own refusal, as with a managed Redis whose INFO cannot be read.
        queue = QueueSettings(
            redis_url=server.url,
            shard_count=4,
            lease_ttl_s=1.0,
            read_timeout_s=5.0,
            queue_soft_limit_fraction=1.0,
        )
        settings = ApiSettings(port=0, keys={KEY: "acme"})
        with (
            running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api,
            httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=30) as http,
        ):
            space = api.space_url("maya", "bot")
            admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + ROOM_BYTES)

            acknowledged, refused = written_until_refused(http, space, 1000)
            assert refused is not None, "Redis never filled up"
            assert acknowledged, "Redis was full before the first write"
            assert refused.json()["error"] == "queue_full", refused.text
            assert "full" in refused.json()["message"] and "nothing was queued" in refused.json()["message"]
            assert int(refused.headers["retry-after"]) >= 1
            refused_id = turn(len(acknowledged))["write_id"]

            admin.config_set("maxmemory", 0)  # the operator gives Redis room
            written = http.post(f"{space}/memories", json=turn(len(acknowledged) + 1))
            assert written.status_code in (201, 202), written.text

            worker = Running(queue, MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never"), "w-full")
            try:
                for write_id in [*acknowledged, turn(len(acknowledged) + 1)["write_id"]]:
                    wait_for(
                        lambda write_id=write_id: (
                            http.get(f"{space}/writes/{write_id}").json().get("searchable") is True
                        ),
                        timeout_s=60.0,
                    )
                assert http.get(f"{space}/writes/{refused_id}").json().get("searchable") is not True
            finally:
                worker.stop()


def test_writes_stop_at_an_absolute_soft_limit_where_redis_shows_no_maxmemory(tmp_path: Path) -> None:
    """A managed Redis may hide `maxmemory`: `queue_soft_limit_bytes` bounds the queue alone. Above it
    writes answer 503 `queue_full` while Redis itself would take them, a forget is still queued, and once
    a worker drained the queue writes are taken again."""
    with running_redis(tmp_path / "redis") as server:
        admin = redis.Redis.from_url(server.url)
        admin.config_set("latency-tracking", "no")  # ~27 KB per command first run: none of the queue's
        limit = int(admin.info("memory")["used_memory"]) + 4 * ROOM_BYTES
        queue = QueueSettings(
            redis_url=server.url,
            shard_count=4,
            lease_ttl_s=1.0,
            read_timeout_s=5.0,
            queue_soft_limit_bytes=limit,
        )
        settings = ApiSettings(port=0, keys={KEY: "acme"})
        with (
            running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api,
            httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=30) as http,
        ):
            space = api.space_url("maya", "bot")
            acknowledged, refused = written_until_refused(http, space, 2000)
            assert refused is not None, "the soft limit never refused a write"
            assert refused.json()["error"] == "queue_full", refused.text
            assert int(refused.headers["retry-after"]) >= 1
            assert int(admin.info("memory")["maxmemory"]) == 0  # Redis itself has no bound
            assert admin.set("probe", "x")  # and takes writes: the API refused them

            other = http.post(f"{api.space_url('ana', 'bot')}/memories", json=turn(5000))
            assert other.status_code == 503  # every space's writes: the limit is Redis's memory
            assert http.delete(api.space_url("zoe", "bot")).status_code == 202  # queued: no worker yet

            worker = Running(queue, MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never"), "w-soft")
            try:
                wait_for(
                    lambda: (
                        http.post(f"{space}/memories", json=turn(len(acknowledged))).status_code in (201, 202)
                    ),
                    timeout_s=60.0,
                )
                acknowledged.append(turn(len(acknowledged))["write_id"])
                for write_id in acknowledged:
                    wait_for(
                        lambda write_id=write_id: (
                            http.get(f"{space}/writes/{write_id}").json().get("searchable") is True
                        ),
                        timeout_s=60.0,
                    )
            finally:
                worker.stop()
