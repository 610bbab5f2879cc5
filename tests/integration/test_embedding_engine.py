"""The embedding engine on a real Unix socket, with clients on threads of the test: rows come back in
order to every connection at once, queries go ahead of queued pages, page batches keep the token budget
longest first, back-pressure stops reading, frames over the bound and failing models are refused with
clear errors, the socket is the service user's alone, and a client rides out an engine that is not up yet
or gives up within its bound."""

import os
import signal
import socket
import stat
import struct
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

from memoryos.config import MemoryConfig
from memoryos.embedding import create_embedder
from memoryos.embedding.base import estimate_tokens
from memoryos.embedding.engine.batching import length_bucket
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.server import EmbeddingEngine, EngineLimits
from memoryos.embedding.engine.wire import recv_frame
from memoryos.errors import EmbeddingEngineError, EmbeddingEngineUnavailableError, EmbeddingFrameTooLargeError
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

TIMEOUT_S = 20.0


class GatedEmbedder(HashEmbedder):
    """Records every encode call; page calls wait for `release` (queries never do)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.release.set()
        self.calls: list[tuple[bool, list[str]]] = []
        self.inside = threading.Event()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.calls.append((is_query, list(texts)))
        if not is_query:
            self.inside.set()
            assert self.release.wait(TIMEOUT_S)
        return super().encode(texts, is_query=is_query)


class FailingEmbedder(HashEmbedder):
    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        raise RuntimeError(f"model broke on {texts[0]!r}")


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "engine.sock"


@contextmanager
def serving(
    embedder: HashEmbedder, path: Path, max_frame_bytes: int = 16 << 20, **limits: Any
) -> Iterator[EmbeddingEngine]:
    engine = EmbeddingEngine(embedder, path, limits=EngineLimits(**limits), max_frame_bytes=max_frame_bytes)
    engine.start()
    try:
        yield engine
    finally:
        engine.close()


def wait_for(condition: object) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def in_threads(*calls: object) -> list[threading.Thread]:
    threads = [threading.Thread(target=call, daemon=True) for call in calls]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    return threads


def join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(TIMEOUT_S)
        assert not thread.is_alive()


def batches_queued_behind_one(socket_path: Path, texts: list[str], **limits: Any) -> list[list[str]]:
    """The page batches the engine makes of `texts`, all queued (one request) while a first batch is held
    inside the model."""
    embedder = GatedEmbedder()
    embedder.release.clear()
    with serving(embedder, socket_path, **limits) as engine:
        client = EngineEmbedder(socket_path)
        threads = in_threads(lambda: client.encode(["first"]))
        wait_for(embedder.inside.is_set)
        threads += in_threads(lambda: client.encode(texts))
        wait_for(lambda: engine.stats().requests == 2)
        embedder.release.set()
        join(threads)
    return [batch for _, batch in embedder.calls[1:]]


def test_many_connections_at_once_get_their_own_rows_in_order(socket_path: Path) -> None:
    reference = HashEmbedder()
    config = MemoryConfig(embedding_engine_socket=socket_path)
    shared = create_embedder(config)  # the configured engine's client, used by several threads
    assert isinstance(shared, EngineEmbedder)
    wrong: list[str] = []

    def client(name: str, embedder: EngineEmbedder) -> None:
        for round_ in range(15):
            texts = [f"{name} round {round_} text {i} " + "word " * (i % 7) for i in range(1 + round_ % 9)]
            if not np.array_equal(embedder.encode(texts), reference.encode(texts)):
                wrong.append(f"{name}/{round_}")

    with serving(HashEmbedder(), socket_path, max_batch_texts=8, max_batch_tokens=64) as engine:
        own = [EngineEmbedder(socket_path) for _ in range(4)]
        join(
            in_threads(
                *(lambda i=i: client(f"own{i}", own[i]) for i in range(4)),
                *(lambda i=i: client(f"shared{i}", shared) for i in range(4)),
            )
        )
        stats = engine.stats()
        assert (shared.name, shared.dim) == (reference.name, reference.dim)  # the engine's model, by hello
    assert wrong == []
    assert stats.connections >= 5 and stats.batches < stats.requests * 2  # pooled, not one per request
    assert stats.largest_batch > 1 and stats.tokens_per_s > 0 and stats.texts_per_s > 0


def test_a_query_goes_ahead_of_page_batches_already_queued(socket_path: Path) -> None:
    embedder = GatedEmbedder()
    embedder.release.clear()
    with serving(embedder, socket_path, max_batch_texts=2) as engine:
        pages = [EngineEmbedder(socket_path) for _ in range(3)]
        threads = in_threads(*(lambda i=i: pages[i].encode([f"page {i} a", f"page {i} b"]) for i in range(3)))
        wait_for(lambda: engine.stats().requests == 3 and embedder.inside.is_set())
        threads += in_threads(lambda: EngineEmbedder(socket_path).encode(["the query"], is_query=True))
        wait_for(lambda: engine.stats().requests == 4)  # read: the query waits behind the batch in encode
        embedder.release.set()
        join(threads)
    kinds = [is_query for is_query, _ in embedder.calls]
    assert kinds == [False, True, False, False]  # the two queued page batches came after it


def test_page_batches_keep_the_padded_token_budget_in_one_bucket_longest_first(socket_path: Path) -> None:
    """A batch costs texts x its longest (every text is padded to it): that product stays within the
    budget, a batch holds one length bucket (one long text never pads short ones), longest first."""
    budget = 60
    lengths = [3, 90, 20, 45, 8, 60, 33, 5, 70, 12, 50, 1, 25, 40, 16, 80, 44, 41, 47, 42]
    texts = [f"{n:02d}" + "x" * n for n in lengths]
    batches = batches_queued_behind_one(socket_path, texts, max_batch_texts=5, max_batch_tokens=budget)
    assert sorted(text for batch in batches for text in batch) == sorted(texts)
    assert any(len(batch) > 1 for batch in batches)
    for batch in batches:
        tokens = [estimate_tokens(text) for text in batch]
        assert len(batch) <= 5
        assert len(batch) == 1 or len(batch) * max(tokens) <= budget, batch
        assert len({length_bucket(n) for n in tokens}) == 1, batch
        assert tokens == sorted(tokens, reverse=True), batch


def test_page_batches_group_texts_of_one_length_the_oldest_first(socket_path: Path) -> None:
    """Short and long texts queued in turn go out in batches of one length each (a run pads every text to
    the longest), the oldest text's length first, and every text once."""
    texts = [f"{i:02d} " + ("word " * (60 if i % 2 else 2)) for i in range(16)]
    batches = batches_queued_behind_one(socket_path, texts, max_batch_texts=4, max_batch_tokens=10_000)
    assert sorted(text for batch in batches for text in batch) == sorted(texts)
    assert texts[0] in batches[0]
    for batch in batches:
        assert len({length_bucket(estimate_tokens(text)) for text in batch}) == 1, batch


def test_back_pressure_stops_reading_requests_past_the_bound(socket_path: Path) -> None:
    embedder = GatedEmbedder()
    embedder.release.clear()
    reference = HashEmbedder()
    results: dict[int, np.ndarray] = {}

    def send(i: int) -> None:
        results[i] = EngineEmbedder(socket_path).encode([f"request {i} one", f"request {i} two"])

    with serving(embedder, socket_path, max_batch_texts=2, max_queued_texts=4) as engine:
        threads = in_threads(*(lambda i=i: send(i) for i in range(8)))
        # 2 texts inside encode, 2 assembled in the slot, 4 queued: the bound; the rest stay unread
        wait_for(lambda: engine.stats().requests == 4 and engine.stats().queued_texts == 4)
        time.sleep(0.3)  # room for a wrongly read request to show
        held = engine.stats()
        embedder.release.set()
        join(threads)
    assert held.requests == 4 and held.queued_texts == 4
    assert sorted(results) == list(range(8))
    for i, rows in results.items():
        assert np.array_equal(rows, reference.encode([f"request {i} one", f"request {i} two"]))


def test_a_frame_over_the_bound_is_refused_with_a_clear_error(socket_path: Path) -> None:
    with serving(HashEmbedder(), socket_path, max_frame_bytes=4096):
        with pytest.raises(EmbeddingFrameTooLargeError, match=r"exceeds the bound of 4096 bytes"):
            EngineEmbedder(socket_path).encode(["long " * 2000])
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.settimeout(TIMEOUT_S)
        raw.connect(os.fspath(socket_path))
        raw.sendall(struct.pack(">II", 100, 1 << 30))  # a 1 GiB body is announced and never read
        frame = recv_frame(raw)
        assert frame is not None and frame[0]["ok"] is False
        assert frame[0]["error"]["kind"] == "frame_too_large"
        assert recv_frame(raw) is None  # and the connection is closed
        raw.close()
        assert EngineEmbedder(socket_path).encode(["still serving"]).shape == (1, HashEmbedder().dim)


def test_a_model_failure_answers_the_batch_with_its_kind_and_no_text(socket_path: Path) -> None:
    with (
        serving(FailingEmbedder(), socket_path),
        pytest.raises(EmbeddingEngineError, match="RuntimeError") as raised,
    ):
        EngineEmbedder(socket_path).encode(["private words"])
    assert "private" not in str(raised.value)


def test_the_socket_is_private_a_stale_one_is_replaced_a_live_one_refused(socket_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(socket_path))
    stale.close()  # the file stays, nothing listens: what a killed engine leaves
    with serving(HashEmbedder(), socket_path):
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        with pytest.raises(EmbeddingEngineError, match="already listens"):
            EmbeddingEngine(HashEmbedder(), socket_path).start()
        assert EngineEmbedder(socket_path).encode(["alive"]).shape == (1, HashEmbedder().dim)
    assert not socket_path.exists()
    socket_path.write_text("not a socket")
    with pytest.raises(EmbeddingEngineError, match="not a socket"):
        EmbeddingEngine(HashEmbedder(), socket_path).start()


def test_a_client_waits_for_an_engine_starting_and_gives_up_within_its_bound(socket_path: Path) -> None:
    with pytest.raises(EmbeddingEngineUnavailableError, match=r"within 0.3 s"):
        EngineEmbedder(socket_path, timeout_s=0.3).encode(["nobody there"])
    EngineEmbedder(socket_path, timeout_s=0.3).forget_texts(["nobody there"])  # no engine, no cache
    client = EngineEmbedder(socket_path, timeout_s=TIMEOUT_S)
    later = threading.Timer(0.3, lambda: EmbeddingEngine(HashEmbedder(), socket_path).start())
    later.start()
    assert np.array_equal(client.encode(["arrives"]), HashEmbedder().encode(["arrives"]))
    assert client.reachable()


class ForgettingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.forgotten: list[list[str] | None] = []

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        self.forgotten.append(None if texts is None else list(texts))


def test_forgotten_texts_leave_the_engines_cache_too(socket_path: Path) -> None:
    embedder = ForgettingEmbedder()
    with serving(embedder, socket_path):
        client = EngineEmbedder(socket_path)
        client.forget_texts(["a deleted page", "another"])
        client.forget_texts(None)  # a forgotten user: everything
    assert embedder.forgotten == [["a deleted page", "another"], None]


def test_the_command_serves_the_configured_model_until_sigterm(socket_path: Path) -> None:
    env = {**os.environ, "MEMORYOS_EMBEDDING_ENGINE_SOCKET": str(socket_path)}  # as its workers have it
    engine = subprocess.Popen(
        [sys.executable, "-m", "memoryos.cli.main", "embedding-engine"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert engine.stdout is not None
        assert f"on {socket_path}".encode() in engine.stdout.readline()  # the model loaded, then listening
        client = EngineEmbedder(socket_path)
        assert client.name == MemoryConfig().embedding_model_name  # the real model, not a client of itself
        vectors = client.encode(["a page about tea", "another about coffee"])
        assert vectors.shape == (2, client.dim)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=TIMEOUT_S) == 0
    finally:
        engine.kill()
    assert not socket_path.exists()
