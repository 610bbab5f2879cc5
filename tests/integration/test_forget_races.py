"""A forget racing reads of the same user, through real HTTP (uvicorn), in both modes: every read answers
the data (it ran before the forget) or 404 (after), never a 5xx, and the server lives on. Before, reads
used the space's SQLite connection while the forget closed it: 500s ("Cannot operate on a closed
database"), then a SIGSEGV in libsqlite3 that took the embedded server down for every tenant."""

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder
from tests.support.queue_worker import Running
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

KEY = "key-races"
ROUNDS = 100
READS = [
    ("GET", "/stats", None),
    ("GET", "/memories", None),
    ("POST", "/retrieve", {"query": "where does Maya live?"}),
    ("GET", "/profile", None),
    ("GET", "/facts", None),
    ("GET", "/export", None),
]


def race(api: RunningApi, rounds: int) -> Counter[str]:
    """Each round: one write (the space exists again), then every read and the forget at once."""
    space = api.space_url("maya", "bot")
    headers = {"authorization": f"Bearer {KEY}"}
    answers: Counter[str] = Counter()
    with httpx.Client(headers=headers, timeout=60) as http, ThreadPoolExecutor(len(READS) + 1) as pool:
        for r in range(rounds):
            written = http.post(f"{space}/memories", json={"user_input": f"I live in Lisbon ({r})",
                                                           "agent_response": "Nice!"})  # fmt: skip
            assert written.status_code in (201, 202), written.text
            start = threading.Barrier(len(READS) + 1)
            calls = [(start, *c) for c in [*READS, ("DELETE", "", None)]]
            answers.update(pool.map(lambda c: call(http, space, *c), calls))
    return answers


def call(
    http: httpx.Client, space: str, start: threading.Barrier, method: str, path: str, body: object
) -> str:
    start.wait()  # every call of the round sent at once
    answer = http.request(method, space + path, json=body)
    return f"{method} {path or 'space'} {answer.status_code}"


def assert_no_server_error(answers: Counter[str], api: RunningApi) -> None:
    bad = {answer: n for answer, n in answers.items() if int(answer.rsplit(" ", 1)[1]) >= 500}
    assert not bad, bad
    assert all(answer.endswith((" 200", " 204", " 404")) for answer in answers), answers
    assert answers["DELETE space 204"] == ROUNDS  # each round's forget found the round's write
    assert httpx.get(f"{api.url}/healthz").status_code == 200  # alive for every tenant


def test_embedded_forget_racing_reads(tmp_path: Path) -> None:
    settings = ApiSettings(port=0, preload_model=False, keys={KEY: "acme"})
    with running_api(settings, offline_config(tmp_path / "data"), embedder=HashEmbedder()) as api:
        assert_no_server_error(race(api, ROUNDS), api)


@pytest.fixture
def queued_api(tmp_path: Path) -> Iterator[RunningApi]:
    with running_redis(tmp_path / "redis") as server:
        queue = QueueSettings(redis_url=server.url, shard_count=4, lease_ttl_s=2.0, read_timeout_s=10.0)
        worker = Running(queue, MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never"), "w-races")
        try:
            settings = ApiSettings(port=0, keys={KEY: "acme"})
            with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api:
                yield api
        finally:
            worker.stop()


def test_queued_forget_racing_reads(queued_api: RunningApi) -> None:
    assert_no_server_error(race(queued_api, ROUNDS), queued_api)
