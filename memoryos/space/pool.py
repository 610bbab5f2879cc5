"""`SpacePool`: the open memory spaces of one worker, least recently used closed first, within a budget.

A worker serving 100k users cannot hold every space open: each holds its vector index and score sample
in memory (the FAISS index about 0.8 KB per 384-d page) and, with Chroma, a client with its own threads.
The pool opens a space on first use through a caller-supplied factory (the service plugs in its own
construction) and, whenever the estimated resident bytes or the number of open spaces exceed their limits,
closes the least recently used idle spaces; `close()` snapshots the index, so reopening replays nothing.

What callers may rely on:
- `with pool.use(key) as space:` hands out the one open instance for `key`; it is never closed while any
  caller is inside `use` for it (a reference count). Two callers may use it at once; the space serializes
  its own writes.
- A key is never open twice: a caller arriving while its space is being opened or closed waits.
- Opening and closing run outside the pool's lock, so a slow open of one space does not stall others.
- The budget is soft: spaces in use are never closed, so it can be exceeded while they are all busy; it
  is enforced again as soon as they are released.
- A space found closed when released (`forget_user` erased it) is dropped, and the next use reopens.
- `with pool.closed_for(key):` closes the space (once its current users have left) and keeps it from
  opening until the block exits: for work that needs the space's files to itself in this process too
  (a reindex takes them exclusively, and an open instance holds them shared). Users arriving meanwhile
  wait; `use(key, on_wait=...)` lets a waiting caller do its own upkeep (a worker renews its leases).
"""

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from memoryos.space.memory_space import STORE_FILE

log = logging.getLogger(__name__)

SPACE_OVERHEAD_BYTES = 256 * 1024
"""Resident bytes of any open space besides its vectors and page cache: SQLite connection, Python objects
(checked against RSS: docs/indexes.md)."""
SQLITE_CACHE_MAX_BYTES = 2000 * 1024
"""SQLite's default page cache (`cache_size = -2000` KiB), which fills up to the size of the database."""
INDEX_BYTES_PER_DIM = 2
"""The FAISS index holds fp16 codes, the store's precision (`faiss_ivf.py`)."""
FLAT_BYTES_PER_VECTOR_EXTRA = 8
"""Beyond `dim * INDEX_BYTES_PER_DIM` bytes of codes per vector: its int64 id."""
IVF_BYTES_PER_VECTOR_EXTRA = 8 + 32
"""Beyond the codes: the int64 id stored in its list and the hashtable direct map entry that finds it."""
WAIT_SLICE_S = 0.25
"""A caller waiting for a key with an `on_wait` hook runs it at least this often."""


class SpaceKey(NamedTuple):
    tenant: str
    user_id: str
    assistant_id: str


class Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=Closable)


class _Entry(Generic[S]):
    __slots__ = ("refs", "resident_bytes", "space", "state")

    def __init__(self) -> None:
        self.space: S | None = None
        self.refs = 0
        self.resident_bytes = 0
        self.state = "opening"  # then "open", then "closing"


class SpacePool(Generic[S]):
    """An LRU of open spaces keyed by `SpaceKey`, bounded by estimated bytes and by count."""

    def __init__(
        self,
        open_space: Callable[[SpaceKey, bool], S],
        *,
        memory_budget_bytes: int,
        max_open: int = 10000,
        resident_bytes: Callable[[S], int] | None = None,
    ) -> None:
        """`open_space(key, create)` builds a space (e.g. a `Memoryos`), creating it only when `create`
        (the `use` that opens it says); `resident_bytes(space)` estimates what it holds in memory (default:
        `estimate_resident_bytes`), re-read each time the space is released."""
        if memory_budget_bytes <= 0:
            raise ValueError(f"memory_budget_bytes: expected a positive size, got {memory_budget_bytes}")
        if max_open <= 0:
            raise ValueError(f"max_open: expected a positive count, got {max_open}")
        self._open_space = open_space
        self._budget = memory_budget_bytes
        self._max_open = max_open
        self._resident_bytes: Callable[[S], int] = resident_bytes or estimate_resident_bytes
        self._entries: OrderedDict[SpaceKey, _Entry[S]] = OrderedDict()  # least recently used first
        self._live_count = 0  # entries not closing, and their resident bytes: kept as entries change, so
        self._live_bytes = 0  # a use costs the same with 10 or 10,000 spaces open
        self._changed = threading.Condition()
        self._closed = False
        self._held_closed: set[SpaceKey] = set()

    @contextmanager
    def use(
        self, key: SpaceKey, on_wait: Callable[[], None] | None = None, create: bool = True
    ) -> Iterator[S]:
        """The open space for `key`, opened on first use; it stays open until the block exits.

        `on_wait` runs, outside the pool's lock, while this caller waits for the key (being opened or
        closed by another caller, or held by `closed_for`), at least every `WAIT_SLICE_S`. `create` False
        (a read): if this use opens the space, it must exist — one erased while this caller waited (a
        forget's `closed_for`) is not made again."""
        entry, must_open = self._acquire(key, on_wait)
        if must_open:
            self._finish_opening(key, entry, create)
        assert entry.space is not None
        try:
            yield entry.space
        finally:
            self._release(key, entry)

    @contextmanager
    def closed_for(self, key: SpaceKey, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """The space for `key` closed (its snapshot written), and not opened again until the block exits.

        Waits for the callers inside `use(key)` to leave; callers arriving after this one wait until the
        block exits, then reopen the space. One `closed_for` per key at a time; never call it from inside
        `use(key)` (it would wait for itself). `on_wait` as `use`'s: run outside the lock while waiting."""
        while True:
            with self._changed:
                if self._closed:
                    raise RuntimeError("space pool is closed")
                if key not in self._held_closed:
                    self._held_closed.add(key)  # from here no new user of `key` gets in
                    break
                self._changed.wait(None if on_wait is None else WAIT_SLICE_S)
            if on_wait is not None:
                on_wait()
        try:
            victim: _Entry[S] | None = None
            while True:
                with self._changed:
                    entry = self._entries.get(key)
                    if entry is None:
                        break
                    if entry.state == "open" and entry.refs == 0:
                        self._retire(entry)
                        victim = entry
                        break
                    self._changed.wait(None if on_wait is None else WAIT_SLICE_S)  # in use, or opening
                if on_wait is not None:
                    on_wait()
            if victim is not None:
                self._close_all([(key, victim)])
            yield
        finally:
            with self._changed:
                self._held_closed.discard(key)
                self._changed.notify_all()

    def open_keys(self) -> list[SpaceKey]:
        """Keys of the open spaces, least recently used first."""
        with self._changed:
            return [key for key, entry in self._entries.items() if entry.state == "open"]

    def resident_bytes(self) -> int:
        """The estimated bytes of every space open or being opened."""
        with self._changed:
            return self._live_bytes

    def __len__(self) -> int:
        with self._changed:
            return self._live_count

    def close(self) -> None:
        """Refuse new uses, wait for current ones to finish, and close every open space."""
        with self._changed:
            self._closed = True
            while any(entry.refs or entry.state != "open" for entry in self._entries.values()):
                self._changed.wait()
            victims = list(self._entries.items())
            for _, entry in victims:
                self._retire(entry)
        self._close_all(victims)

    # --- internals ------------------------------------------------------------------------------------
    def _acquire(self, key: SpaceKey, on_wait: Callable[[], None] | None) -> tuple[_Entry[S], bool]:
        while True:
            with self._changed:
                if self._closed:
                    raise RuntimeError("space pool is closed")
                entry = self._entries.get(key)
                if key in self._held_closed:
                    pass  # kept closed (`closed_for`): wait below
                elif entry is None:
                    entry = _Entry()
                    entry.refs = 1
                    self._entries[key] = entry
                    self._live_count += 1
                    return entry, True
                elif entry.state == "open":
                    entry.refs += 1
                    self._entries.move_to_end(key)
                    return entry, False
                # being opened or closed by another caller, or held closed
                self._changed.wait(None if on_wait is None else WAIT_SLICE_S)
            if on_wait is not None:
                on_wait()

    def _finish_opening(self, key: SpaceKey, entry: _Entry[S], create: bool) -> None:
        space: S | None = None
        try:
            space = self._open_space(key, create)
            size = self._resident_bytes(space)
        except BaseException:
            if space is not None:
                space.close()
            with self._changed:
                del self._entries[key]
                self._live_count -= 1
                self._changed.notify_all()
            raise
        with self._changed:
            entry.space, entry.state = space, "open"
            self._resize(entry, size)
            self._changed.notify_all()
        log.debug("space opened", extra={"space": key, "resident_bytes": size})
        self._evict_over_limits()

    def _release(self, key: SpaceKey, entry: _Entry[S]) -> None:
        assert entry.space is not None
        closed_under_us = bool(getattr(entry.space, "closed", False)) or bool(
            getattr(getattr(entry.space, "space", None), "closed", False)
        )
        size = entry.resident_bytes
        try:
            size = 0 if closed_under_us else self._resident_bytes(entry.space)
        except Exception:
            log.exception("estimating a space's resident bytes failed", extra={"space": key})
        with self._changed:
            entry.refs -= 1
            self._resize(entry, size)
            if closed_under_us and entry.refs == 0 and self._entries.get(key) is entry:
                self._retire(entry)
                del self._entries[key]
            self._changed.notify_all()
        self._evict_over_limits()

    def _evict_over_limits(self) -> None:
        """Close least recently used idle spaces until the open ones fit the budget and the count."""
        victims: list[tuple[SpaceKey, _Entry[S]]] = []
        with self._changed:
            for key, entry in self._entries.items():
                if self._live_bytes <= self._budget and self._live_count <= self._max_open:
                    break
                if entry.state == "open" and entry.refs == 0:
                    self._retire(entry)
                    victims.append((key, entry))
            total, count = self._live_bytes, self._live_count
            if total > self._budget or count > self._max_open:
                log.info(
                    "space pool over its limits with every remaining space in use",
                    extra={"resident_bytes": total, "open": count, "budget_bytes": self._budget},
                )
        self._close_all(victims)

    def _retire(self, entry: _Entry[S]) -> None:
        """Mark an entry closing: it no longer counts toward the limits (the lock is held)."""
        entry.state = "closing"
        self._live_count -= 1
        self._live_bytes -= entry.resident_bytes

    def _resize(self, entry: _Entry[S], size: int) -> None:
        """Record an entry's new estimate of its resident bytes (the lock is held; never closing here)."""
        self._live_bytes += size - entry.resident_bytes
        entry.resident_bytes = size

    def _close_all(self, victims: list[tuple[SpaceKey, _Entry[S]]]) -> None:
        for key, entry in victims:
            try:
                if entry.space is not None:
                    entry.space.close()
            except Exception:
                log.exception("closing an evicted space failed", extra={"space": key})
            finally:
                with self._changed:
                    if self._entries.get(key) is entry:
                        del self._entries[key]
                    self._changed.notify_all()


def estimate_resident_bytes(space: Any) -> int:
    """Bytes a `Memoryos` or `MemorySpace` holds in memory: page index, score sample, SQLite cache, a fixed cost.

    The index is costed at what its kind stores per vector (fp16 codes plus ids and maps); an index
    that reports `resident_bytes()` itself (Chroma) is trusted. How close it comes to RSS: docs/indexes.md.
    """
    inner = getattr(space, "space", space)  # Memoryos wraps a MemorySpace
    total = SPACE_OVERHEAD_BYTES
    index = getattr(inner, "page_index", None)
    if index is not None:
        own = getattr(index, "resident_bytes", None)
        if callable(own):
            total += int(own())
        else:
            stats = index.stats() if callable(getattr(index, "stats", None)) else {}
            ivf = stats.get("kind") == "ivf"
            extra = IVF_BYTES_PER_VECTOR_EXTRA if ivf else FLAT_BYTES_PER_VECTOR_EXTRA
            total += index.count() * (index.dim * INDEX_BYTES_PER_DIM + extra)
            if ivf and stats.get("nlist"):
                total += int(stats["nlist"]) * index.dim * 4  # the coarse quantizer's centroids
    score_sample = getattr(inner, "score_sample", None)
    if callable(score_sample):
        total += int(score_sample().nbytes)  # the filled rows: untouched zeroed pages are not resident
    directory = getattr(inner, "directory", None)
    if isinstance(directory, Path):
        with contextlib.suppress(OSError):
            total += min(SQLITE_CACHE_MAX_BYTES, (directory / STORE_FILE).stat().st_size)
    return total
