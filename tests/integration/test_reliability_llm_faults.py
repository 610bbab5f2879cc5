"""An LLM that fails in every way an endpoint does — a hung call, 429 with `Retry-After`, 500, a 200 whose
JSON is cut off, a completion with no choices, a proxy's HTML page — behind the real API and the real
`openai` client: writes are acknowledged and searchable all along, consolidation is retried with backoff
and never stores an error as memory, and once the model answers again consolidation completes."""

import itertools
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryos import MemoryConfig
from memoryos.planning.consolidation import FIRST_BACKOFF_S
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import RunningApi, running_api
from tests.support.fakes import HashEmbedder
from tests.support.obedient_llm import obedient_reply
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

LLM_TIMEOUT_S = 0.3
FAULTS = {
    "hung": ScriptedReply(delay_s=LLM_TIMEOUT_S * 4),
    "429": ScriptedReply(status=429, retry_after_s=1),
    "500": ScriptedReply(status=500),
    "cut-json": ScriptedReply(
        raw_body='{"id": "x", "object": "chat.completion", "choices": [{"ind',
        raw_content_type="application/json",
    ),
    "no-choices": ScriptedReply(
        raw_body=json.dumps(
            {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
        ),
        raw_content_type="application/json",
    ),
    "proxy-page": ScriptedReply(raw_body="<html><body>502 Bad Gateway: error upstream</body></html>"),
}
ERROR_WORDS = (
    "error",
    "scripted",
    "status 429",
    "status 500",
    "bad gateway",
    "timeout",
    "timed out",
    "<html",
    "traceback",
    "failed",
)
"""None of these is in the turns written, so any of them in memory came from a failure (status codes
only as the error texts word them: bare digits occur in ids and times)."""


class FaultyModel:
    """Each request gets the next fault in turn; `fault_of(body)` says which a recorded request got (the
    server records the very body object it hands over)."""

    def __init__(self) -> None:
        self._next = itertools.cycle(FAULTS.items())
        self._lock = threading.Lock()
        self._sent: dict[int, str] = {}

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            name, reply = next(self._next)
            self._sent[id(body)] = name
        return reply

    def fault_of(self, body: dict[str, Any]) -> str | None:
        with self._lock:
            return self._sent.get(id(body))

    def faults_sent(self) -> set[str]:
        with self._lock:
            return set(self._sent.values())


class PostponedPasses(logging.Handler):
    """When the consolidator postponed work because the LLM failed (its own log lines)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.at: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "postponed: the LLM failed" in record.getMessage():
            self.at.append(record.created)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=["embedded", "redis"])
def api(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[RunningApi, ScriptedOpenAIServer]]:
    """The embedded API, and the API with `--redis-url` in front of a worker whose spaces call the model
    (consolidation runs in the owner's scheduler there)."""
    server = ScriptedOpenAIServer()
    server.start()
    config = MemoryConfig(
        data_dir=tmp_path,
        openai_api_key="test-key",
        openai_base_url=server.base_url,
        llm_timeout_s=LLM_TIMEOUT_S,
        llm_max_retries=2,
        llm_backoff_max_s=FIRST_BACKOFF_S,  # the timer's retries, which the test waits for two of, 1 s apart
        short_term_capacity=2,
        faiss_use_gpu="never",
        llm_guards="off",  # the canned facts are not about these turns: the guards would refuse them
    )
    try:
        if request.param == "embedded":
            with running_api(ApiSettings(port=0), config, embedder=HashEmbedder()) as running:
                yield running, server
            return
        redis: RedisServer = request.getfixturevalue("redis_server")
        queue = QueueSettings(
            redis_url=redis.url,
            redis_namespace=f"llm{abs(hash(str(tmp_path))) % 10**8}",
            shard_count=2,
            read_timeout_s=60,
        )
        worker = Running(queue, config, "w-llm-faults", embedder=HashEmbedder(), llm=None)
        try:
            with running_api(ApiSettings(port=0), config, queue=queue) as running:
                yield running, server
        finally:
            worker.stop()
    finally:
        server.stop()


def remembered(api: RunningApi, user: str) -> str:
    """Everything the space holds that consolidation writes (profile, facts, segments, chain summaries),
    with the pages, as one lower-cased text."""
    space = api.space_url(user)
    parts = [
        api.http.get(f"{space}/profile", timeout=30).json(),
        api.http.get(f"{space}/facts", timeout=30).json(),
        api.http.get(f"{space}/facts?kind=assistant", timeout=30).json(),
        api.http.get(f"{space}/stats", timeout=30).json()["segments"],
        api.http.get(f"{space}/memories", timeout=30).json()["pages"],
    ]
    return json.dumps(parts).lower()


def write_and_find(api: RunningApi, user: str, words: list[str]) -> None:
    """Write one turn per word, then find each by its word: acknowledged and searchable."""
    space = api.space_url(user)
    for word in words:
        turn = {"user_input": f"I bought a {word} today.", "agent_response": f"A {word}, nice."}
        written = api.http.post(f"{space}/memories", json=turn, timeout=30)
        assert written.status_code == 201, written.text
    for word in words:
        found = api.http.post(f"{space}/retrieve", json={"query": f"{word} bought", "top_k": 3}, timeout=30)
        assert found.status_code == 200, found.text
        texts = [p["user_input"] for p in found.json()["retrieved_pages"]]
        texts += [p["user_input"] for p in found.json()["short_term_memory"]]
        assert f"I bought a {word} today." in texts, (word, texts)


def test_a_failing_llm_never_becomes_memory_and_consolidation_completes_once_it_recovers(
    api: tuple[RunningApi, ScriptedOpenAIServer],
) -> None:
    running, server = api
    faulty = FaultyModel()
    server.respond_with(faulty)
    postponed = PostponedPasses()
    logging.getLogger("memoryos.planning.consolidation").addHandler(postponed)
    try:
        write_and_find(running, "maya", ["kettle", "bicycle", "lantern", "umbrella", "violin"])
        forced = running.http.post(f"{running.space_url('maya')}/consolidate", timeout=60)
        assert forced.status_code == 502 and forced.json()["error"] == "llm_failed", forced.text
        # The scheduler retries on its own, after a pause: no write asks for it.
        forced_at = len(postponed.at)  # the forced pass's own line is the last before this
        assert forced_at >= 1
        wait_for(
            lambda: len(postponed.at) >= forced_at + 2 and faulty.faults_sent() == set(FAULTS), timeout_s=60
        )
        write_and_find(running, "maya", ["compass", "teapot"])  # still accepted, still searchable
    finally:
        logging.getLogger("memoryos.planning.consolidation").removeHandler(postponed)
    # Passes asked for before the forced one may fail in quick succession; after it, only the timer
    # retries, each at least the first backoff after the failure before it.
    gaps = [later - earlier for earlier, later in itertools.pairwise(postponed.at[forced_at - 1 :])]
    assert all(gap >= FIRST_BACKOFF_S * 0.9 for gap in gaps), gaps

    # The client retried each call (its attempt counter), and waited out the 429's Retry-After.
    requests = server.requests
    assert max(int(r.headers.get("x-stainless-retry-count", "0")) for r in requests) == 2
    attempt = {id(r.body): int(r.headers.get("x-stainless-retry-count", "0")) for r in requests}
    # A retry is the next request after the 429 with its body and the next attempt number (two passes
    # over the same pages send the same body: one's retry is not the other's).
    retried_after = [
        min(
            (
                later.received_at - earlier.received_at
                for later in requests
                if later.body == earlier.body
                and attempt[id(later.body)] == attempt[id(earlier.body)] + 1
                and later.received_at > earlier.received_at
            ),
            default=None,
        )
        for earlier in requests
        if faulty.fault_of(earlier.body) == "429"
    ]
    after_429 = [gap for gap in retried_after if gap is not None]
    assert after_429 and all(gap >= 0.95 for gap in after_429), after_429

    failing = remembered(running, "maya")
    assert "kettle" in failing and "teapot" in failing  # the check below reads the real pages
    assert not [word for word in ERROR_WORDS if word in failing], failing
    stats = running.http.get(f"{running.space_url('maya')}/stats").json()
    assert stats["user_knowledge"] == 0 and stats["mid_term_pages"] == 0  # nothing moved on a failure

    server.respond_with(obedient_reply)  # the model answers again
    forced = running.http.post(f"{running.space_url('maya')}/consolidate", timeout=60)
    assert forced.status_code == 204, forced.text
    stats = running.http.get(f"{running.space_url('maya')}/stats").json()
    assert stats["short_term_pages"] == 2 and stats["mid_term_pages"] == 5 and stats["user_knowledge"] >= 1
    profile = running.http.get(f"{running.space_url('maya')}/profile").json()["profile"]
    assert profile == "- The user talks with the assistant."
    recovered = remembered(running, "maya")
    assert not [word for word in ERROR_WORDS if word in recovered], recovered
