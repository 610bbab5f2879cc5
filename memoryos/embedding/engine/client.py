"""`EngineEmbedder`: the `Embedder` of an applying process whose host runs an embedding engine.

The process loads no model: its batcher's page batches and its readers' queries go to the engine over
its Unix socket. Each concurrent caller (the batcher thread, query threads) takes a connection of its own
from a small pool, so one request is in flight per connection and replies need no demultiplexing.

`name` and `dim` come from the engine's hello, so spaces record the real model; an engine that comes back
with another model is refused rather than mixed in. While the engine is down or restarting a call tries
again, with backoff, until its deadline, then raises `EmbeddingEngineUnavailableError`. The deadlines
differ by kind: a page batch's (`timeout_s`, `embedding_engine_timeout_s`) outlasts an engine restart, so
the batch lands on the restarted engine (and if not, the batcher retries it later: its pages stay pending
in SQLite, nothing acknowledged is lost); a query's (`query_timeout_s`) stays below the API's read timeout,
so a reader gets an error while someone still waits for it. A query the engine refuses because too many
wait (`queries_full`) fails at once with `EmbeddingEngineUnavailableError`.
"""

import itertools
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memoryos import backoff
from memoryos.config import MemoryConfig
from memoryos.embedding.engine.health import EngineHealth, ProbeVerdict, probe_health
from memoryos.embedding.engine.wire import MAX_FRAME_BYTES, Header, recv_frame, send_frame, vectors_of
from memoryos.errors import (
    EmbeddingEngineError,
    EmbeddingEngineUnavailableError,
    EmbeddingFrameTooLargeError,
)
from memoryos.tracing import current_carrier, tracing_enabled

TEXTS_PER_REQUEST = 256
"""Texts sent in one request at most: a longer call is split, so one call never meets the frame bound
unless a single text does. The engine batches across requests anyway."""
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
"""Pause between attempts to reach an engine that is down, doubled per attempt up to this."""
_NOT_LISTENING = (ConnectionRefusedError, FileNotFoundError)
"""What connecting to a socket path with no engine behind it raises."""


class _NoEngineListening(Exception):
    """No engine listens at the socket path (a call that need not wait for one gives up)."""


class EngineEmbedder:
    """`Embedder` over the embedding engine at `socket_path`; thread-safe."""

    def __init__(
        self,
        socket_path: Path,
        timeout_s: float = 300.0,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        query_timeout_s: float | None = None,
    ) -> None:
        """`timeout_s`: a page batch's deadline (and hello's, stats'); `query_timeout_s`: a query's (None:
        the same as `timeout_s`)."""
        self.socket_path = Path(socket_path)
        self.timeout_s = timeout_s
        self.query_timeout_s = timeout_s if query_timeout_s is None else query_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self._lock = threading.Lock()
        self._idle: list[socket.socket] = []
        self._ids = itertools.count(1)
        self._model: tuple[str, int] | None = None

    @classmethod
    def from_config(cls, config: MemoryConfig) -> "EngineEmbedder":
        """The client of `config`'s engine (`embedding_engine_socket`, which must be set) with its deadlines."""
        assert config.embedding_engine_socket is not None
        return cls(
            config.embedding_engine_socket,
            timeout_s=config.embedding_engine_timeout_s,
            query_timeout_s=config.embedding_engine_query_timeout_s,
        )

    @property
    def name(self) -> str:
        return self._model_info()[0]

    @property
    def dim(self) -> int:
        return self._model_info()[1]

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """The engine's vectors for `texts`, rows in order; `EmbeddingEngineError` when the engine refused
        or its model raised, `EmbeddingEngineUnavailableError` when none answered within the deadline of
        the call's kind (`query_timeout_s` for a query, else `timeout_s`) or too many queries wait."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        timeout_s = self.query_timeout_s if is_query else self.timeout_s
        deadline = time.monotonic() + timeout_s
        header: Header = {"op": "encode", "is_query": is_query}
        carrier = current_carrier() if tracing_enabled() else None
        if carrier is not None:  # the batcher's `embed` span (or a read's): the engine's batch links it
            header["trace"] = carrier
        parts = []
        for chunk in _requests_of(texts):
            vectors = vectors_of(*self._request({**header, "texts": chunk}, deadline, timeout_s))
            if vectors.shape[0] != len(chunk):
                raise EmbeddingEngineError(
                    f"the embedding engine answered {vectors.shape[0]} rows for {len(chunk)}"
                )
            parts.append(vectors)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        """Drop the texts from the engine's cache. An engine that is not running holds no cache: nothing to
        do. One that is running but does not answer raises, as the texts may still be in its memory."""
        deadline = time.monotonic() + self.timeout_s
        chunks: list[list[str] | None] = [None] if texts is None else [*_requests_of(texts)]
        try:
            for chunk in chunks:
                self._request({"op": "forget", "texts": chunk}, deadline, absent_ok=True)
        except _NoEngineListening:
            return

    def wait_ready(self) -> None:
        """Return once the engine answers a hello (its model is loaded before it listens), trying until
        `timeout_s`; then `EmbeddingEngineUnavailableError`."""
        self._model_info()

    def reachable(self, timeout_s: float = 1.0) -> bool:
        """Whether the engine answers a hello within `timeout_s` (the worker's health)."""
        try:
            sock = self._connect(time.monotonic() + timeout_s, wait=False)
        except EmbeddingEngineError:
            return False
        sock.close()
        return True

    def health(self, timeout_s: float = 1.0) -> tuple[ProbeVerdict, EngineHealth | None]:
        """The engine's health within `timeout_s` (`health.probe_health`): batches done, its last success,
        the work waiting and the verdict; "absent" or "unresponsive" with None when it cannot tell."""
        return probe_health(self.socket_path, timeout_s)

    def stats(self) -> dict[str, object]:
        """The engine's counters (`EngineStats.as_dict`, with its `health`)."""
        stats = self._request({"op": "stats"}, time.monotonic() + self.timeout_s)[0].get("stats")
        return stats if isinstance(stats, dict) else {}

    def close(self) -> None:
        """Close the idle connections (those in use close when their call ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def _model_info(self) -> tuple[str, int]:
        if self._model is None:
            sock = self._connect(time.monotonic() + self.timeout_s, wait=True)
            self._checkin(sock)
        assert self._model is not None
        return self._model

    def _request(
        self, header: Header, deadline: float, timeout_s: float | None = None, absent_ok: bool = False
    ) -> tuple[Header, bytes]:
        """The engine's reply to `header`, trying again on a connection lost or refused until `deadline`
        (`timeout_s` long, for the message). With `absent_ok`, `_NoEngineListening` as soon as no engine
        listens at the path."""
        attempt = 0
        while True:
            attempt += 1
            sock = self._checkout(deadline, not absent_ok, timeout_s)
            request_id = next(self._ids)
            try:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                send_frame(sock, {**header, "id": request_id}, max_frame_bytes=self.max_frame_bytes)
                frame = recv_frame(sock, self.max_frame_bytes)
                if frame is None:
                    raise ConnectionResetError("the embedding engine closed the connection")
            except EmbeddingFrameTooLargeError:
                sock.close()
                raise
            except (OSError, EmbeddingEngineError):  # the engine died, restarts, or does not answer in time
                sock.close()
                self.close()  # the other idle connections went with the engine
                if time.monotonic() >= deadline:
                    raise self._unavailable("did not answer", timeout_s) from None
                _pause(attempt, deadline)
                continue
            reply, payload = frame
            error = reply.get("error") if not reply.get("ok") else None
            kind, message = (str(error.get("kind")), str(error.get("message"))) if error else ("", "")
            if kind == "frame_too_large":  # answered before the request was read: no id, connection closed
                sock.close()
                raise EmbeddingFrameTooLargeError(message)
            if reply.get("id") != request_id:
                sock.close()
                raise EmbeddingEngineError("the embedding engine answered another request")
            if kind == "queries_full":
                self._checkin(sock)
                raise EmbeddingEngineUnavailableError(f"the embedding engine refused a query: {message}")
            if error:
                self._checkin(sock)
                raise EmbeddingEngineError(f"the embedding engine refused ({kind}): {message}")
            self._checkin(sock)
            return reply, payload

    def _checkout(self, deadline: float, wait: bool, timeout_s: float | None = None) -> socket.socket:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return self._connect(deadline, wait, timeout_s)
        except EmbeddingEngineUnavailableError as error:
            if not wait and isinstance(error.__cause__, _NOT_LISTENING):
                raise _NoEngineListening from error
            raise

    def _checkin(self, sock: socket.socket) -> None:
        with self._lock:
            self._idle.append(sock)

    def _connect(self, deadline: float, wait: bool, timeout_s: float | None = None) -> socket.socket:
        """A new connection whose hello named the model this process embeds with. `wait`: while no engine
        listens, try again until `deadline`; else give up at once."""
        attempt = 0
        while True:
            attempt += 1
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                sock.connect(os.fspath(self.socket_path))
                send_frame(sock, {"op": "hello", "id": 0})
                frame = recv_frame(sock, self.max_frame_bytes)
                if frame is None or not frame[0].get("ok"):
                    raise ConnectionResetError("the embedding engine closed the connection at hello")
            except (OSError, EmbeddingEngineError) as error:
                sock.close()
                if (not wait and isinstance(error, _NOT_LISTENING)) or time.monotonic() >= deadline:
                    raise self._unavailable("is not running", timeout_s) from error
                _pause(attempt, deadline)
                continue
            try:
                self._check_model(str(frame[0].get("name")), int(frame[0].get("dim", 0)))
            except EmbeddingEngineError:
                sock.close()
                raise
            return sock

    def _check_model(self, name: str, dim: int) -> None:
        with self._lock:
            if self._model is None:
                self._model = (name, dim)
            elif self._model != (name, dim):
                raise EmbeddingEngineError(
                    f"the embedding engine now serves {name!r} (dim {dim}) but this process embeds with "
                    f"{self._model[0]!r} (dim {self._model[1]}); restart it to use the new model"
                )

    def _unavailable(self, what: str, timeout_s: float | None = None) -> EmbeddingEngineUnavailableError:
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        setting = (
            "MEMORYOS_EMBEDDING_ENGINE_QUERY_TIMEOUT_S"
            if timeout_s == self.query_timeout_s and timeout_s != self.timeout_s
            else "MEMORYOS_EMBEDDING_ENGINE_TIMEOUT_S"
        )
        return EmbeddingEngineUnavailableError(
            f"the embedding engine at {self.socket_path} {what} within {timeout_s:g} s "
            f"(memoryos embedding-engine; {setting})"
        )


def _pause(attempt: int, deadline: float) -> None:
    """The wait before trying an absent engine again: growing with each attempt, never past `deadline`."""
    time.sleep(
        min(backoff.delay_s(attempt, RETRY_FIRST_S, RETRY_MAX_S), max(0.0, deadline - time.monotonic()))
    )


def _requests_of(texts: Sequence[str]) -> list[list[str]]:
    """`texts` split into requests of at most `TEXTS_PER_REQUEST`."""
    return [
        list(texts[start : start + TEXTS_PER_REQUEST]) for start in range(0, len(texts), TEXTS_PER_REQUEST)
    ]
