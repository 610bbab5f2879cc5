"""One scheduler per process: the background work of every open space, in a handful of threads.

A worker serving thousands of users from one GPU needs every space's work to meet in one place, and an
embedded process with many `Memoryos` instances should not run a thread per space. The scheduler holds:

- one `EmbeddingBatcher` thread per embedding model (`batcher.py`): the pending pages of all spaces, and
  the fact texts consolidation needs, encoded in shared batches; queries go ahead of pages;
- one asyncio event-loop thread running every space's consolidation passes (`space_work.py`), whose LLM
  calls share one bound of `llm_max_concurrency` calls in flight, with a timeout each;
- a small pool of `scheduler_store_threads` threads for the consolidation ops the loop must not wait on:
  those whose space another process is writing, and those after which the space's files are scrubbed
  (the loop applies the others itself: `space_work._apply_ops`).

All of them run `background_nice` lower than the caller's threads (`priority.py`).

`Memoryos`, the embedded `memoryos serve` and the service worker all run this scheduler; the service only
feeds it from Redis. `shared_scheduler()` is the process's instance, created on first use with that
caller's settings and closed at interpreter exit, so no scheduler thread is inside PyTorch while the
interpreter tears down.

A script that ends without closing its `Memoryos` must end quietly and lose nothing. Interpreter exit
first shuts every thread pool down (concurrent.futures registers that with `threading._register_atexit`),
and only then runs `atexit` hooks: a consolidation pass still running at that point had its LLM call fail
("cannot schedule new futures after interpreter shutdown"), logged a traceback, and left a pending task
behind ("Task was destroyed but it is pending!"). So the shared scheduler closes in the same hook list,
registered after the pools' and therefore run before them, and closing cancels the passes in flight: what
they had not applied is planned again at the next open, and every page is already stored. The passes are
cancelled before the embedding batchers close, and a pass that meets a closed batcher anyway (one asked for
by the last batch) ends as quietly as one that meets the closed scheduler (`BatcherClosedError` is a
`SchedulerClosedError`): a pass awaiting its fact texts'
vectors used to fail with `BatcherClosedError` and print a traceback at exit.
"""

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.errors import SchedulerClosedError
from memoryos.llm.async_adapters import LimitedLLM, as_async, call_deadline_s
from memoryos.llm.base import AsyncMemoryLLM, MemoryLLM
from memoryos.scheduler.batcher import BatcherStats, EmbeddingBatcher
from memoryos.scheduler.priority import lower_this_thread

T = TypeVar("T")


@dataclass
class _PooledLLM:
    llm: MemoryLLM  # held, so its id is not reused while the entry lives
    limited: AsyncMemoryLLM
    users: int = 0


class Scheduler:
    """The process's background workers; every open space registers a `SpaceWork` with it."""

    def __init__(self, config: MemoryConfig, name: str = "memoryos") -> None:
        """Batching and concurrency settings come from `config`: one scheduler serves every space, so the
        first opener's settings apply to all (a service configures its worker's)."""
        self._config = config
        self._name = name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"{name}-scheduler", daemon=True)
        self._thread.start()
        self._store_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.scheduler_store_threads,
            thread_name_prefix=f"{name}-store",
            initializer=lower_this_thread,
            initargs=(config.background_nice,),
        )
        self._lock = threading.Lock()
        self._batchers: dict[int, tuple[Embedder, EmbeddingBatcher]] = {}
        self._llms: dict[int, _PooledLLM] = {}
        self._llm_slots = LimitedLLM.shared_slots(config.llm_max_concurrency)
        self._closed = False

    def _run_loop(self) -> None:
        lower_this_thread(self._config.background_nice)
        self._loop.run_forever()

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def llm_requests_in_flight(self) -> int:
        """LLM calls of every space running now (bounded by `llm_max_concurrency`): a service's gauge."""
        return self._llm_slots.in_flight

    @property
    def pooled_backends(self) -> int:
        """LLM backends with a wrapper held for the spaces using them (a leak shows here)."""
        with self._lock:
            return len(self._llms)

    def embedding_lag_s(self) -> float:
        """The longest any space has waited for its pages to be embedded, over every batcher (0: none)."""
        with self._lock:
            batchers = [batcher for _, batcher in self._batchers.values()]
        return max((batcher.oldest_wait_s() for batcher in batchers), default=0.0)

    def batcher_stats(self) -> list[BatcherStats]:
        """The counters of each model's batcher (batches, texts, tokens): a service's metrics."""
        with self._lock:
            batchers = [batcher for _, batcher in self._batchers.values()]
        return [batcher.stats() for batcher in batchers]

    def batcher(self, embedder: Embedder) -> EmbeddingBatcher:
        """The batcher of this embedder (one thread per model, shared by every space using it)."""
        with self._lock:
            self._require_open()
            found = self._batchers.get(id(embedder))
            if found is None:
                batcher = EmbeddingBatcher(
                    embedder,
                    max_batch_size=self._config.embedding_batch_size,
                    max_batch_tokens=self._config.embedding_max_batch_tokens,
                    max_wait_ms=self._config.embedding_max_wait_ms,
                    name=f"{self._name}-embed-{len(self._batchers)}",
                    nice=self._config.background_nice,
                    yield_s=self._config.embedding_yield_ms / 1000.0,
                    yield_max_s=self._config.embedding_yield_max_s,
                )
                found = self._batchers[id(embedder)] = (embedder, batcher)
            return found[1]

    def pooled_llm(self, llm: MemoryLLM) -> AsyncMemoryLLM:
        """`llm` as an async backend whose calls share the process's bound of calls in flight: one wrapper
        per backend while any space uses it. Each call is matched by one `release_llm` when that space
        closes."""
        with self._lock:
            found = self._llms.get(id(llm))
            if found is None:
                limited = LimitedLLM(
                    as_async(llm), slots=self._llm_slots, timeout_s=call_deadline_s(self._config)
                )
                found = _PooledLLM(llm, limited)
                self._llms[id(llm)] = found
            found.users += 1
            return found.limited

    def release_llm(self, llm: MemoryLLM) -> None:
        """A space using `llm` closed; the wrapper goes with its last user. A worker opens and closes
        thousands of spaces, each `Memoryos` with a backend of its own unless one is shared: kept, every
        wrapper stayed for the process's life."""
        with self._lock:
            found = self._llms.get(id(llm))
            if found is not None and found.llm is llm:
                found.users -= 1
                if found.users <= 0:
                    del self._llms[id(llm)]

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Run a coroutine on the scheduler's loop; the future resolves with its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    async def in_store_pool(self, function: Callable[..., T], *args: Any) -> T:
        """Run store work that may wait long (another process's write transaction) off the loop, on the
        store threads.

        Raises `SchedulerClosedError` once the scheduler closes — or the interpreter exits, which shuts
        every thread pool down before atexit hooks run: a pass cut there is left for the next open."""
        try:
            future = self._loop.run_in_executor(self._store_pool, function, *args)
        except RuntimeError as error:  # "cannot schedule new futures after shutdown"
            raise SchedulerClosedError("the scheduler is shutting down") from error
        return await future

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> None:
        """Call `callback` on the loop after `delay_s` (a space's retry after a backoff)."""
        self._loop.call_soon_threadsafe(self._loop.call_later, delay_s, callback)

    def threads(self) -> list[threading.Thread]:
        """The Python threads this scheduler runs now (tests and metrics)."""
        prefix = f"{self._name}-"
        return [t for t in threading.enumerate() if t.name.startswith(prefix)]

    def _require_open(self) -> None:
        if self._closed:
            raise SchedulerClosedError("the scheduler is closed")

    def close(self) -> None:
        """Stop every batcher (the batch in flight finishes), the loop and the store threads; idempotent.
        Pages still pending stay durable in their stores."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            batchers = [batcher for _, batcher in self._batchers.values()]
        # Passes still running (a process exiting with spaces open) are cancelled, not left pending: a
        # cancelled pass is a crash between two commits, which the next open replans. Before the batchers
        # close: a pass awaiting its fact texts' vectors then failed with BatcherClosedError and logged a
        # traceback at interpreter exit. Once more after: the batch in flight finishing may ask for a pass.
        self._cancel_passes()
        for batcher in batchers:
            batcher.close()
        self._cancel_passes()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._store_pool.shutdown(wait=True)

    def _cancel_passes(self) -> None:
        cancelled = asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), self._loop)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            cancelled.result(timeout=CLOSE_CANCEL_TIMEOUT_S)


CLOSE_CANCEL_TIMEOUT_S = 10.0
"""How long closing waits for cancelled passes to unwind (an LLM call returns at once on cancel; a store
commit in flight is waited for by the pool's shutdown anyway)."""


async def _cancel_other_tasks() -> None:
    """Cancel every task on the running loop but this one, and wait until they have ended."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _at_interpreter_exit(function: Callable[[], None]) -> None:
    """Run `function` at exit while thread pools still take work: in threading's exit hooks, which run
    in reverse order of registration, so after the pools' own (registered when concurrent.futures was
    imported) have not yet shut them. Plain `atexit` where that private hook list does not exist."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        atexit.register(function)
    else:
        register(function)


_shared: Scheduler | None = None
_shared_lock = threading.Lock()


def shared_scheduler(config: MemoryConfig) -> Scheduler:
    """The process's scheduler, created on first use and closed at interpreter exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Scheduler(config)
            _at_interpreter_exit(_shared.close)
        return _shared
