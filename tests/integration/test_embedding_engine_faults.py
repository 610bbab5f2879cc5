"""The embedding engine's faults on a real Unix socket, each detected and recovered with nothing lost: a
client that stops reading loses only its own connection, a SIGSTOPped engine is found unresponsive by the
supervisor's watch and its page batches land on the engine started in its place, a model that raises on
every batch shows as stalled and a restarted engine embeds what was refused, and one failing request
fails alone. Queries keep going first under a sustained page load, and pages still progress under a flood
of queries."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.health import EngineWatch, probe_health
from memoryos.embedding.engine.server import EmbeddingEngine, EngineLimits
from memoryos.embedding.engine.wire import send_frame
from memoryos.errors import EmbeddingEngineError, EmbeddingEngineUnavailableError
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

TIMEOUT_S = 20.0
REFERENCE = HashEmbedder()
HASH_ENGINE = """
import sys, threading
from pathlib import Path
from memoryos.embedding.engine.server import EmbeddingEngine
from tests.support.fakes import HashEmbedder
engine = EmbeddingEngine(HashEmbedder(), Path(sys.argv[1]))
engine.start()
print("serving", flush=True)
threading.Event().wait()
"""
"""An engine process over the tests' hash embedder: what a supervisor starts, stops and kills."""


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "engine.sock"


@contextmanager
def serving(embedder: Any, path: Path, **limits: Any) -> Iterator[EmbeddingEngine]:
    engine = EmbeddingEngine(embedder, path, limits=EngineLimits(**limits))
    engine.start()
    try:
        yield engine
    finally:
        engine.close()


def start_engine_process(path: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", HASH_ENGINE, str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None and process.stdout.readline() == b"serving\n"
    return process


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


class Outcome:
    """What a call on another thread returned or raised."""

    def __init__(self, call: Any) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Any) -> None:
        try:
            self.value = call()
        except BaseException as error:  # the test reads it
            self.error = error

    def result(self) -> Any:
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.value


def test_a_client_that_stops_reading_loses_only_its_own_connection(socket_path: Path) -> None:
    with serving(HashEmbedder(), socket_path, send_timeout_s=0.5) as engine:
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(os.fspath(socket_path))
        texts = [f"text {i} " + "word " * 20 for i in range(256)]  # 256 KB of vectors per reply
        for request_id in range(1, 9):  # replies far beyond the socket's buffers, never read
            send_frame(silent, {"op": "encode", "id": request_id, "texts": texts})
        wait_for(lambda: engine.stats().connections_dropped == 1)
        query = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(
            ["a query from another process"], is_query=True
        )
        page = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["a page from another process"])
        silent.close()
    assert np.array_equal(query, REFERENCE.encode(["a query from another process"], is_query=True))
    assert np.array_equal(page, REFERENCE.encode(["a page from another process"]))


def test_a_stopped_engine_is_found_unresponsive_and_its_pages_land_on_the_next(socket_path: Path) -> None:
    first = start_engine_process(socket_path)
    try:
        client = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S, query_timeout_s=0.5)
        assert client.encode(["before the stop"]).shape == (1, REFERENCE.dim)
        watch = EngineWatch(socket_path, stall_after_s=0.3, probe_timeout_s=0.2)
        assert watch.restart_reason() is None and watch.last[0] == "idle"
        first.send_signal(signal.SIGSTOP)
        pages = [f"page {i} written while the engine was stopped" for i in range(5)]
        in_flight = Outcome(lambda: client.encode(pages))  # acknowledged pages, waiting on the engine
        with pytest.raises(EmbeddingEngineUnavailableError, match=r"within 0\.5 s"):
            client.encode(["a reader's query"], is_query=True)  # fails within its own deadline
        reason = None
        while reason is None:  # what the supervisor does every few seconds
            reason = watch.restart_reason()
            time.sleep(0.05)
        assert "answered none" in reason
        first.kill()  # the supervisor's restart: kill, start again
        first.wait(TIMEOUT_S)
        second = start_engine_process(socket_path)
        try:
            assert np.array_equal(in_flight.result(), REFERENCE.encode(pages))
            watch.reset()
            assert watch.restart_reason() is None
        finally:
            second.kill()
    finally:
        first.kill()


class BrokenModel(HashEmbedder):
    """Raises on every call while `broken` is set (a sticky CUDA error), and on any text holding "poison"."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.broken = broken
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.calls.append(list(texts))
        if self.broken or any("poison" in text for text in texts):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().encode(texts, is_query=is_query)


def test_a_model_failing_every_batch_is_stalled_and_a_restart_embeds_what_it_refused(
    socket_path: Path,
) -> None:
    pages = [f"acknowledged page {i}" for i in range(4)]
    refused = 0
    with serving(BrokenModel(broken=True), socket_path, stall_after_s=0.3):
        client = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S)
        watch = EngineWatch(socket_path, stall_after_s=0.3)
        reason = None
        while reason is None:  # the batcher retrying its pending pages, the supervisor watching
            with pytest.raises(EmbeddingEngineError, match="RuntimeError"):
                client.encode(pages)
            refused += 1
            reason = watch.restart_reason()
        assert "no batch succeeded" in reason
        verdict, health = probe_health(socket_path)
        assert verdict == "stalled" and health is not None
        assert health.batches_total == 0 and health.failures_total >= refused
    with serving(BrokenModel(), socket_path):  # started again: the model loads clean
        assert np.array_equal(client.encode(pages), REFERENCE.encode(pages))  # the batcher's next retry
        verdict, health = probe_health(socket_path)
        assert verdict == "idle" and health is not None and health.batches_total == 1
        assert health.last_success_unix is not None


def test_a_failing_request_fails_alone_and_the_others_of_its_batch_are_answered(socket_path: Path) -> None:
    model = BrokenModel()
    hold = threading.Event()
    inside = threading.Event()
    original = model.encode

    def held(texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if texts == ["first"]:
            inside.set()
            assert hold.wait(TIMEOUT_S)
        return original(texts, is_query=is_query)

    model.encode = held  # type: ignore[method-assign]
    with serving(model, socket_path) as engine:
        first = Outcome(lambda: EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["first"]))
        wait_for(inside.is_set)
        second = Outcome(lambda: EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["second"]))
        wait_for(lambda: engine.stats().requests == 2 and engine.stats().queued_texts == 0)  # in the slot
        good = [
            Outcome(
                lambda i=i: EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(
                    [f"good {i} a", f"good {i} b"]
                )
            )
            for i in range(2)
        ]
        bad = Outcome(
            lambda: EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["good words", "poison words"])
        )
        wait_for(lambda: engine.stats().requests == 5)  # queued together behind the slot
        hold.set()
        first.result()
        second.result()
        for i, outcome in enumerate(good):
            assert np.array_equal(outcome.result(), REFERENCE.encode([f"good {i} a", f"good {i} b"]))
        with pytest.raises(EmbeddingEngineError, match="RuntimeError") as raised:
            bad.result()
        stats = engine.stats()
    assert "poison" not in str(raised.value)
    assert any(len(call) == 6 for call in model.calls)  # the three requests met in one batch first
    assert stats.failed_requests == 1 and stats.failures == 2  # the batch, then the poisoned request alone


class SlowModel(HashEmbedder):
    """Records each call's kind; each takes a little time, so queues fill behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[bool] = []

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.kinds.append(is_query)
        time.sleep(0.01)
        return super().encode(texts, is_query=is_query)


def test_queries_keep_their_place_under_a_sustained_page_load(socket_path: Path) -> None:
    """Pages always queued: a query waits for the page batch inside the model (and at most one aged one),
    never for the page queue."""
    model = SlowModel()
    stop = threading.Event()
    with serving(model, socket_path, max_batch_texts=4, page_aging_s=0.0) as engine:

        def load(i: int) -> None:
            client = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S)
            while not stop.is_set():
                client.encode([f"page {i} {n}" for n in range(16)])

        loaders = [Outcome(lambda i=i: load(i)) for i in range(4)]
        wait_for(lambda: engine.stats().queued_texts >= 16)
        client = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S)
        page_batches_ahead = []
        for n in range(10):
            sent_at = len(model.kinds)
            client.encode([f"query {n}"], is_query=True)
            kinds = model.kinds[sent_at:]
            page_batches_ahead.append(kinds.index(True) if True in kinds else len(kinds))
        queued = engine.stats().queued_texts
        stop.set()
        for loader in loaders:
            loader.result()
    assert queued >= 16  # the load was sustained throughout
    assert max(page_batches_ahead) <= 3, page_batches_ahead  # the running one, one aged, one racing the send


def test_pages_progress_under_a_flood_of_queries(socket_path: Path) -> None:
    """Queries always queued (one per batch, eight clients): without aging the page would never run."""
    model = SlowModel()
    stop = threading.Event()
    with serving(model, socket_path, max_batch_texts=1, page_aging_s=0.05) as engine:

        def flood(i: int) -> int:
            client, answered = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S), 0
            while not stop.is_set():
                client.encode([f"query {i} {answered}"], is_query=True)
                answered += 1
            return answered

        flooders = [Outcome(lambda i=i: flood(i)) for i in range(8)]
        wait_for(lambda: engine.stats().queued_queries >= 4)
        page = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["a page under the flood", "another"])
        queries_waiting = engine.stats().queued_queries
        stop.set()
        answered = [flooder.result() for flooder in flooders]
    assert np.array_equal(page, REFERENCE.encode(["a page under the flood", "another"]))
    assert queries_waiting >= 1 and all(count > 0 for count in answered)  # the flood went on meanwhile


def test_a_query_past_the_bound_is_refused_at_once(socket_path: Path) -> None:
    model = SlowModel()
    hold = threading.Event()
    original = model.encode

    def held(texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        assert hold.wait(TIMEOUT_S)
        return original(texts, is_query=is_query)

    model.encode = held  # type: ignore[method-assign]
    with serving(model, socket_path, max_batch_texts=1, max_queued_queries=2) as engine:
        waiting = [
            Outcome(
                lambda i=i: EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode([f"q{i}"], is_query=True)
            )
            for i in range(3)
        ]
        wait_for(lambda: engine.stats().requests == 3)  # one inside the model, two queued: the bound
        with pytest.raises(EmbeddingEngineUnavailableError, match="embedding_engine_max_queued_queries=2"):
            EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["one too many"], is_query=True)
        hold.set()
        for outcome in waiting:
            outcome.result()
        assert engine.stats().queries_refused == 1
