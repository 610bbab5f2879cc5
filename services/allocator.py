"""The C allocator's mmap threshold, fixed for a process that opens and closes spaces all day (a worker,
the embedded API).

glibc serves an allocation at or above `M_MMAP_THRESHOLD` with its own mmap, returned to the system when
freed; smaller ones come from the heap, which returns memory only from its top. The threshold starts at
128 KiB and, by default, rises to the size of each mmapped block freed (up to 32 MiB). A process closing
evicted spaces frees many such blocks (index arrays, vector buffers, SQLite caches), so the threshold
climbs and the next spaces' buffers land in the heap between long-lived objects, where they cannot be
given back: with a 256 MB pool budget, RSS levelled off at 798 MB instead of about 420
(`python -m bench.worker_spaces --spaces 1500 --budget-mb 256`, docs/service.md). Setting the threshold
explicitly turns that adjustment off. Not glibc (musl, macOS): nothing is done.
"""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
"""mallopt's parameter number in glibc's <malloc.h>."""


def fix_mmap_threshold(threshold_bytes: int) -> bool:
    """Set glibc's mmap threshold (which also stops it from rising); 0 leaves glibc's dynamic default.

    Returns whether the allocator accepted it. Call it at process start, before the spaces' buffers are
    allocated: it applies to allocations made after it."""
    if threshold_bytes <= 0:
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        log.info("allocator: no mallopt here; the mmap threshold is left as it is")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold_bytes))
