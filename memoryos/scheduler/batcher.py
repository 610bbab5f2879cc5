"""`EmbeddingBatcher`: the one place where the texts of every space meet the embedding model.

One daemon thread per model pools the pending pages of every space (`PageSource`) and the texts
consolidation needs (`encode_texts`) into shared batches, so many spaces cost a few encode calls rather
than one each; there is no other batcher in MemoryOS.

**Building a batch.** The thread sleeps until work arrives, then encodes as soon as it holds
`max_batch_size` texts or `max_batch_tokens` estimated tokens, or `max_wait_ms` after the oldest item
became ready, whichever is first. Waiting work is taken in FIFO order of notification: each source or
request first gets a fair share of the room (`room // waiting`, at least one text), then whoever had more
fills the rest; work with more left goes to the back, behind work not yet served, so one large backlog
cannot starve a space with one page. A space a reader waits for (`awaited(source)`) goes first, in the
order its readers began to wait, and takes all the pages the room holds rather than a share, so a reader
waits for one batch, not one per page; once served, a space with more than a batch goes behind the other
readers' spaces, so a big flush takes turns with them. Texts are sorted longest first (see `_encode`)
and sent in ONE `embedder.encode` call; vectors go back per source (`apply_vectors`) and per request
(its future, in input order).

**Queries go ahead of pages.** `encode_query` encodes on the caller's thread, never waiting for a batch
to fill, and no page batch starts while a query waits: a query waits at most for the one batch already
inside `embedder.encode` (none where the embedder does not serialize its model calls). Queries are what a
user waits on; pages are acknowledged, durable writes.

**Acknowledged writes go ahead of pages.** On a few CPU cores page batches slow the threads that
acknowledge writes (they share the cores and the GIL; docs/engine.md). So while writes are acknowledged
less than `yield_s` apart no page batch starts, until the writes pause, someone waits for vectors
(`awaited`), texts are requested (`encode_texts`), or a ready source has waited `yield_max_s`, which
bounds how long a steady stream of writes delays its pages. `yield_s` 0 never yields: a service worker,
whose writes Redis acknowledged, embeds them as they come.

**Failures.** If `encode` raises, every source in that batch gets `embedding_failed(error)` and every
request's future gets the error; if one source's `apply_vectors` (or `pending_texts`) raises, only that
source does. A failed source stays queued and is retried after `retry_delay_s(failures)` (`RETRY_FIRST_S`
doubling to `RETRY_MAX_S`; a success resets it), so a failing model is not hammered, and *alone*, so a
text that breaks the model fails only its own space. `notify` does not cut a backoff short. A source with
nothing pending (`pending_texts` returns []) leaves the queue: a closed space should answer [].

**Closing.** `close` stops taking work, lets the batch inside `encode` finish and be applied, and joins
the thread. Queued pages stay pending (durable; the next open embeds them) and queued `encode_texts`
futures fail with `BatcherClosedError`. The thread is a daemon, so an abandoned batcher never keeps a
process alive (the scheduler closes it at exit).

**Traces.** With tracing on, each page batch is one `embed` span in a trace of its own, linking the runs
(the worker's `apply batch` spans) whose pages it holds: a write's notify carries its run's trace context
(`notify(trace=...)`), kept with the queued source until a batch has taken all its pages. With an engine
the span is current while the engine client sends the batch, so the engine's own span links it in turn.

Logging gives counts and exception class names only, never a text (an exception's message may quote one).
Future callbacks run on the batcher thread: keep them short.
"""

import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import numpy as np
from opentelemetry.util.types import AttributeValue

from memoryos import backoff
from memoryos.embedding.base import Embedder
from memoryos.errors import SchedulerClosedError
from memoryos.scheduler.batch_fill import (
    Batch,
    BatchFilling,
    PageSource,
    QueuedSource,
    QueuedWork,
    TextRequest,
)
from memoryos.scheduler.priority import lower_this_thread
from memoryos.tracing import tracing_enabled
from memoryos.tracing.attributes import (
    BATCH_SIZE,
    BATCH_TOKENS,
    EMBEDDINGS,
    GEN_AI_OPERATION,
    GEN_AI_REQUEST_MODEL,
)
from memoryos.tracing.setup import LARGEST_BATCH
from memoryos.tracing.spans import NO_SPAN, linked_span

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.1
"""Wait before retrying a source whose batch failed once; doubled per consecutive failure."""
RETRY_MAX_S = 30.0
"""Longest wait between retries of a failing source: a model that recovers is used again soon."""
TEXT_TIME_WEIGHT = 0.3
"""Weight of the latest batch in the moving mean of a text's time (encoding and storing its vector)."""


class BatcherClosedError(SchedulerClosedError):
    """The batcher was closed before this work was encoded (pages stay pending in their store). A kind of
    `SchedulerClosedError`: the scheduler closes its batchers, and a consolidation pass that meets either
    ends quietly (`SpaceWork._passes`), leaving its work to the next open — at interpreter exit it printed
    a traceback."""


@dataclass(frozen=True)
class BatcherStats:
    """Counters since the batcher started. A batch is one encode call of pages and texts (queries apart)."""

    batches: int = 0
    texts: int = 0
    queries: int = 0
    failures: int = 0
    """Encode calls that raised."""
    apply_failures: int = 0
    """`apply_vectors` or `pending_texts` calls that raised."""
    mean_batch_size: float = 0.0
    largest_batch: int = 0
    tokens_estimated: int = 0


def retry_delay_s(failures: int) -> float:
    """Seconds before retrying a source after `failures` consecutive failures (>= 1): the schedule of
    `Backoff`, with the batcher's bounds."""
    return backoff.delay_s(failures, RETRY_FIRST_S, RETRY_MAX_S)


def _resolve(
    future: "concurrent.futures.Future[np.ndarray]",
    result: np.ndarray | None = None,
    error: BaseException | None = None,
) -> None:
    """Set a future's outcome unless it has one already (close and the thread may both try)."""
    try:
        if error is not None:
            future.set_exception(error)
        elif result is not None:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


class EmbeddingBatcher(BatchFilling):
    """Encodes the pages of many sources, and other texts, in shared batches on one daemon thread.

    Thread-safe: `notify`, `encode_texts`, `encode_query`, `stats` and `close` may be called from any
    thread. See the module docstring for the batching, query, failure and closing rules.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        max_batch_size: int,
        max_batch_tokens: int,
        max_wait_ms: float,
        name: str = "memoryos-embed",
        nice: int = 0,
        yield_s: float = 0.0,
        yield_max_s: float = 0.0,
    ) -> None:
        """`nice`: how much lower than its creator the batcher's thread runs (`priority.py`). `yield_s`,
        `yield_max_s`: how page batches give way to acknowledged writes (module docstring)."""
        if max_batch_size < 1 or max_batch_tokens < 1 or max_wait_ms < 0:
            raise ValueError(
                "EmbeddingBatcher: max_batch_size and max_batch_tokens must be >= 1 and max_wait_ms >= 0, "
                f"got {max_batch_size}, {max_batch_tokens}, {max_wait_ms}"
            )
        if yield_s < 0 or yield_max_s < 0:
            raise ValueError(
                f"EmbeddingBatcher: yield_s and yield_max_s must be >= 0, got {yield_s}, {yield_max_s}"
            )
        self._embedder = embedder
        self._max_size = max_batch_size
        self._max_tokens = max_batch_tokens
        self._max_wait_s = max_wait_ms / 1000.0
        self._cond = threading.Condition()
        # FIFO of waiting work, keyed by id(source) or id(request); served work moves to the back.
        self._queue: OrderedDict[int, QueuedWork] = OrderedDict()
        self._arrivals = 0  # bumped by every notify and encode_texts
        self._requests = 0  # bumped by every encode_texts: a request ends a hold for writes
        self._queries_waiting = 0
        self._yield_s = yield_s
        self._yield_max_s = yield_max_s
        self._last_write = float("-inf")  # when the last acknowledged write notified
        self._awaited = 0  # readers and flushes waiting for vectors now
        self._readers: OrderedDict[int, int] = OrderedDict()  # id(source) -> its readers, first waited first
        self._closing = False
        self._batches = self._texts = self._queries = self._failures = self._apply_failures = 0
        self._largest = self._tokens = 0
        self._text_s: float | None = None  # moving mean of a text's share of its batch's time
        self._in_flight: tuple[float, int, frozenset[int]] | None = None  # started, texts, source keys
        self._nice = nice
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- callers ----------------------------------------------------------------------------------------
    def notify(
        self,
        source: PageSource,
        *,
        acknowledged: bool = False,
        awaited: bool = False,
        trace: str | None = None,
    ) -> None:
        """`source` has (new) pending pages. Cheap and idempotent while it is queued; ignored after close
        (the pages stay pending in the store). `acknowledged`: they are a write being acknowledged now,
        which page batches give way to for `yield_s`. `awaited`: a reader waits for them, so the source
        goes to the front of the queue — its pages are in the next batch (all of them while the reader
        holds `awaited(source)`), ahead of spaces nobody reads (under a steady write load the queue holds
        about the write-lag bound's worth of pages, which a read would otherwise wait behind). `trace`: the
        carrier of the run that stored the pages (`current_carrier`), which the batch embedding them links;
        at most `LARGEST_BATCH` wait per source (more than a span keeps links of)."""
        with self._cond:
            if self._closing:
                return
            if acknowledged:
                self._last_write = time.monotonic()
            self._arrivals += 1
            entry = self._queue.get(id(source))
            if isinstance(entry, QueuedSource):
                entry.stamp = self._arrivals
            else:
                entry = self._queue[id(source)] = QueuedSource(source, time.monotonic(), self._arrivals)
            if trace is not None and len(entry.carriers) < LARGEST_BATCH:
                entry.carriers.append(trace)
            if awaited:
                self._queue.move_to_end(id(source), last=False)
            self._cond.notify_all()

    def discard(self, source: PageSource) -> None:
        """`source` closed: its queue entry goes now, so the batcher holds no closed space (its pages
        still pending stay in the store, for its next open). A batch in flight with it is not requeued."""
        with self._cond:
            entry = self._queue.get(id(source))
            if isinstance(entry, QueuedSource) and entry.source is source:
                del self._queue[id(source)]

    @contextmanager
    def awaited(self, source: PageSource | None = None) -> Iterator[None]:
        """Held by whoever waits for pages to be embedded (a read, a flush): page batches do not give way
        to writes meanwhile, so a reader never waits behind the writes' priority. With `source`, the
        pages waited for are its: it goes first in the batches built meanwhile, with all its pages."""
        key = None if source is None else id(source)
        with self._cond:
            self._awaited += 1
            if key is not None:
                self._readers[key] = self._readers.get(key, 0) + 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._awaited -= 1
                if key is not None:
                    self._readers[key] -= 1
                    if not self._readers[key]:
                        del self._readers[key]

    def encode_texts(self, texts: Sequence[str]) -> "concurrent.futures.Future[np.ndarray]":
        """Vectors (len(texts), dim) of texts that are not pages, in input order, pooled into the page
        batches. After close the future fails with `BatcherClosedError`."""
        future: concurrent.futures.Future[np.ndarray] = concurrent.futures.Future()
        items = list(texts)
        if not items:
            future.set_result(np.zeros((0, self._embedder.dim), dtype=np.float32))
            return future
        with self._cond:
            closing = self._closing
            if not closing:
                request = TextRequest(items, future, time.monotonic())
                self._queue[id(request)] = request
                self._arrivals += 1
                self._requests += 1
                self._cond.notify_all()
        if closing:
            _resolve(future, error=BatcherClosedError("the embedding batcher is closed"))
        return future

    def encode_query(self, text: str) -> np.ndarray:
        """The vector of one query (`is_query=True`), encoded now on this thread, ahead of waiting pages.

        Works after close too: it needs no batcher thread.
        """
        with self._cond:
            self._queries_waiting += 1
            self._queries += 1
        try:
            vectors = self._embedder.encode([text], is_query=True)
        finally:
            with self._cond:
                self._queries_waiting -= 1
                if self._queries_waiting == 0:
                    self._cond.notify_all()
        return np.asarray(vectors)[0]

    def oldest_wait_s(self) -> float:
        """How long the longest-waiting space with pages to embed has waited (0 when none): the age of its
        oldest page not yet searchable, as a source stays queued until drained. A service worker holds back
        new writes while this grows, so that the queue in Redis, which the API bounds, shows the lag."""
        with self._cond:
            waiting = [
                entry.ready_at
                for entry in self._queue.values()
                if isinstance(entry, QueuedSource) and not entry.failures
            ]
        return max(0.0, time.monotonic() - min(waiting)) if waiting else 0.0

    def vectors_due_in_s(self, source: PageSource) -> float | None:
        """About how soon `source`'s pending pages can have vectors, by the recent batches' time a text:
        what is left of the batch in flight, then — unless the source is in it — one more batch of a text
        for each queued source (a source a reader waits for is at the front, and every waiting source gets
        at least a text of the next batch). None before the first batch: nothing to go by.

        Why: a bounded read (`SpaceWork.wait_embedded(stop_when_futile=True)`) stops waiting as soon as
        this says its vectors cannot come in time. Under a backlog on the CPU a batch takes over a second,
        and reads sat out their whole bound for vectors that came after it. The estimate leans early —
        a small batch costs more a text than the large ones it is learned from, and a source with many
        pending pages needs more than one batch — so an error costs a wait, as before, not a read's vectors.
        """
        with self._cond:
            if self._text_s is None:
                return None
            ahead = 0.0
            if self._in_flight is not None:
                started, texts, sources = self._in_flight
                ahead = max(0.0, self._text_s * texts - (time.monotonic() - started))
                if id(source) in sources:
                    return ahead
            queued = 0
            for entry in self._queue.values():  # counted up to a batch: thousands may wait
                queued += isinstance(entry, QueuedSource)
                if queued == self._max_size:
                    break
            return ahead + self._text_s * max(1, queued)

    def stats(self) -> BatcherStats:
        with self._cond:
            return BatcherStats(
                batches=self._batches,
                texts=self._texts,
                queries=self._queries,
                failures=self._failures,
                apply_failures=self._apply_failures,
                mean_batch_size=self._texts / self._batches if self._batches else 0.0,
                largest_batch=self._largest,
                tokens_estimated=self._tokens,
            )

    def close(self, timeout_s: float | None = None) -> None:
        """Stop taking work, let the batch in flight finish, stop the thread; idempotent. Queued pages stay
        pending in their stores; queued `encode_texts` futures fail with `BatcherClosedError`."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._fail_queued_requests()  # the thread takes nothing more: callers need not wait for the join
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("embedding batcher: the batch in flight did not finish within %s s", timeout_s)

    # --- the thread ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        lower_this_thread(self._nice)
        try:
            while True:
                batch = self._collect()
                if batch is None:
                    return
                self._process_timed(batch)
        except Exception as error:  # a bug here must not leave futures unresolved forever
            log.error("embedding batcher stopped by an internal error (%s)", type(error).__name__)
            with self._cond:
                self._closing = True
            self._fail_queued_requests()

    def _collect(self) -> Batch | None:
        """Wait for work, then take texts until the batch is full or `max_wait_ms` have passed since the
        oldest ready item; None once closing."""
        batch = Batch()
        with self._cond:
            while True:
                if self._closing:
                    return None
                now = time.monotonic()
                ready = [entry for entry in self._queue.values() if entry.ready_at <= now]
                if ready:
                    oldest = min(entry.ready_at for entry in ready)
                    held_until = self._held_until(ready, oldest, now)
                    if held_until is None:
                        deadline = oldest + self._max_wait_s
                        break
                    self._wait_while_held(held_until - now)
                    continue
                retries = [entry.ready_at for entry in self._queue.values()]
                self._cond.wait(min(retries) - now if retries else None)
        while True:
            with self._cond:
                seen = self._arrivals
            self._fill(batch)
            with self._cond:
                if self._closing:
                    closed = True
                else:
                    closed = False
                    remaining = deadline - time.monotonic()
                    if batch.full or not batch.texts or remaining <= 0:
                        return batch
                    self._wait_for_arrival(seen, remaining)
            if closed:  # texts in hand are dropped: their pages stay pending, their requests fail
                for part in batch.requests.values():
                    _resolve(part.request.future, error=BatcherClosedError("the embedding batcher is closed"))
                return None

    def _held_until(self, ready: list[QueuedWork], oldest: float, now: float) -> float | None:
        """With the lock held: until when the ready work gives way to acknowledged writes, or None to
        start a batch now (the rules in the module docstring)."""
        if self._awaited or any(isinstance(entry, TextRequest) for entry in ready):
            return None
        until = min(self._last_write + self._yield_s, oldest + self._yield_max_s)
        return until if until > now else None

    def _wait_while_held(self, timeout_s: float) -> None:
        """With the lock held: wait out a hold, or until a reader or a text request ends it. The writes
        that notify meanwhile wake this thread but not a scan of the queue, which holds every open space."""
        requests = self._requests
        self._cond.wait_for(
            lambda: self._closing or self._awaited > 0 or self._requests != requests, timeout_s
        )

    def _wait_for_arrival(self, seen: int, timeout_s: float) -> None:
        """With the lock held: wait until something arrives after `seen`, close, or the timeout."""
        self._cond.wait_for(lambda: self._closing or self._arrivals != seen, timeout_s)

    def _process_timed(self, batch: Batch) -> None:
        """`_process`, with the batch shown in flight meanwhile and its time a text learned after."""
        started = time.monotonic()
        with self._cond:
            self._in_flight = (started, len(batch.texts), frozenset(batch.sources))
        try:
            self._process(batch)
        finally:
            took = time.monotonic() - started
            with self._cond:
                self._in_flight = None
                if batch.texts:
                    latest = took / len(batch.texts)
                    mean = self._text_s
                    self._text_s = latest if mean is None else mean + TEXT_TIME_WEIGHT * (latest - mean)

    def _process(self, batch: Batch) -> None:
        """Encode the batch (after any waiting query), hand the vectors out, then requeue or drop each
        entry: drained sources leave, served ones go to the back, failed ones back off."""
        vectors: np.ndarray | None = None
        error: BaseException | None = None
        if batch.texts:
            with self._cond:
                self._cond.wait_for(lambda: self._queries_waiting == 0)
            vectors, error = self._encode(batch)
        outcomes: list[tuple[TextRequest, np.ndarray | None, BaseException | None]] = []
        for part in batch.sources.values():
            if part.error is not None or not part.page_ids:
                continue
            if vectors is None:
                part.error = error
                continue
            try:
                part.entry.source.apply_vectors(part.page_ids, vectors[part.indices])
            except Exception as apply_error:
                part.error = apply_error
                log.warning(
                    "embedding batcher: a source failed to store %d vectors (%s)",
                    len(part.page_ids),
                    type(apply_error).__name__,
                )
                with self._cond:
                    self._apply_failures += 1
        for request_part in batch.requests.values():
            request = request_part.request
            if not request_part.offsets:
                continue  # its next text did not fit: it waits for the next batch
            if vectors is None:
                request.failed = True
                outcomes.append((request, None, error))
                continue
            if request.vectors is None:
                request.vectors = np.empty((len(request.texts), vectors.shape[1]), dtype=np.float32)
            request.vectors[request_part.offsets] = vectors[request_part.indices]
            request.done += len(request_part.offsets)
            if request.done == len(request.texts):
                outcomes.append((request, request.vectors, None))
        for part in batch.sources.values():
            if part.error is not None:
                try:
                    part.entry.source.embedding_failed(part.error)
                except Exception as callback_error:
                    log.warning(
                        "embedding batcher: embedding_failed of a source raised %s",
                        type(callback_error).__name__,
                    )
        self._requeue(batch)
        for request, result, request_error in outcomes:
            _resolve(request.future, result, request_error)

    def _encode(self, batch: Batch) -> tuple[np.ndarray | None, BaseException | None]:
        """One encode call, longest text first, vectors back in batch order.

        Longest first is sentence-transformers' own order (it sorts so before cutting its sub-batches, so
        its sort finds nothing to move), and it runs the largest padded shape first: an out-of-memory error
        comes at the start of the call rather than after most of the work, and the CUDA allocator's first,
        largest blocks serve the smaller sub-batches after.
        """
        texts = batch.texts
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)  # stable
        with self._cond:
            self._batches += 1
            self._texts += len(texts)
            self._largest = max(self._largest, len(texts))
            self._tokens += batch.tokens
        try:
            with self._embed_span(batch):
                encoded = np.asarray(self._embedder.encode([texts[i] for i in order]), dtype=np.float32)
            if encoded.ndim != 2 or encoded.shape[0] != len(texts):
                raise ValueError(f"the embedder returned shape {encoded.shape} for {len(texts)} texts")
        except Exception as error:
            log.warning(
                "embedding batcher: a batch of %d texts (%d sources, %d requests) failed (%s); "
                "its sources retry after a backoff",
                len(texts),
                sum(1 for part in batch.sources.values() if part.page_ids),
                len(batch.requests),
                type(error).__name__,
            )
            with self._cond:
                self._failures += 1
            return None, error
        vectors = np.empty_like(encoded)
        vectors[order] = encoded
        log.debug(
            "embedding batcher: encoded %d texts (%d sources, %d requests, ~%d tokens)",
            len(texts),
            len(batch.sources),
            len(batch.requests),
            batch.tokens,
        )
        return vectors, None

    def _embed_span(self, batch: Batch) -> AbstractContextManager[object]:
        """The batch's `embed` span, linking the runs whose pages it holds; `NO_SPAN` with tracing off (one
        flag read) or when no run of a traced write is in it (consolidation's texts alone, say)."""
        if not tracing_enabled():
            return NO_SPAN
        with self._cond:
            carriers = [
                carrier
                for part in batch.sources.values()
                if part.page_ids
                for carrier in part.entry.carriers[: part.carriers_taken]
            ]
        if not carriers:
            return NO_SPAN
        attributes: dict[str, AttributeValue] = {
            GEN_AI_OPERATION: EMBEDDINGS,
            GEN_AI_REQUEST_MODEL: self._embedder.name,
            BATCH_SIZE: len(batch.texts),
            BATCH_TOKENS: batch.tokens,
        }
        return linked_span("embed", carriers, attributes)

    def _requeue(self, batch: Batch) -> None:
        with self._cond:
            now = time.monotonic()
            for key, part in batch.sources.items():
                entry = part.entry
                if self._queue.get(key) is not entry:
                    continue
                if part.error is not None:
                    entry.failures += 1
                    entry.ready_at = now + retry_delay_s(entry.failures)
                    self._queue.move_to_end(key)
                    continue
                if part.page_ids:
                    entry.failures = 0
                if part.drained:
                    del entry.carriers[: part.carriers_taken]  # their pages are all embedded
                if part.drained and part.stamp == entry.stamp:
                    del self._queue[key]
                elif part.page_ids:
                    self._queue.move_to_end(key)  # served: to the back
                    if key in self._readers:  # and behind the other readers' spaces
                        self._readers.move_to_end(key)
            for request_part in batch.requests.values():
                request = request_part.request
                key = id(request)
                if self._queue.get(key) is not request:
                    continue  # every text taken, or cancelled
                if request.failed:
                    del self._queue[key]
                elif request_part.offsets:
                    self._queue.move_to_end(key)  # served: to the back

    def _fail_queued_requests(self) -> None:
        with self._cond:
            requests = [entry for entry in self._queue.values() if isinstance(entry, TextRequest)]
            for request in requests:
                request.failed = True
                del self._queue[id(request)]
        for request in requests:
            _resolve(request.future, error=BatcherClosedError("the embedding batcher is closed"))
