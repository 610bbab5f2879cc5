"""The worker fixes glibc's mmap threshold so freed spaces' buffers go back to the system
(`services/allocator.py`). Each probe runs in its own interpreter: the setting is process-wide."""

import subprocess
import sys
from pathlib import Path

import pytest

from services.allocator import fix_mmap_threshold
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import ctypes, sys
from services.allocator import fix_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold(64 * 1024)
before = libc.mallinfo2().hblks
# 100 KiB: under glibc's initial 128 KiB threshold, over the worker's 64 KiB. Fifty of them, since the
# threshold decides only once the heap's free top cannot hold a block.
blocks = [libc.malloc(100 * 1024) for _ in range(50)]
print(libc.mallinfo2().hblks - before)
for block in blocks:
    libc.free(block)
"""


def mmapped_blocks_of_100_kib(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_a_fixed_threshold_serves_mid_sized_blocks_by_mmap() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc 2.33+ only
    except AttributeError:
        pytest.skip("not glibc (no mallinfo2): the worker leaves the allocator alone there")
    assert mmapped_blocks_of_100_kib("default") == 0  # from the heap: kept when freed
    assert mmapped_blocks_of_100_kib("fixed") > 0  # their own mappings: returned when freed


def test_zero_keeps_glibcs_default_the_worker_fixes_64_kib_and_the_embedded_api_nothing() -> None:
    assert fix_mmap_threshold(0) is False
    assert QueueSettings().worker_mmap_threshold_kb == 64
    assert ApiSettings().mmap_threshold_kb == 0  # measured worse under the embedded soak
