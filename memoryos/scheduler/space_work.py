"""`SpaceWork`: what the scheduler does for one open space, and what its readers and writers wait for.

- **Pages**: a write stores its pages pending and tells the batcher; the batcher pulls the space's pending
  texts into a batch pooled with every other space's (`PageSource`) and hands back the vectors, applied
  here as one `EmbedPages` op.
- **Reads wait for vectors, not for consolidation**: `wait_embedded(through)` returns once every page up
  to `through` has its vector (and so is in the index). Chain and topic summaries, the profile and facts
  catch up behind, in consolidation passes.
- **Consolidation passes** run as coroutines on the scheduler's loop, one at a time per space: a write
  that arrives during a pass asks for another, and passes asked for meanwhile fold into one. Work that
  failed on the LLM backs off inside the consolidator (`Consolidator.retry_in_s`): later passes skip it
  rather than call a failing LLM on every write, a timer asks for a pass when the backoff ends, and
  nothing waits on it — reads and writes go on, and `flush` returns.
- **Visits** recorded by reads are buffered here and applied as one op at the start of the next pass:
  reads never write.
"""

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import numpy as np

from memoryos.embedding.base import Embedder
from memoryos.errors import (
    EmbeddingModelMismatchError,
    EmbeddingServerModelError,
    FencedOutError,
    SchedulerClosedError,
    StoreBusyError,
)
from memoryos.llm.base import AnswerRequest, MemoryLLM
from memoryos.planning.consolidation import Consolidator
from memoryos.planning.rebuild import next_expiry
from memoryos.space.memory_space import MemorySpace, removes_text_of
from memoryos.space.ops import AnyOp, EmbedPages, RecordVisits
from memoryos.storage.records.base import PassMarks, ReadMarks
from memoryos.tracing import current_carrier, tracing_enabled

if TYPE_CHECKING:
    from memoryos.scheduler import Scheduler
    from memoryos.scheduler.batcher import EmbeddingBatcher

log = logging.getLogger(__name__)


class SpaceWork:
    """The scheduler's handle on one open space. Thread-safe; `close` before closing the space."""

    def __init__(
        self,
        scheduler: "Scheduler",
        space: MemorySpace,
        embedder: Embedder,
        llm: MemoryLLM,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.space = space
        self._scheduler = scheduler
        self._batcher = scheduler.batcher(embedder)
        self._embedder_name = embedder.name
        self._clock = clock
        self._llm = llm
        # Functions of the scheduler's parts, not methods of self: a consolidator holding bound methods
        # made a cycle with this object, so a closed space's index, sample and SQLite connection waited
        # for the cyclic garbage collector (RSS climbed while a pool opened and closed spaces).
        self.consolidator = Consolidator(
            scheduler.pooled_llm(llm),
            functools.partial(_embed_in_batches, self._batcher),
            functools.partial(_apply_ops, scheduler),
            clock,
            backoff_max_s=space.config.llm_backoff_max_s,
        )
        self._changed = threading.Condition()
        self._embed_error: BaseException | None = None
        self._embed_failures = 0
        self._mismatch: EmbeddingModelMismatchError | EmbeddingServerModelError | None = None
        self._requested = 0  # consolidation passes asked for
        self._completed = 0  # passes finished (or skipped during a backoff)
        self._running = False
        self._retry_timer = False
        self._expiry_timer: float | None = None
        self._visits: list[int] = []
        self._visits_at = 0.0
        self._closed = False

    # --- pages: the batcher's side (`PageSource`) --------------------------------------------------------
    def pending_texts(self, limit: int) -> list[tuple[int, str]]:
        with self.space.lock:
            if self._closed or self.space.closed or self._mismatch is not None:
                return []  # a model of another dimension will not get better by retrying
            pages = self.space.pending_pages(limit)
        return [(page.page_id, page.text()) for page in pages]

    def apply_vectors(self, page_ids: list[int], vectors: np.ndarray) -> None:
        self._check_dim(vectors)
        with self.space.lock:
            if self.space.closed:
                return  # pending pages stay durable; the next open embeds them
            self.space.apply(EmbedPages(page_ids=page_ids, vectors=vectors, at=self._clock()))
        with self._changed:
            self._embed_error = None
            self._changed.notify_all()
        self.request_consolidation()

    def embedding_failed(self, error: BaseException) -> None:
        with self._changed:
            if isinstance(error, EmbeddingServerModelError):
                self._mismatch = (
                    error  # permanent, as `_check_dim`'s: the batcher stops asking (pending_texts)
                )
            self._embed_error = error
            self._embed_failures += 1
            self._changed.notify_all()

    def _check_dim(self, vectors: np.ndarray) -> None:
        """A model that names itself like the space's but yields another dimension is the same mismatch as
        another model name, and gets the same error; it is permanent, so the batcher stops asking."""
        if vectors.shape[1] != self.space.dim:
            self._mismatch = EmbeddingModelMismatchError(
                self.space.embedding_model, self.space.dim, self._embedder_name, vectors.shape[1]
            )
            raise self._mismatch

    # --- writers and readers ----------------------------------------------------------------------------
    def encode_query(self, text: str) -> np.ndarray:
        """The query's vector, ahead of every page waiting in the batcher."""
        vector = self._batcher.encode_query(text)
        self._check_dim(vector.reshape(1, -1))
        return vector

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """Vectors of texts that are not pages (an edited fact), pooled into the batcher's next batch."""
        vectors = self._batcher.encode_texts(texts).result()
        self._check_dim(vectors)
        return vectors

    def pages_written(self, acknowledged: bool = True) -> None:
        """New pending pages are stored: have the batcher embed them. `acknowledged`: a write being
        acknowledged now, which page batches give way to for a moment (`embedding_yield_ms`); pages found
        pending when the space opens are not.

        With tracing on, the current span's context (the worker's `apply batch` of the run that stored
        them) goes with them, so the batch that embeds them links that run."""
        trace = current_carrier() if tracing_enabled() else None
        self._batcher.notify(self, acknowledged=acknowledged, trace=trace)

    def wait_embedded(
        self,
        through_page_id: int,
        timeout_s: float | None = None,
        stop_when_futile: bool = False,
        marks: ReadMarks | None = None,
    ) -> bool:
        """Block until every page with an id up to `through_page_id` has its vector. Returns whether it
        looked at the store (and so whatever it holds may have moved since `marks`): False when `marks`
        answered.

        Each wait asks the batcher for the space's pending pages at once (pages another process stored
        are embedded here too if it has not done it yet), and raises the embedding error if a batch holding
        them fails meanwhile: a reader must not be served a partial state silently, and the next read tries
        again. `TimeoutError` after `timeout_s` — or, with `stop_when_futile` (a bounded read), as soon as
        the batcher's estimate puts the vectors beyond what is left of it (`vectors_due_in_s`).
        `marks`: the read's marks, just read (`MemorySpace.read_marks`): when they hold no page pending up
        to `through_page_id`, that is the answer, with no query of its own. Otherwise the pages are looked
        up again under the lock a batch's vectors notify under, so that no notification is missed.
        """
        if marks is not None and (marks.first_pending is None or marks.first_pending > through_page_id):
            return False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        asked = False
        with self._batcher.awaited(self), self._changed:
            failures_before = self._embed_failures
            while True:
                oldest = self.space.pending_page_ids(1)
                if not oldest or oldest[0] > through_page_id:
                    return True
                if self._mismatch is not None:
                    raise self._mismatch
                if self._embed_failures > failures_before and self._embed_error is not None:
                    raise self._embed_error
                if self._scheduler.closed:
                    raise SchedulerClosedError(
                        "the scheduler is closed: pages stay pending until the next open"
                    )
                if not asked:
                    self._batcher.notify(self, awaited=True)
                    asked = True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"pages not embedded within {timeout_s} s")
                if stop_when_futile and remaining is not None:
                    due = self._batcher.vectors_due_in_s(self)
                    if due is not None and due > remaining:
                        raise TimeoutError(
                            f"pages not embedded within {timeout_s} s: about {due:.2f} s ahead"
                        )
                self._changed.wait(0.5 if remaining is None else min(remaining, 0.5))

    def note_visits(self, segment_ids: list[int], at: float) -> None:
        """Segments a read returned pages of; applied as one `RecordVisits` by the next pass."""
        if segment_ids:
            with self._changed:
                self._visits.extend(segment_ids)
                self._visits_at = at

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every write so far is embedded and a consolidation pass started after this call has
        finished (work backing off after LLM failures is skipped by it: it holds nobody)."""
        self.wait_embedded(self.space.max_page_id(), timeout_s)
        ticket = self.request_consolidation()
        with self._changed:
            if not self._changed.wait_for(lambda: self._completed >= ticket or self._closed, timeout_s):
                raise TimeoutError(f"consolidation did not finish within {timeout_s} s")

    def answer(self, request: AnswerRequest) -> str:
        """The answer to a caller's question, under the same bound of LLM calls in flight as the passes
        (`llm_max_concurrency`, for the whole process): called outside it, answers and consolidation
        together sent more requests than an endpoint's slots (seen with a one-slot local model). Waits
        for a slot in turn with the passes' calls, as the endpoint's own queue would have."""
        return self._scheduler.submit(self.consolidator.llm.answer(request)).result()

    # --- consolidation ------------------------------------------------------------------------------------
    def request_consolidation(self) -> int:
        """Ask for a pass; returns its ticket (`flush` waits for it). Starts one unless one is running."""
        with self._changed:
            self._requested += 1
            ticket = self._requested
            if self._closed or self._running:
                return ticket
            self._running = True
        self._scheduler.submit(self._passes())
        return ticket

    async def _passes(self) -> None:
        """Run passes until none is asked for; then, if work is backing off, set a timer for its retry."""
        marks: PassMarks | None = None
        while True:
            with self._changed:
                target = self._requested
            marks = None
            try:
                await self._apply_visits()
                marks = await self.consolidator.run(self.space)
            except SchedulerClosedError:
                with self._changed:
                    self._running = False
                    self._changed.notify_all()
                return  # the process is exiting: what was not applied is replanned at the next open
            except FencedOutError as error:  # the shard moved on: its new owner consolidates the space
                log.warning("consolidation pass refused: shard %d has another owner", error.shard)
            except Exception:
                log.exception("consolidation pass failed", extra={"space": self.space.directory.name})
            with self._changed:
                self._completed = max(self._completed, target)
                self._changed.notify_all()
                if self._closed or self._requested == target:
                    self._running = False
                    self._changed.notify_all()
                    break
        self._retry_when_due()
        self._sweep_when_due(marks)

    def _sweep_when_due(self, marks: PassMarks | None) -> None:
        """The maintenance timer of expiry: a pass (which sweeps) when the next page or fact expires. A
        timer is set unless one already fires earlier; a pass that ends sets the next one. `marks`: the
        last pass's, when it applied nothing after reading them (their next expiry, with no read)."""
        with self._changed:
            if self._closed or self.space.closed:
                return
            due_at = next_expiry(self.space) if marks is None else marks.next_expiry
            if due_at is None or (self._expiry_timer is not None and self._expiry_timer <= due_at):
                return
            self._expiry_timer = due_at
        self._scheduler.call_later(max(0.0, due_at - self._clock()) + 0.01, lambda: self._sweep(due_at))

    def _sweep(self, due_at: float) -> None:
        with self._changed:
            if self._expiry_timer == due_at:
                self._expiry_timer = None
            if self._closed:
                return
        self.request_consolidation()

    def _retry_when_due(self) -> None:
        retry_in = self.consolidator.retry_in_s()
        with self._changed:
            if retry_in is None or self._retry_timer or self._closed:
                return
            self._retry_timer = True
        self._scheduler.call_later(retry_in + 0.01, self._retry)

    def _retry(self) -> None:
        with self._changed:
            self._retry_timer = False
            if self._closed:
                return
        self.request_consolidation()

    async def _apply_visits(self) -> None:
        with self._changed:
            visited, self._visits = self._visits, []  # one visit per read that returned the segment
            at = self._visits_at
        if visited:
            await self._apply(self.space, RecordVisits(segment_ids=visited, at=at))

    async def _apply(self, space: MemorySpace, op: AnyOp) -> list[list[int]]:
        return await _apply_ops(self._scheduler, space, op)

    def run_now(self, step: Callable[[Consolidator], Coroutine[Any, Any, None]]) -> None:
        """Run a consolidation coroutine made from this space's consolidator on the scheduler's loop and
        wait for it (`force_mid_term_analysis`)."""
        self._scheduler.submit(step(self.consolidator)).result()

    # --- closing ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Finish the space's work — its pages embedded and a last consolidation pass, as `flush` — then
        stop asking for more and apply the buffered visits. If embedding fails now, the pages stay pending
        (durable; the next open embeds them) and closing goes on."""
        if self._closed:
            return
        try:
            self.flush()
        except Exception as error:
            log.warning("pages left pending at close", extra={"error": type(error).__name__})
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.wait_for(lambda: not self._running or self._scheduler.closed)
            visited, self._visits = self._visits, []  # one visit per read that returned the segment
            at = self._visits_at
        self._scheduler.release_llm(self._llm)
        if visited and not self.space.closed:
            self.space.apply(RecordVisits(segment_ids=visited, at=at))
        self._batcher.discard(self)


async def _apply_ops(scheduler: "Scheduler", space: MemorySpace, *ops: AnyOp) -> list[list[int]]:
    """Ops applied together (one transaction), on the loop itself: handing each commit to a store thread
    and back costs more CPU (the interpreter lock changing hands between the loop, the store threads and
    the applying thread at every statement; docs/service.md) than a commit's fsync holds the loop on a
    local disk. Two kinds go to the store threads, which may wait: ops that may take text out (the
    space's files are scrubbed after them, work that grows with the space), and ops of a store another
    process is writing now (its transaction may last as long as its import or reindex)."""
    if not any(removes_text_of(op) for op in ops):
        with contextlib.suppress(StoreBusyError):
            return space.apply_ops(ops, wait_for_writers=False)
    return await scheduler.in_store_pool(space.apply_ops, ops)


async def _embed_in_batches(batcher: "EmbeddingBatcher", texts: list[str]) -> np.ndarray:
    """Consolidation's texts, pooled into the shared page batches."""
    return await asyncio.wrap_future(batcher.encode_texts(texts))
