"""`EmbeddingEngine`: one process's model serving the texts of every applying process of the host.

With `memoryos worker --processes N` each process loaded its own copy of the model and encoded its own
small batches. The engine owns one model and listens on a Unix socket (0600: only the host's user of the
service may send it texts). The model runs in three stages (`stages.py`), each on its own threads, so the
device never waits for Python:

- **Tokenize** on the connection's reader thread, once per text, with the model's fast tokenizer over the
  whole request. A text's length in tokens (truncated at the model's window) is what batches are counted
  in; whether it was truncated is logged from that same encoding.
- **Assemble and prepare** on the assembling thread: the next page batch (`batching.take_batch`: one
  length bucket, at most `max_batch_tokens` counted as padded, `texts x longest`) is padded into arrays
  (pinned memory on CUDA) while the previous one runs, and waits in a slot of depth one.
- **Forward** on the encoding thread, which does nothing else: replies are queued to each connection's
  writer thread, so a client that stops reading loses only its own connection (its writes time out after
  `send_timeout_s`), never the encoding thread.

Scheduling and bounds:

- **Queries first, with aging.** A query (`is_query`) is what a user waits on: the encoding thread takes
  queries before the assembled page batch, so a query waits for at most the batch inside the model. Under a
  flood of queries a page batch whose oldest text has waited `page_aging_s` goes after each query batch,
  so pages still progress. At most `max_queued_queries` query texts wait; past that a query is refused at
  once (`queries_full`) rather than queued behind minutes of others.
- **Back-pressure.** Past `max_queued_texts` page texts waiting (plus the one request being read), a
  connection's thread stops reading: the applying process waits on its reply, and its own batcher keeps
  the pages pending in SQLite, instead of the engine growing without bound.
- **Failures.** A batch whose forward pass raises is run again one request at a time, so only the request
  that fails fails (with the exception's class name, never its message, which may quote a text); the
  others are answered. A model that fails every batch shows in `health`: "stalled" once texts have waited
  `stall_after_s` with no success (`health.py`), which the supervisor reads to restart the engine.

Requests: `hello` (the model's `name` and `dim`, so spaces record the real model), `encode`, `forget`
(drop texts from the model's cache: a forgotten user leaves no text in the engine either), `stats`,
`health`. Logging gives counts only.

Traces: with tracing on (`configure_tracing` in the engine's process), each model batch is one
`embedding batch` span in a trace of its own, linking the span each of its requests named in its `trace`
key (the applying process's `embed` span, or a read's): the path from a write's trace goes through its
run's `apply batch` and the batcher's `embed` to here. No text, only counts and the model's name.
"""

import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections import deque
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from opentelemetry.util.types import AttributeValue

from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.embedding.cache import EmbeddingCache
from memoryos.embedding.engine.batching import take_batch
from memoryos.embedding.engine.health import EngineHealth, engine_verdict
from memoryos.embedding.engine.stages import ModelStages, PlainStages, Tokenized, stages_of
from memoryos.embedding.engine.wire import (
    MAX_FRAME_BYTES,
    Header,
    error_reply,
    frame_bytes,
    recv_frame,
    send_within,
    vectors_reply,
)
from memoryos.errors import EmbeddingEngineError, EmbeddingFrameTooLargeError, InvalidInputError
from memoryos.tracing import tracing_enabled
from memoryos.tracing.attributes import (
    BATCH_PADDED_TOKENS,
    BATCH_SIZE,
    BATCH_TOKENS,
    EMBEDDINGS,
    GEN_AI_OPERATION,
    GEN_AI_REQUEST_MODEL,
)
from memoryos.tracing.spans import NO_SPAN, linked_span

log = logging.getLogger(__name__)

MAX_SOCKET_PATH_BYTES = 107
"""The kernel's limit on a Unix socket path (`sun_path`, less its terminating NUL)."""


def _default(name: str) -> Any:
    """A setting's default, so that an engine built without a config batches as a configured one."""
    return MemoryConfig.model_fields[f"embedding_engine_{name}"].default


@dataclass(frozen=True)
class EngineLimits:
    """How the engine batches, schedules and bounds its work (`MemoryConfig.embedding_engine_*`, which
    say why each is what it is)."""

    max_batch_tokens: int = _default("max_batch_tokens")
    """Tokens of one model batch, counted as padded (texts x longest)."""
    max_batch_texts: int = _default("max_batch_texts")
    max_queued_texts: int = _default("max_queued_texts")
    """Page texts waiting before the engine stops reading page requests."""
    max_queued_queries: int = _default("max_queued_queries")
    """Query texts waiting before a query is refused."""
    page_aging_s: float = _default("page_aging_s")
    stall_after_s: float = _default("stall_s")
    send_timeout_s: float = _default("send_timeout_s")
    cache_size: int = 0
    """Vectors the engine keeps by text (staged runtimes only: a plain embedder caches its own)."""

    @classmethod
    def from_config(cls, config: MemoryConfig, cache_size: int) -> "EngineLimits":
        return cls(
            max_batch_tokens=config.embedding_engine_max_batch_tokens,
            max_batch_texts=config.embedding_engine_max_batch_texts,
            max_queued_texts=config.embedding_engine_max_queued_texts,
            max_queued_queries=config.embedding_engine_max_queued_queries,
            page_aging_s=config.embedding_engine_page_aging_s,
            stall_after_s=config.embedding_engine_stall_s,
            send_timeout_s=config.embedding_engine_send_timeout_s,
            cache_size=cache_size,
        )


@dataclass
class EngineStats:
    """Counters since the engine started; rates are per second spent inside the forward pass."""

    connections: int = 0
    requests: int = 0
    batches: int = 0
    query_batches: int = 0
    texts: int = 0
    tokens: int = 0
    """Tokens the model read, counted by its tokenizer (padding not included)."""
    padded_tokens: int = 0
    """Tokens the model computed: each batch's texts x its longest."""
    truncated_texts: int = 0
    failures: int = 0
    """Model calls that raised: a batch, or a request of a failed batch run again alone."""
    failed_requests: int = 0
    queries_refused: int = 0
    connections_dropped: int = 0
    """Connections closed because their client did not read a reply within `send_timeout_s`."""
    encode_s: float = 0.0
    queued_texts: int = 0
    """Page texts read and not yet in a batch, now."""
    queued_queries: int = 0
    largest_batch: int = 0
    largest_batch_tokens: int = 0
    last_success_unix: float | None = None

    @property
    def texts_per_s(self) -> float:
        return self.texts / self.encode_s if self.encode_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.encode_s if self.encode_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "texts_per_s": self.texts_per_s, "tokens_per_s": self.tokens_per_s}


class _Connection:
    """One client connection: its reader thread (the engine's `_serve_connection`) and a writer thread
    that sends queued replies, each within `send_timeout_s`. Queuing a reply never blocks."""

    def __init__(self, sock: socket.socket, send_timeout_s: float, on_dropped: Any) -> None:
        self.sock = sock
        self.closed = False
        self._send_timeout_s = send_timeout_s
        self._on_dropped = on_dropped
        self._outbox: deque[bytes] = deque()
        self._finishing = False
        self._changed = threading.Condition()
        self.writer = threading.Thread(target=self._write, name="memoryos-engine-writer", daemon=True)
        self.writer.start()

    def reply(self, header: Header, payload: bytes = b"") -> None:
        data = frame_bytes(header, payload)
        with self._changed:
            if not self.closed:
                self._outbox.append(data)
                self._changed.notify()

    def close(self) -> None:
        """Stop at once: nothing more is sent, the peer sees the connection end."""
        with self._changed:
            self.closed = True
            self._outbox.clear()
            self._changed.notify()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        """Send what is queued (each within the send timeout), then close."""
        with self._changed:
            self._finishing = True
            self._changed.notify()

    def _write(self) -> None:
        while True:
            with self._changed:
                while not self.closed and not self._outbox and not self._finishing:
                    self._changed.wait()
                if self.closed or not self._outbox:
                    break  # closed, or finishing with nothing left
                data = self._outbox.popleft()
            if not send_within(self.sock, data, self._send_timeout_s):
                if not self.closed:
                    self._on_dropped()
                break
        self.close()


class _Request:
    """One `encode` request: its rows fill in as its texts come out of batches."""

    def __init__(
        self,
        connection: _Connection,
        request_id: int,
        size: int,
        dim: int,
        is_query: bool,
        trace: str | None = None,
    ) -> None:
        self.connection = connection
        self.trace = trace
        """The sender's span context (`current_carrier`), which the batches holding its texts link."""
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
    """One text of a request, at its index in the request, as the model's tokenizer made it."""

    request: _Request
    index: int
    text: str
    tokens: Tokenized
    arrived: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _Batch:
    """Items of one kind and what `prepare` made of them (None: `prepare` raised; run one by one)."""

    items: list[_Item]
    prepared: object | None
    is_query: bool

    @property
    def arrived(self) -> float:
        return min(item.arrived for item in self.items)


class EmbeddingEngine:
    """Serve `embedder` (through `stages`, default its plain `encode`) on the Unix socket `socket_path`
    from `start` until `close`."""

    def __init__(
        self,
        embedder: Embedder,
        socket_path: Path,
        *,
        stages: ModelStages | None = None,
        limits: EngineLimits | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES:
            raise InvalidInputError(
                "embedding_engine_socket", f"a Unix socket path is at most {MAX_SOCKET_PATH_BYTES} bytes"
            )
        self.embedder = embedder
        self.stages = stages or PlainStages(embedder)
        self.limits = limits or EngineLimits()
        self.socket_path = Path(socket_path)
        self.max_frame_bytes = max_frame_bytes
        self._cache = EmbeddingCache(self.limits.cache_size)
        self._work = threading.Condition()
        self._queries: deque[_Item] = deque()
        self._pages: deque[_Item] = deque()
        self._ready: _Batch | None = None
        self._assembling: list[_Item] = []
        self._running: list[_Item] = []
        self._last_was_query = False
        self._failing_since: float | None = None
        self._last_failure = 0.0
        self._closed = False
        self._stats = EngineStats()
        self._connections: set[_Connection] = set()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_config(cls, embedder: Embedder, socket_path: Path, config: MemoryConfig) -> "EmbeddingEngine":
        """The engine `memoryos embedding-engine` runs: `embedder` in its own stages where its runtime
        allows (`stages_of`), the limits of `config`, and a cache of its own in front of staged runtimes
        (which bypass the embedder's)."""
        stages = stages_of(embedder, config.embedding_cpu_run_size)
        cache_size = 0 if isinstance(stages, PlainStages) else config.embedding_cache_size
        limits = EngineLimits.from_config(config, cache_size)
        return cls(embedder, socket_path, stages=stages, limits=limits)

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
            return EngineStats(
                **{
                    **asdict(self._stats),
                    "queued_texts": len(self._pages),
                    "queued_queries": len(self._queries),
                }
            )

    def health(self) -> EngineHealth:
        """Batches done, the last success and the work waiting, with their verdict (`health.py`)."""
        now, wall = time.monotonic(), time.time()
        with self._work:
            waiting = [*self._running, *self._assembling, *(self._ready.items if self._ready else [])]
            oldest = min((item.arrived for item in waiting), default=now)
            for queue in (self._queries, self._pages):
                if queue:
                    oldest = min(oldest, queue[0].arrived)  # each queue keeps arrival order
            count = len(waiting) + len(self._queries) + len(self._pages)
            last = self._stats.last_success_unix
            stats = self._stats
            failing = self._failing_since is not None and now - self._last_failure < self.limits.stall_after_s
            return EngineHealth(
                verdict=engine_verdict(
                    count,
                    now - oldest,
                    None if last is None else wall - last,
                    now - self._failing_since if failing and self._failing_since is not None else None,
                    self.limits.stall_after_s,
                ),
                batches_total=stats.batches,
                failures_total=stats.failures,
                last_success_unix=last,
                waiting_texts=count,
                oldest_waiting_s=now - oldest if count else 0.0,
            )

    def close(self) -> None:
        """Stop: the batch inside the model finishes and is answered; queued requests are dropped with
        their connections (clients retry on another engine's start; pages stay pending in their stores)."""
        with self._work:
            self._closed = True
            self._work.notify_all()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        for thread in self._threads:
            thread.join(timeout=30)
        with self._work:
            connections = list(self._connections)
        for connection in connections:
            connection.finish()
        for connection in connections:
            connection.writer.join(timeout=self.limits.send_timeout_s + 1)
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

    # --- connections ------------------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._work:
                if self._closed:
                    sock.close()
                    return
                connection = _Connection(sock, self.limits.send_timeout_s, self._dropped)
                self._connections.add(connection)
                self._stats.connections += 1
            threading.Thread(
                target=self._serve_connection, args=(connection,), name="memoryos-engine-conn", daemon=True
            ).start()

    def _dropped(self) -> None:
        log.warning("embedding engine: a client did not read its reply; its connection is closed")
        with self._work:
            self._stats.connections_dropped += 1
            self._work.notify_all()  # its queued texts are abandoned: back-pressure may lift

    def _serve_connection(self, connection: _Connection) -> None:
        try:
            while not connection.closed:
                try:
                    frame = recv_frame(connection.sock, self.max_frame_bytes)
                except EmbeddingFrameTooLargeError as error:
                    connection.reply(error_reply(None, "frame_too_large", str(error)))
                    connection.finish()  # the frame's body is unread: the connection cannot go on
                    connection.writer.join(self.limits.send_timeout_s + 1)
                    return
                except (OSError, EmbeddingEngineError):
                    return
                if frame is None:
                    return
                self._handle(connection, frame[0])
        finally:
            connection.close()
            connection.writer.join()
            with self._work:
                self._connections.discard(connection)
                self._work.notify_all()
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
        elif op == "health":
            connection.reply({"id": request_id, "ok": True, "health": self.health().as_dict()})
        elif op == "stats":
            stats = {**self.stats().as_dict(), "health": self.health().as_dict()}
            connection.reply({"id": request_id, "ok": True, "stats": stats})
        elif op in ("forget", "encode"):
            texts = header.get("texts")
            if op == "forget" and texts is None:
                self._forget(None)
                connection.reply({"id": request_id, "ok": True})
            elif not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
                connection.reply(
                    error_reply(request_id, "invalid_request", "texts must be a list of strings")
                )
            elif op == "forget":
                self._forget(texts)
                connection.reply({"id": request_id, "ok": True})
            else:
                trace = header.get("trace")
                self._enqueue(
                    connection,
                    request_id,
                    texts,
                    bool(header.get("is_query", False)),
                    trace if isinstance(trace, str) else None,
                )
        else:
            connection.reply(error_reply(request_id, "invalid_request", f"unknown op {op!r}"))

    def _forget(self, texts: list[str] | None) -> None:
        self._cache.discard(texts)
        self.embedder.forget_texts(texts)

    def _enqueue(
        self,
        connection: _Connection,
        request_id: int,
        texts: list[str],
        is_query: bool,
        trace: str | None = None,
    ) -> None:
        """Tokenize the request's texts the cache does not hold (on this connection's thread) and queue
        them; a query over the queries' bound is refused at once."""
        if not texts:
            connection.reply(*vectors_reply(request_id, np.zeros((0, self.embedder.dim), np.float32)))
            return
        if is_query:
            with self._work:
                waiting = len(self._queries)
            if waiting + len(texts) > self.limits.max_queued_queries:
                self._refuse_query(connection, request_id, waiting)
                return
        request = _Request(connection, request_id, len(texts), self.embedder.dim, is_query, trace)
        missing: list[int] = []
        for index, text in enumerate(texts):
            cached = self._cache.get(is_query, text)
            if cached is None:
                missing.append(index)
            else:
                request.fill(index, cached)
        if not missing:
            with self._work:
                self._stats.requests += 1
            return
        try:
            tokenized = self.stages.tokenize([texts[index] for index in missing], is_query)
        except Exception as error:  # a tokenizer that refuses a text: this request's failure alone
            self._fail_requests([request], error)
            return
        items = [
            _Item(request, index, texts[index], tokens)
            for index, tokens in zip(missing, tokenized, strict=True)
        ]
        with self._work:
            if is_query:
                self._queries.extend(items)
            else:
                while len(self._pages) >= self.limits.max_queued_texts and not self._closed:
                    self._work.wait()  # back-pressure: this connection reads nothing more meanwhile
                self._pages.extend(items)
            self._stats.requests += 1
            self._work.notify_all()

    def _refuse_query(self, connection: _Connection, request_id: int, waiting: int) -> None:
        with self._work:
            self._stats.queries_refused += 1
        connection.reply(
            error_reply(
                request_id,
                "queries_full",
                f"{waiting} query texts already wait in the embedding engine "
                f"(embedding_engine_max_queued_queries={self.limits.max_queued_queries}); try again",
            )
        )

    # --- batches ----------------------------------------------------------------------------------------
    def _take(self, queue: deque[_Item]) -> list[_Item]:
        """The next batch from `queue` (lock held), `take_batch`'s; texts of requests already answered
        (failed) or of closed connections are dropped first."""
        if any(item.request.abandoned for item in queue):
            live = [item for item in queue if not item.request.abandoned]
            queue.clear()
            queue.extend(live)
        return take_batch(
            queue, lambda item: item.tokens.length, self.limits.max_batch_texts, self.limits.max_batch_tokens
        )

    def _prepare(self, items: list[_Item], is_query: bool) -> _Batch:
        try:
            prepared: object | None = self.stages.prepare([item.tokens for item in items], is_query)
        except Exception as error:  # run one request at a time by the encoding thread, which reports it
            log.warning(
                "embedding engine: preparing a batch of %d texts failed (%s)",
                len(items),
                type(error).__name__,
            )
            prepared = None
        return _Batch(items, prepared, is_query)

    def _assemble(self) -> None:
        """The pipeline's first stage: the next page batch, taken and prepared while the previous runs."""
        while True:
            with self._work:
                while not self._closed and (not self._pages or self._ready is not None):
                    self._work.wait()
                if self._closed:
                    return
                items = self._take(self._pages)
                self._assembling = items
                self._work.notify_all()  # connections held back by back-pressure
            if not items:
                continue
            batch = self._prepare(items, is_query=False)
            with self._work:
                self._assembling = []
                self._ready = batch
                self._work.notify_all()

    def _encode_batches(self) -> None:
        """The pipeline's second stage: queries first, but an aged page batch after a query batch."""
        while True:
            with self._work:
                while not self._closed and not self._queries and self._ready is None:
                    self._work.wait()
                if self._closed:
                    return
                ready = self._ready
                page_due = ready is not None and (
                    not self._queries
                    or (self._last_was_query and time.monotonic() - ready.arrived >= self.limits.page_aging_s)
                )
                batch: _Batch | None = None
                if page_due:
                    batch, self._ready = ready, None
                    self._work.notify_all()  # the assembler may fill the slot again
                    items = batch.items if batch else []
                else:
                    items = self._take(self._queries)
                self._last_was_query = not page_due
                self._running = items
            if items:
                self._run(batch or self._prepare(items, is_query=True))
            with self._work:
                self._running = []

    def _run(self, batch: _Batch) -> None:
        """One forward pass; if it raises, each request of the batch alone, so only a failing one fails."""
        live = [item for item in batch.items if not item.request.abandoned]
        if not live:
            return
        if len(live) < len(batch.items):
            batch = self._prepare(live, batch.is_query)
        try:
            self._forward(batch)
        except Exception as error:  # the model's failure: this batch's requests are tried alone
            self._count_failure(len(batch.items), error)
            requests = {id(item.request): item.request for item in batch.items}
            if len(requests) == 1:
                self._fail_requests(list(requests.values()), error)
                return
            for request in requests.values():
                alone = [item for item in batch.items if item.request is request]
                try:
                    self._forward(self._prepare(alone, batch.is_query))
                except Exception as alone_error:
                    self._count_failure(len(alone), alone_error)
                    self._fail_requests([request], alone_error)

    def _forward(self, batch: _Batch) -> None:
        """The model on one prepared batch, its rows given to their requests; raises what the model
        raised (or `EmbeddingEngineError` for rows of the wrong shape, or a batch that did not prepare)."""
        if batch.prepared is None:
            raise EmbeddingEngineError("the batch could not be prepared")
        items = batch.items
        lengths = [item.tokens.length for item in items]
        started = time.perf_counter()
        with self._batch_span(items, lengths):
            vectors = self.stages.forward(batch.prepared)
            if vectors.shape != (len(items), self.embedder.dim):
                raise EmbeddingEngineError(f"the model returned {vectors.shape} for {len(items)} texts")
        elapsed = time.perf_counter() - started
        truncated = sum(item.tokens.truncated for item in items)
        if truncated:
            log.warning(
                "embedding engine: %d of %d texts exceed the model's window of %s tokens and were truncated",
                truncated,
                len(items),
                self.stages.window,
            )
        with self._work:
            stats = self._stats
            stats.batches += 1
            stats.query_batches += batch.is_query
            stats.texts += len(items)
            stats.tokens += sum(lengths)
            stats.padded_tokens += len(lengths) * max(lengths)
            stats.truncated_texts += truncated
            stats.encode_s += elapsed
            stats.largest_batch = max(stats.largest_batch, len(items))
            stats.largest_batch_tokens = max(stats.largest_batch_tokens, len(lengths) * max(lengths))
            stats.last_success_unix = time.time()
            self._failing_since = None
        for item, vector in zip(items, vectors, strict=True):
            self._cache.put(batch.is_query, item.text, vector)
            item.request.fill(item.index, vector)

    def _batch_span(self, items: list[_Item], lengths: list[int]) -> AbstractContextManager[object]:
        """The model batch's `embedding batch` span, linking its requests' senders; `NO_SPAN` with tracing
        off (one flag read) or when no request of it came from a traced span."""
        if not tracing_enabled():
            return NO_SPAN
        carriers = [item.request.trace for item in items if item.request.trace is not None]
        if not carriers:
            return NO_SPAN
        attributes: dict[str, AttributeValue] = {
            GEN_AI_OPERATION: EMBEDDINGS,
            GEN_AI_REQUEST_MODEL: self.embedder.name,
            BATCH_SIZE: len(items),
            BATCH_TOKENS: sum(lengths),
            BATCH_PADDED_TOKENS: len(lengths) * max(lengths),
        }
        return linked_span("embedding batch", carriers, attributes)

    def _count_failure(self, texts: int, error: Exception) -> None:
        log.warning("embedding engine: the model failed on %d texts (%s)", texts, type(error).__name__)
        now = time.monotonic()
        with self._work:
            self._stats.failures += 1
            if self._failing_since is None or now - self._last_failure >= self.limits.stall_after_s:
                self._failing_since = now  # a new failing spell (the last one ended long ago)
            self._last_failure = now

    def _fail_requests(self, requests: Sequence[_Request], error: Exception) -> None:
        kind = type(error).__name__
        with self._work:
            self._stats.failed_requests += len(requests)
        for request in requests:
            request.fail(kind, f"the engine's model raised {kind} on this request")
