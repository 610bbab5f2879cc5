"""The API in Redis mode while its Redis restarts, through real HTTP: writes and reads answer 503 with
`Retry-After` (not 500), `/readyz` says 503 while Redis is away and 200 once it answers, and both the API
and the worker (a thread here, riding the outage) carry on by themselves afterwards."""

import time
from pathlib import Path

import httpx
import pytest

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import running_api
from tests.support.queue_worker import Running
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

KEY = "key-outage"
TURN = {"user_input": "I moved to Lisbon", "agent_response": "Nice!"}


def wait_until(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_the_api_says_503_while_redis_is_away_and_recovers_by_itself(tmp_path: Path) -> None:
    with running_redis(tmp_path / "redis") as server:
        queue = QueueSettings(redis_url=server.url, shard_count=4, lease_ttl_s=1.0, read_timeout_s=5.0)
        worker = Running(queue, MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never"), "w-outage")
        settings = ApiSettings(port=0, keys={KEY: "acme"})
        try:
            with (
                running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api,
                httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=30) as http,
            ):
                space = api.space_url("maya", "bot")
                assert http.post(f"{space}/memories", json=TURN).status_code == 201

                server.stop()
                for method, path, body in (("POST", "/memories", TURN), ("GET", "/stats", None)):
                    answer = http.request(method, space + path, json=body)
                    assert answer.status_code == 503, answer.text
                    assert int(answer.headers["retry-after"]) >= 1
                    assert answer.json()["error"] == "unavailable"
                assert http.get(f"{api.url}/readyz").status_code == 503

                server.start()
                wait_until(lambda: http.get(f"{api.url}/readyz").status_code == 200)
                written = http.post(f"{space}/memories", json={**TURN, "write_id": "after"})
                assert written.status_code == 201, written.text
                wait_until(lambda: http.get(f"{space}/stats").status_code == 200)  # the owner is back
                wait_until(lambda: http.get(f"{space}/writes/after").json().get("searchable") is True)
                assert worker.thread.is_alive(), "the worker gave up when Redis went away"
        finally:
            worker.stop()
