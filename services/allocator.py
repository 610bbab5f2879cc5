"""The C allocator of a process that opens and closes spaces all day (a worker, the embedded API): its mmap
threshold fixed, and its free pages given back on a schedule.

glibc serves an allocation at or above `M_MMAP_THRESHOLD` with its own mmap, returned to the system when
freed; smaller ones come from the heap, which returns memory only from its top. By default the threshold
rises to the size of each mmapped block freed, so a process closing evicted spaces (index arrays, vector
buffers, SQLite caches) pushes the next spaces' buffers into the heap between long-lived objects, where
they cannot be given back; setting the threshold explicitly turns that adjustment off (docs/service.md,
"One worker, 10,000 spaces"). Not glibc (musl, macOS): nothing is done.

Smaller blocks still come from the heap, and each thread that allocates gets an arena of its own: spaces
opened on one request thread and closed on another leave arenas full of free holes that glibc returns
only from a heap's top, so RSS climbs while the pool holds its budget (docs/reliability.md, "Load").
`PeriodicTrim` gives them back with `malloc_trim(0)` on a schedule.
"""

import ctypes
import ctypes.util
import functools
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
"""mallopt's parameter number in glibc's <malloc.h>."""


@functools.cache
def _libc_function(name: str, argtypes: tuple[type, ...]) -> Callable[..., int] | None:
    """glibc's `name` with its argument types, or None where the C library has none (musl, macOS)."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


def fix_mmap_threshold(threshold_bytes: int) -> bool:
    """Set glibc's mmap threshold (which also stops it from rising); 0 leaves glibc's dynamic default.

    Returns whether the allocator accepted it. Call it at process start, before the spaces' buffers are
    allocated: it applies to allocations made after it."""
    if threshold_bytes <= 0:
        return False
    mallopt = _libc_function("mallopt", (ctypes.c_int, ctypes.c_int))
    if mallopt is None:
        log.info("allocator: no mallopt here; the mmap threshold is left as it is")
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold_bytes))


def trim_free_memory() -> bool:
    """Give the free pages of every arena back to the system (glibc's `malloc_trim(0)`, which since 2.8
    releases whole free pages inside a heap, not only at its top). Returns whether any was released; False
    where there is no `malloc_trim` (not glibc)."""
    trim = _libc_function("malloc_trim", (ctypes.c_size_t,))
    return bool(trim(0)) if trim is not None else False


class PeriodicTrim:
    """`trim_free_memory` at most once per `interval_s` (0: never), for a loop that already wakes often.

    A trim walks every arena under its lock, so allocating threads wait for it (docs/reliability.md,
    "Load"), which is why it runs on a schedule rather than after every closed space."""

    def __init__(
        self,
        interval_s: float,
        trim: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`trim` defaults to `trim_free_memory`."""
        if interval_s < 0:
            raise ValueError(f"interval_s: expected 0 (never) or more seconds, got {interval_s}")
        self._interval_s = interval_s
        self._trim = trim or trim_free_memory
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        """Whether the interval has passed since the last trim (or since this was made)."""
        return bool(self._interval_s) and self._clock() - self._last >= self._interval_s

    def __call__(self) -> bool:
        """Trim if it is due; whether it did."""
        if not self.due():
            return False
        started = self._clock()
        self._trim()
        self._last = self._clock()
        log.debug("allocator trimmed", extra={"seconds": round(self._last - started, 4)})
        return True
