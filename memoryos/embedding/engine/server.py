"""`EmbeddingEngine`: one process's model serving the texts of every applying process of the host.

With `memoryos worker --processes N` each process loaded its own copy of the model and encoded its own
small batches. The engine owns one `Embedder` and listens on a Unix socket (0600: only the host's user of
the service may send it texts); each connection has a thread that reads its requests, and the texts of
every connection meet in two queues:

- **Queries ahead of pages.** A query request (`is_query`) is what a user waits on: the encoding thread
  takes queries before any page batch, so a query waits for at most the batch already inside `encode`.
- **Page batches by token budget and length.** The assembling thread pools page texts of every request
  into a batch of at most `max_batch_size` texts and `max_batch_tokens` estimated tokens (one text always
  fits): the oldest text waiting and the others of its length bucket first, then any others, sorted
  longest first so a model run pads little (the oldest always goes, so no length waits behind another
  for ever), and hands it to the encoding thread
  through a slot of depth one: while one batch is inside `encode` the next is assembled. A request may
  be split over batches; its reply goes when its last row is in, rows in its input order.
- **Back-pressure.** Past `max_queued_texts` page texts waiting (plus the one request being read), a
  connection's thread stops reading: the applying process waits on its reply, and its own batcher keeps
  the pages pending in SQLite, instead of the engine growing without bound.
- **Failures.** An `encode` that raises answers every request of that batch with the exception's class
  name (never its message, which may quote a text); the applying processes' batchers retry.

Requests: `hello` (the model's `name` and `dim`, so spaces record the real model), `encode`, `forget`
(drop texts from the model's cache: a forgotten user leaves no text in the engine either), `stats`.
Logging gives counts only.
"""

import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from memoryos.embedding.base import Embedder, estimate_tokens
from memoryos.embedding.engine.wire import (
    MAX_FRAME_BYTES,
    Header,
    error_reply,
    recv_frame,
    send_frame,
    vectors_reply,
)
from memoryos.errors import EmbeddingEngineError, EmbeddingFrameTooLargeError, InvalidInputError

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_QUEUED_TEXTS = 4096
"""Page texts waiting in the engine before it stops reading requests: 64 batches of the default size,
seconds of work for a GPU, so the model never idles while the applying processes wait."""
MAX_SOCKET_PATH_BYTES = 107
"""The kernel's limit on a Unix socket path (`sun_path`, less its terminating NUL)."""


def length_bucket(tokens: int) -> int:
    """Texts whose token estimates share a power of two: a model run over them pads each to about the
    longest's length, so a batch of one bucket wastes little of the device on padding."""
    return max(tokens - 1, 1).bit_length()


def take_batch(queue: deque[T], tokens_of: Callable[[T], int], max_size: int, max_tokens: int) -> list[T]:
    """The next batch, taken out of `queue`: at most `max_size` items and `max_tokens` tokens (one item
    always fits), the oldest and those of its length bucket first in arrival order, then, while room is
    left, any other in arrival order; sorted longest first. The oldest always goes, so no length waits
    behind another for ever."""
    if not queue:
        return []
    bucket = length_bucket(tokens_of(queue[0]))
    taken: list[int] = []
    tokens = 0
    for same_bucket in (True, False):
        for position, item in enumerate(queue):
            cost = tokens_of(item)
            if len(taken) == max_size:
                break
            if (length_bucket(cost) == bucket) != same_bucket or (taken and tokens + cost > max_tokens):
                continue
            taken.append(position)
            tokens += cost
    chosen = set(taken)
    batch = [queue[position] for position in taken]
    kept = [item for position, item in enumerate(queue) if position not in chosen]
    queue.clear()
    queue.extend(kept)
    return sorted(batch, key=tokens_of, reverse=True)


@dataclass
class EngineStats:
    """Counters since the engine started; rates are per second spent inside `encode`."""

    connections: int = 0
    requests: int = 0
    batches: int = 0
    query_batches: int = 0
    texts: int = 0
    tokens_estimated: int = 0
    failures: int = 0
    """Batches whose `encode` raised."""
    encode_s: float = 0.0
    queued_texts: int = 0
    """Page texts read and not yet in a batch, now."""
    largest_batch: int = 0

    @property
    def texts_per_s(self) -> float:
        return self.texts / self.encode_s if self.encode_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_estimated / self.encode_s if self.encode_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "texts_per_s": self.texts_per_s, "tokens_per_s": self.tokens_per_s}


class _Connection:
    """One client connection; replies may come from the encoding thread, hence the lock."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False
        self._send_lock = threading.Lock()

    def reply(self, header: Header, payload: bytes = b"") -> None:
        with self._send_lock, contextlib.suppress(OSError):  # a client gone: nobody to answer
            send_frame(self.sock, header, payload)


class _Request:
    """One `encode` request: its rows fill in as its texts come out of batches."""

    def __init__(self, connection: _Connection, request_id: int, size: int, dim: int, is_query: bool) -> None:
        self.connection = connection
        self.request_id = request_id
        self.is_query = is_query
        self.rows = np.empty((size, dim), dtype=np.float32)
        self.missing = size
        self.answered = False

    @property
    def abandoned(self) -> bool:
        return self.answered or self.connection.closed

    def fill(self, index: int, vector: np.ndarray) -> None:
        self.rows[index] = vector
        self.missing -= 1
        if self.missing == 0 and not self.answered:
            self.answered = True
            self.connection.reply(*vectors_reply(self.request_id, self.rows))

    def fail(self, kind: str, message: str) -> None:
        if not self.answered:
            self.answered = True
            self.connection.reply(error_reply(self.request_id, kind, message))


@dataclass(eq=False)
class _Item:
    """One text of a request, at its index in the request."""

    request: _Request
    index: int
    text: str
    tokens: int


class EmbeddingEngine:
    """Serve `embedder` on the Unix socket `socket_path` from `start` until `close`."""

    def __init__(
        self,
        embedder: Embedder,
        socket_path: Path,
        *,
        max_batch_size: int = 64,
        max_batch_tokens: int = 16384,
        max_queued_texts: int = MAX_QUEUED_TEXTS,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES:
            raise InvalidInputError(
                "embedding_engine_socket", f"a Unix socket path is at most {MAX_SOCKET_PATH_BYTES} bytes"
            )
        self.embedder = embedder
        self.socket_path = Path(socket_path)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_queued_texts = max_queued_texts
        self.max_frame_bytes = max_frame_bytes
        self._work = threading.Condition()
        self._queries: deque[_Item] = deque()
        self._pages: deque[_Item] = deque()
        self._ready: list[_Item] | None = None
        self._closed = False
        self._stats = EngineStats()
        self._connections: set[_Connection] = set()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Listen, and start the accepting, assembling and encoding threads. A stale socket file (no engine
        behind it) is replaced; a live engine on the path is refused with `EmbeddingEngineError`."""
        self._remove_stale_socket()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the file is 0600 from its creation, never briefly wider
        try:
            listener.bind(os.fspath(self.socket_path))
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        listener.listen(128)
        self._listener = listener
        for target, name in (
            (self._accept, "accept"),
            (self._assemble, "assemble"),
            (self._encode_batches, "encode"),
        ):
            thread = threading.Thread(target=target, name=f"memoryos-engine-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stats(self) -> EngineStats:
        with self._work:
            return EngineStats(**{**asdict(self._stats), "queued_texts": len(self._pages)})

    def close(self) -> None:
        """Stop: the batch inside `encode` finishes and is answered; queued requests are dropped with
        their connections (clients retry on another engine's start; pages stay pending in their stores)."""
        with self._work:
            self._closed = True
            self._work.notify_all()
            connections = list(self._connections)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        for thread in self._threads:
            thread.join(timeout=30)
        for connection in connections:
            connection.closed = True
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def _remove_stale_socket(self) -> None:
        try:
            mode = self.socket_path.lstat().st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise EmbeddingEngineError(f"{self.socket_path} exists and is not a socket; not replacing it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(os.fspath(self.socket_path))
        except (ConnectionRefusedError, FileNotFoundError):
            self.socket_path.unlink(missing_ok=True)  # left by an engine that died
            return
        finally:
            probe.close()
        raise EmbeddingEngineError(f"an embedding engine already listens on {self.socket_path}")

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed
            connection = _Connection(sock)
            with self._work:
                if self._closed:
                    sock.close()
                    return
                self._connections.add(connection)
                self._stats.connections += 1
            threading.Thread(
                target=self._serve_connection, args=(connection,), name="memoryos-engine-conn", daemon=True
            ).start()

    def _serve_connection(self, connection: _Connection) -> None:
        try:
            while True:
                try:
                    frame = recv_frame(connection.sock, self.max_frame_bytes)
                except EmbeddingFrameTooLargeError as error:
                    connection.reply(error_reply(None, "frame_too_large", str(error)))
                    return  # the frame's body is unread: the connection cannot go on
                except (OSError, EmbeddingEngineError):
                    return
                if frame is None:
                    return
                self._handle(connection, frame[0])
        finally:
            connection.closed = True
            with self._work:
                self._connections.discard(connection)
            connection.sock.close()

    def _handle(self, connection: _Connection, header: Header) -> None:
        request_id = header.get("id")
        op = header.get("op")
        if not isinstance(request_id, int):
            connection.reply(error_reply(None, "invalid_request", "a request needs an integer id"))
        elif op == "hello":
            connection.reply(
                {"id": request_id, "ok": True, "name": self.embedder.name, "dim": self.embedder.dim}
            )
        elif op == "stats":
            connection.reply({"id": request_id, "ok": True, "stats": self.stats().as_dict()})
        elif op in ("forget", "encode"):
            texts = header.get("texts")
            if op == "forget" and texts is None:
                self.embedder.forget_texts(None)
                connection.reply({"id": request_id, "ok": True})
            elif not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
                connection.reply(
                    error_reply(request_id, "invalid_request", "texts must be a list of strings")
                )
            elif op == "forget":
                self.embedder.forget_texts(texts)
                connection.reply({"id": request_id, "ok": True})
            else:
                self._enqueue(connection, request_id, texts, bool(header.get("is_query", False)))
        else:
            connection.reply(error_reply(request_id, "invalid_request", f"unknown op {op!r}"))

    def _enqueue(self, connection: _Connection, request_id: int, texts: list[str], is_query: bool) -> None:
        if not texts:
            connection.reply(*vectors_reply(request_id, np.zeros((0, self.embedder.dim), np.float32)))
            return
        request = _Request(connection, request_id, len(texts), self.embedder.dim, is_query)
        items = [_Item(request, index, text, estimate_tokens(text)) for index, text in enumerate(texts)]
        with self._work:
            if is_query:
                self._queries.extend(items)
            else:
                while len(self._pages) >= self.max_queued_texts and not self._closed:
                    self._work.wait()  # back-pressure: this connection reads nothing more meanwhile
                self._pages.extend(items)
            self._stats.requests += 1
            self._work.notify_all()

    def _take(self, queue: deque[_Item]) -> list[_Item]:
        """The next batch from `queue` (lock held), `take_batch`'s; texts of requests already answered
        (failed) or of closed connections are dropped first."""
        if any(item.request.abandoned for item in queue):
            live = [item for item in queue if not item.request.abandoned]
            queue.clear()
            queue.extend(live)
        return take_batch(queue, lambda item: item.tokens, self.max_batch_size, self.max_batch_tokens)

    def _assemble(self) -> None:
        """The pipeline's first stage: the next page batch, assembled while the previous one encodes."""
        with self._work:
            while True:
                while not self._closed and (not self._pages or self._ready is not None):
                    self._work.wait()
                if self._closed:
                    return
                batch = self._take(self._pages)
                if batch:
                    self._ready = batch
                self._work.notify_all()  # the encoder, and connections held back by back-pressure

    def _encode_batches(self) -> None:
        """The pipeline's second stage: queries first, then the assembled page batch."""
        while True:
            with self._work:
                while not self._closed and not self._queries and self._ready is None:
                    self._work.wait()
                if self._closed:
                    return
                if self._queries:
                    batch, is_query = self._take(self._queries), True
                else:
                    batch, is_query, self._ready = self._ready or [], False, None
                    self._work.notify_all()  # the assembler may fill the slot again
            if batch:
                self._encode(batch, is_query)

    def _encode(self, batch: Sequence[_Item], is_query: bool) -> None:
        started = time.perf_counter()
        try:
            vectors = self.embedder.encode([item.text for item in batch], is_query=is_query)
            if vectors.shape != (len(batch), self.embedder.dim):
                raise EmbeddingEngineError(f"the model returned {vectors.shape} for {len(batch)} texts")
        except Exception as error:  # the model's failure is the requests': answered, and the engine goes on
            kind = type(error).__name__
            log.warning("embedding engine: a batch of %d texts failed (%s)", len(batch), kind)
            with self._work:
                self._stats.failures += 1
            for request in {id(item.request): item.request for item in batch}.values():
                request.fail(kind, f"the engine's model raised {kind} on a batch holding this request")
            return
        elapsed = time.perf_counter() - started
        with self._work:
            stats = self._stats
            stats.batches += 1
            stats.query_batches += is_query
            stats.texts += len(batch)
            stats.tokens_estimated += sum(item.tokens for item in batch)
            stats.encode_s += elapsed
            stats.largest_batch = max(stats.largest_batch, len(batch))
        for item, vector in zip(batch, vectors, strict=True):
            item.request.fill(item.index, vector)
