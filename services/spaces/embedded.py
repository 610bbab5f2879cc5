"""`EmbeddedSpaces`: the open memory spaces of an embedded API process, and the calls made on them.

The engine is synchronous; every call runs on a thread of its own (`_on_thread`), so the event loop keeps
accepting requests while a space embeds or waits on SQLite. Spaces stay open in the engine's `SpacePool`
(least recently used closed beyond the memory budget), keyed by (tenant, user, assistant), and every open
space's background work runs on the process's one scheduler: a write is acknowledged when `add_memories`
returns (durable in SQLite), embedded after by the scheduler's batcher.

Reads never create a space: a read of a space that does not exist is `SpaceNotFoundError` (404) and
leaves nothing on disk. The pool opens a space on first use; whether that open may create it is decided
per call (`create`), which the pool hands to its factory.

Backlog and lag are measured here, for backpressure and `/metrics`, by a sampler every
`sampler_interval_s`: pages not yet embedded over every open space, and the age of the oldest
acknowledged write not yet searchable. Between samples, acknowledged pages are added to the last figure,
so a burst is refused before the next sample sees it.
"""

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio import to_thread

from memoryos import MemoryConfig, Memoryos
from memoryos.embedding.shared import shared_embedder
from memoryos.errors import SpaceNotFoundError
from memoryos.facade.memoryos import forget_space
from memoryos.portability.bundles import ImportReport, export_space, import_space
from memoryos.scheduler import shared_scheduler
from memoryos.scheduler.batcher import BatcherStats
from memoryos.space import tombstones
from memoryos.space.layout import STORE_FILE
from memoryos.space.ops import AddTurns
from memoryos.space.pool import SpaceKey, SpacePool
from services.allocator import PeriodicTrim
from services.queue.dead_letters import DeadLetter
from services.spaces.calls import OwnerCall, run_call
from services.spaces.protocol import BackpressureError, SpaceFigures, SpacesLimits, WritePlan
from services.spaces.write_shares import WriteShares

T = TypeVar("T")

log = logging.getLogger(__name__)

REQUEST_THREADS = 40
"""Threads that run engine calls for requests other than writes: anyio's default limit."""

WRITE_THREADS = 16
"""Threads that plan and store writes, apart from the rest. A read waits on its thread until the writes
before it are searchable (the engine's read contract), so while the embedder lags, reads can hold every
request thread, and a write queued behind them would wait for embedding to catch up (docs/reliability.md,
Load). Writes hold a thread for the store's commit only."""

MAX_TRACKED_WRITES = 10_000
"""Acknowledged writes remembered per space for the lag figure; beyond it the oldest are forgotten (the lag
then reads low rather than memory growing)."""


class EmbeddedSpaces:
    """Open spaces of this process, the calls on them, and their backlog. Thread-safe."""

    def __init__(self, config: MemoryConfig, settings: SpacesLimits, **parts: Any) -> None:
        """`config`: the engine's settings (its `tenant` is replaced per call); `parts` (embedder, llm,
        clock, scheduler) go to every `Memoryos` opened, as `Memoryos.from_config` takes them."""
        lag_bound = settings.max_write_lag_s
        if lag_bound and config.embedding_yield_ms and config.embedding_yield_max_s >= lag_bound:
            raise ValueError(
                f"MEMORYOS_EMBEDDING_YIELD_MAX_S ({config.embedding_yield_max_s:g}) must be below "
                f"MEMORYOS_API_MAX_WRITE_LAG_S ({lag_bound:g}): a burst of writes would hold its pages until "
                "the lag bound refuses writes; lower the first, or set MEMORYOS_EMBEDDING_YIELD_MS=0"
            )
        self.config = config
        self._settings = settings
        self.parts = parts
        self._tenant_configs: dict[str, MemoryConfig] = {}
        self._lock = threading.Lock()
        self._open: dict[SpaceKey, Memoryos] = {}
        self._acks: dict[SpaceKey, collections.deque[tuple[int, float]]] = {}
        self._sampled_pending = 0
        self._acked_since_sample = 0
        self.write_lag_s = 0.0
        self._threads = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="memoryos-request")
        self._write_threads = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="memoryos-write")
        self._shares = WriteShares()
        self._pool: SpacePool[Memoryos] = SpacePool(
            self._open_space,
            memory_budget_bytes=settings.memory_budget_mb * 1024 * 1024,
            max_open=settings.max_open_spaces,
        )

    def tenant_config(self, tenant: str) -> MemoryConfig:
        """The engine configuration for one tenant's spaces (`<data_dir>/<tenant>/...`)."""
        with self._lock:
            found = self._tenant_configs.get(tenant)
            if found is None:
                found = self._tenant_configs[tenant] = MemoryConfig.model_validate(
                    {**self.config.model_dump(), "tenant": tenant}
                )
            return found

    async def call(self, key: SpaceKey, call: OwnerCall[T], /, **args: Any) -> T:
        if call.creates:
            self.refuse_over_backlog()
        return await self.run(key, lambda memory: run_call(memory, call, args), create=call.creates)

    async def write(self, key: SpaceKey, plan: WritePlan) -> tuple[AddTurns, list[int]]:
        self._shares.admit_write(
            key, self.refuse_over_backlog, self._under_pressure(), self._settings.backpressure_retry_after()
        )
        op, page_ids = await self._on_thread(self._write_threads, self._plan_and_apply, key, plan)
        self.acknowledged(key, page_ids)
        return op, page_ids

    def _plan_and_apply(self, key: SpaceKey, plan: WritePlan) -> tuple[AddTurns, list[int]]:
        op = plan()  # before the space is opened: a refused write creates no space
        return op, self._call(key, lambda memory: memory.apply_write(op), True)

    async def acknowledged_unstored(self, key: SpaceKey, write_ids: list[str]) -> set[str]:
        return set()  # acknowledged here means stored in SQLite already

    async def forget(self, key: SpaceKey) -> bool:
        await self._on_thread(self._threads, self._forget, key)
        return True

    def _forget(self, key: SpaceKey) -> None:
        """Erase the space once no call is inside it, none let in until it is gone (`closed_for`): a read
        that came first answers from the space, one that comes after finds no space (404); erasing through
        an instance other calls are using would close their SQLite connection under them
        (docs/lifecycle.md). Without opening it: no model load; the shared embedding cache is emptied too. Its
        tombstone is written first, so a restored copy of the space is erased again at the next start
        (`memoryos/space/tombstones.py`)."""
        embedder = self.parts.get("embedder") or shared_embedder(self.config)
        config = self.tenant_config(key.tenant)
        with self._pool.closed_for(key):
            if (config.space_dir(key.user_id, key.assistant_id) / STORE_FILE).is_file():
                forgotten_at = time.time()  # the clock of writes' `at`
                tombstones.record(config, tombstones.digest(key), forgotten_at)
            forget_space(key.user_id, config, key.assistant_id, embedder)

    async def dead_letters(self, tenant: str, user_id: str | None, limit: int) -> list[DeadLetter]:
        return []

    async def export_bundle(self, key: SpaceKey, out: Path) -> None:
        """Exported while the pool holds the space in use, so a forget waits for the export instead of
        finding the space's files busy (a 503) or erasing them under it."""
        config = self.tenant_config(key.tenant)
        await self.run(key, lambda _: export_space(config, key.user_id, key.assistant_id, out))

    async def import_bundle(self, key: SpaceKey, bundle: Path) -> ImportReport:
        config, embedder = self.tenant_config(key.tenant), self.parts.get("embedder")
        return await to_thread.run_sync(
            lambda: import_space(config, key.user_id, key.assistant_id, bundle, embedder=embedder)
        )

    async def ready(self) -> bool:
        return True  # the model is loaded before the process says it is ready (`preload`)

    async def maintain(self) -> None:
        """Measure the backlog and the write lag every `sampler_interval_s`; give the C heap's free pages
        back every `allocator_trim_interval_s` (spaces closed by the pool leave holes in it)."""
        trim = PeriodicTrim(self._settings.allocator_trim_interval_s)
        while True:
            try:
                await to_thread.run_sync(self.sample)
            except Exception as error:  # a failed sample must not stop the next ones
                log.warning("backlog sample failed (%s)", type(error).__name__)
            if trim.due():  # checked here: a thread only when there is a trim to run
                await to_thread.run_sync(trim)
            await anyio.sleep(self._settings.sampler_interval_s)

    def figures(self) -> SpaceFigures:
        return SpaceFigures(self.backlog_pages(), self.write_lag_s, self.open_count(), self.batcher_stats())

    def _under_pressure(self) -> bool:
        """Past half of either backlog bound: spaces writing past their share are refused from here on
        (`write_shares.py`), before the bound refuses everyone."""
        max_lag = self._settings.max_write_lag_s
        return self.backlog_pages() * 2 >= self._settings.max_pending_pages or bool(
            max_lag and self.write_lag_s * 2 >= max_lag
        )

    def refuse_over_backlog(self) -> None:
        """`BackpressureError` while the embedding backlog is over its bounds — pages waiting, or the age of
        the oldest write waiting: memory stays bounded and reads stay short (each waits for the writes
        before it), and the client slows down, rather than pages piling up faster than the model embeds."""
        backlog, bound = self.backlog_pages(), self._settings.max_pending_pages
        if backlog >= bound:
            raise BackpressureError(
                f"{backlog} pages wait to be embedded (bound {bound}); retry later",
                self._settings.backpressure_retry_after(),
            )
        lag, max_lag = self.write_lag_s, self._settings.max_write_lag_s
        if max_lag and lag >= max_lag:
            raise BackpressureError(
                f"the oldest write waiting to be embedded was acknowledged {lag:.0f} s ago (bound {max_lag:g} "
                "s); retry later",
                self._settings.backpressure_retry_after(),
            )

    async def run(self, key: SpaceKey, work: Callable[[Memoryos], T], *, create: bool = False) -> T:
        """`work(memory)` on the space of `key`, on a worker thread. `create=False` (reads, edits): a space
        that does not exist is `SpaceNotFoundError`, and nothing is created."""
        return await self._on_thread(self._threads, self._call, key, work, create)

    @staticmethod
    async def _on_thread(threads: ThreadPoolExecutor, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on one of `threads`. A plain executor rather than `anyio.to_thread`: its hop costs
        the event loop less, on the path of every write, and the loop is what bounds the write rate on a
        few cores (docs/api.md, "The loop's share of a write")."""
        return await asyncio.get_running_loop().run_in_executor(threads, work, *args)

    def _call(self, key: SpaceKey, work: Callable[[Memoryos], T], create: bool) -> T:
        if not create and not self._is_open(key):
            directory = self.tenant_config(key.tenant).space_dir(key.user_id, key.assistant_id)
            if not (directory / STORE_FILE).is_file():
                raise SpaceNotFoundError(directory)  # without touching the pool
        with self._pool.use(key, create=create) as memory:
            return work(memory)

    def _is_open(self, key: SpaceKey) -> bool:
        with self._lock:
            memory = self._open.get(key)
        return memory is not None and not memory.space.closed

    def _open_space(self, key: SpaceKey, create: bool) -> Memoryos:
        """The pool's factory: `create` as the `use` that opens the space says."""
        memory = Memoryos.from_config(
            key.user_id, self.tenant_config(key.tenant), key.assistant_id, create=create, **self.parts
        )
        with self._lock:
            self._open[key] = memory
        return memory

    # --- backlog, lag and the embedder's batches ------------------------------------------------------------
    def acknowledged(self, key: SpaceKey, page_ids: list[int]) -> None:
        """A write to `key` was acknowledged with these pages: count them until the next sample sees them."""
        if not page_ids:
            return
        now = time.monotonic()
        with self._lock:
            self._acked_since_sample += len(page_ids)
            acks = self._acks.setdefault(key, collections.deque(maxlen=MAX_TRACKED_WRITES))
            acks.append((max(page_ids), now))

    def backlog_pages(self) -> int:
        """Pages acknowledged but not yet embedded, over every open space (as of the last sample, plus the
        pages acknowledged since)."""
        with self._lock:
            return self._sampled_pending + self._acked_since_sample

    def sample(self) -> None:
        """Measure the backlog and the write lag now (blocking: one indexed query per open space)."""
        with self._lock:
            spaces = list(self._open.items())
            acked_before = self._acked_since_sample
        pending_total, oldest_ack = 0, None
        now = time.monotonic()
        gone: list[SpaceKey] = []
        for key, memory in spaces:
            try:
                if memory.space.closed:
                    gone.append(key)
                    continue
                pending = memory.space.pending_page_count()
                first_pending = memory.space.pending_page_ids(1) if pending else []
            except Exception:  # closed under us by eviction or a forget: measured next time, if reopened
                gone.append(key)
                continue
            pending_total += pending
            with self._lock:
                acks = self._acks.get(key)
                if acks is None:
                    continue
                while acks and (not first_pending or acks[0][0] < first_pending[0]):
                    acks.popleft()  # every page of that write is embedded
                if acks:
                    oldest_ack = acks[0][1] if oldest_ack is None else min(oldest_ack, acks[0][1])
        with self._lock:
            for key in gone:
                if self._open.get(key) is not None and self._open[key].space.closed:
                    del self._open[key]
                    self._acks.pop(key, None)
            self._sampled_pending = pending_total
            self._acked_since_sample -= acked_before
            self.write_lag_s = 0.0 if oldest_ack is None else now - oldest_ack

    def open_count(self) -> int:
        return len(self._pool)

    def batcher_stats(self) -> BatcherStats | None:
        """The embedding batcher's counters, once a space has been opened (else None: no model loaded)."""
        with self._lock:
            memory = next(iter(self._open.values()), None)
        if memory is None:
            return None
        scheduler = self.parts.get("scheduler") or shared_scheduler(self.config)
        return scheduler.batcher(memory.embedder).stats()

    def preload(self) -> None:
        """Load the embedding model now (blocking), so the first request does not wait seconds for it."""
        if "embedder" not in self.parts:
            shared_embedder(self.config).encode(["warm-up"], is_query=True)

    def close(self) -> None:
        """Close every open space (pending pages stay durable; the next start embeds them), once the calls
        running on them have returned."""
        self._write_threads.shutdown(wait=True)
        self._threads.shutdown(wait=True)
        self._pool.close()
