"""The embedding batcher's next batch: the work waiting for it, and how much of each piece goes in.

`EmbeddingBatcher` (`batcher.py`) owns a thread that waits, encodes and hands vectors back; what goes
into a batch is decided here: first every source a reader waits for, all it has; then a fair share of
the room for every other waiting source or request, then the room left to those that had more, in FIFO
order, within `max_batch_size` texts and `max_batch_tokens` estimated tokens (the rules are in
`batcher.py`'s docstring). `BatchFilling` is the part of the batcher
that decides it; it reads the batcher's queue and limits under the batcher's lock.
"""

import concurrent.futures
import itertools
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from memoryos.embedding.base import estimate_tokens

log = logging.getLogger("memoryos.scheduler.batcher")
"""The batcher's logger: filling a batch is the batcher's work, and operators filter by that name."""


class PageSource(Protocol):
    """One space's pages waiting for vectors, as the batcher sees it. Called on the batcher thread."""

    def pending_texts(self, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` (page_id, text) of pages still without a vector, oldest first; [] when none."""
        ...

    def apply_vectors(self, page_ids: list[int], vectors: np.ndarray) -> None:
        """Store the vectors (row i for page_ids[i]); may raise."""
        ...

    def embedding_failed(self, error: BaseException) -> None:
        """The batch holding this source's pages failed; the source decides what its readers see."""
        ...


@dataclass(eq=False)
class QueuedSource:
    """A queued source. `stamp` changes on every notify: a source notified again after its pages were
    taken may have new ones. `ready_at` is when it was first notified, or when its backoff ends."""

    source: PageSource
    ready_at: float
    stamp: int
    failures: int = 0
    carriers: list[str] = field(default_factory=list)
    """The trace contexts of the runs whose pages wait here (`SpaceWork.pages_written`, tracing on only):
    the batch that embeds them links each. Dropped once a batch has taken every page."""


@dataclass(eq=False)
class TextRequest:
    """An `encode_texts` call; `taken` texts are in batches so far, `done` of them have vectors."""

    texts: list[str]
    future: "concurrent.futures.Future[np.ndarray]"
    ready_at: float
    taken: int = 0
    done: int = 0
    started: bool = False
    failed: bool = False
    vectors: np.ndarray | None = None


@dataclass(eq=False)
class SourcePart:
    """One source's share of a batch: its page ids and their positions in the batch."""

    entry: QueuedSource
    stamp: int
    page_ids: list[int] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    drained: bool = False
    """It returned fewer texts than asked and all were taken: nothing else was pending then."""
    error: BaseException | None = None
    carriers_taken: int = 0
    """How many of the entry's `carriers` were there when its pages were taken: the batch links those."""


@dataclass(eq=False)
class RequestPart:
    """One `encode_texts` request's share of a batch."""

    request: TextRequest
    offsets: list[int] = field(default_factory=list)
    """Positions of the texts in the request."""
    indices: list[int] = field(default_factory=list)
    """Positions of the same texts in the batch."""


@dataclass(eq=False)
class Batch:
    """A batch being built: its texts in batch order, their estimated tokens, and each work's share."""

    texts: list[str] = field(default_factory=list)
    tokens: int = 0
    full: bool = False
    """No more texts go in: a limit is reached, or a retried source is in it alone."""
    sources: dict[int, SourcePart] = field(default_factory=dict)
    requests: dict[int, RequestPart] = field(default_factory=dict)


QueuedWork = QueuedSource | TextRequest


class BatchFilling:
    """Takes texts into a batch for `EmbeddingBatcher`: a fair share for each waiting entry, then the
    room left, in FIFO order. Holds no state of its own: it works on the batcher's, declared here."""

    _cond: threading.Condition
    _queue: "OrderedDict[int, QueuedWork]"
    _readers: "OrderedDict[int, int]"
    _closing: bool
    _max_size: int
    _max_tokens: int
    _apply_failures: int

    def _fill(self, batch: Batch) -> None:
        """Take texts into `batch`: all they have for the sources readers wait for, then a fair share for
        each other entry not yet in it (or notified again since), then the room left to entries that had
        more, in FIFO order."""
        while True:
            with self._cond:
                if self._closing:
                    return
                first, complete = self._new_entries(batch)
                read = {id(entry) for entry in first if self._is_read(entry)}
            waiting = len(first)
            for entry in first:
                if batch.full or self._is_closing():
                    return
                share = max(1, (self._max_size - len(batch.texts)) // waiting)
                waiting -= 1
                if isinstance(entry, TextRequest):
                    self._take_request(batch, entry, share)
                elif entry.failures:  # retried after a failure: alone (`_new_entries` offers it only then)
                    self._take_source(batch, entry, self._max_size)
                    batch.full = bool(batch.texts)
                elif id(entry) in read:
                    self._take_source(batch, entry, self._max_size)
                else:
                    self._take_source(batch, entry, share)
            if complete or batch.full:
                break
        more: list[QueuedWork] = [
            part.entry for part in batch.sources.values() if not part.drained and part.error is None
        ]
        more += [part.request for part in batch.requests.values()]
        for entry in more:
            if batch.full or self._is_closing():
                return
            room = self._max_size - len(batch.texts)
            if isinstance(entry, QueuedSource):
                self._take_source(batch, entry, room)
            else:
                self._take_request(batch, entry, room)

    def _is_read(self, entry: QueuedWork) -> bool:
        """With the lock held: whether a reader waits for this source's vectors now."""
        return isinstance(entry, QueuedSource) and id(entry.source) in self._readers

    def _new_entries(self, batch: Batch) -> tuple[list[QueuedWork], bool]:
        """With the lock held: ready entries with nothing in `batch` yet (or notified again since) — the
        sources readers wait for first, in the order they began to wait, then the rest in FIFO order —
        and whether that is all of them. At most the batch's room is listed: beyond it every share is one
        text anyway, and a queue of thousands of spaces is not walked for each batch."""
        now = time.monotonic()
        room = self._max_size - len(batch.texts)
        found: list[QueuedWork] = []
        read = [self._queue[key] for key in self._readers if key in self._queue]
        others = (entry for entry in self._queue.values() if not self._is_read(entry))
        for entry in itertools.chain(read, others):
            if len(found) >= room:
                return found, False
            if entry.ready_at > now:
                continue  # backing off
            if isinstance(entry, TextRequest):
                if not entry.failed and id(entry) not in batch.requests:
                    found.append(entry)
                continue
            if entry.failures and (batch.texts or found):
                continue  # a source retried after a failure goes alone, into an empty batch
            part = batch.sources.get(id(entry.source))
            if part is None or (part.error is None and part.stamp != entry.stamp):
                found.append(entry)
                if entry.failures:
                    return found, False
        return found, True

    def _is_closing(self) -> bool:
        with self._cond:
            return self._closing

    def _take_source(self, batch: Batch, entry: QueuedSource, want: int) -> None:
        """Ask the source for up to `want` texts besides those the batch holds of it already (outside the
        lock: the source reads its store). A source found drained leaves the queue after the batch, so it is
        asked once, not once more to learn that it has nothing."""
        key = id(entry.source)
        with self._cond:
            stamp = entry.stamp  # read before asking: a notify meanwhile means it may have more
            carriers_taken = len(entry.carriers)
        part = batch.sources.get(key)
        if part is None:
            part = batch.sources[key] = SourcePart(entry, stamp)
        part.stamp = stamp
        part.carriers_taken = carriers_taken
        held = set(part.page_ids)
        asked = want + len(held) + 1  # one more than wanted says whether anything is left behind
        try:
            rows = entry.source.pending_texts(asked)
        except Exception as error:
            log.warning(
                "embedding batcher: a source failed to list its pending pages (%s)", type(error).__name__
            )
            part.error = error
            with self._cond:
                self._apply_failures += 1
            return
        fresh = [(page_id, text) for page_id, text in rows if page_id not in held][:want]
        taken = 0
        for page_id, text in fresh:
            tokens = estimate_tokens(text)
            if not self._fits(batch, tokens):
                batch.full = True
                break
            part.page_ids.append(page_id)
            part.indices.append(self._add(batch, text, tokens))
            taken += 1
            if batch.full:
                break
        part.drained = len(rows) < asked and taken == len(fresh)

    def _take_request(self, batch: Batch, request: TextRequest, want: int) -> None:
        with self._cond:
            if request.failed:
                return
            if not request.started:
                request.started = True
                if not request.future.set_running_or_notify_cancel():  # cancelled by its caller
                    self._queue.pop(id(request), None)
                    return
            part = batch.requests.setdefault(id(request), RequestPart(request))
            while request.taken < len(request.texts) and want > 0 and not batch.full:
                text = request.texts[request.taken]
                tokens = estimate_tokens(text)
                if not self._fits(batch, tokens):
                    batch.full = True
                    break
                part.offsets.append(request.taken)
                part.indices.append(self._add(batch, text, tokens))
                request.taken += 1
                want -= 1
            if request.taken == len(request.texts):
                self._queue.pop(id(request), None)

    def _fits(self, batch: Batch, tokens: int) -> bool:
        """Whether one more text fits; a text over the token budget alone still goes, in a batch of its own."""
        if not batch.texts:
            return True
        return len(batch.texts) < self._max_size and batch.tokens + tokens <= self._max_tokens

    def _add(self, batch: Batch, text: str, tokens: int) -> int:
        batch.texts.append(text)
        batch.tokens += tokens
        if len(batch.texts) >= self._max_size or batch.tokens >= self._max_tokens:
            batch.full = True
        return len(batch.texts) - 1
