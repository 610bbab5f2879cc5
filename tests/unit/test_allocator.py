"""The worker fixes glibc's mmap threshold so freed spaces' buffers go back to the system, and both the
worker and the embedded API give the heap's free pages back on a schedule (`services/allocator.py`). Each
probe runs in its own interpreter: the allocator is process-wide."""

import ctypes
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import services.allocator
from services.allocator import PeriodicTrim, fix_mmap_threshold
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from services.spaces.embedded import EmbeddedSpaces
from tests.support.api_server import offline_config

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
        ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc 2.33+ only
    except AttributeError:
        pytest.skip("not glibc (no mallinfo2): the worker leaves the allocator alone there")
    assert mmapped_blocks_of_100_kib("default") == 0  # from the heap: kept when freed
    assert mmapped_blocks_of_100_kib("fixed") > 0  # their own mappings: returned when freed


def test_zero_keeps_glibcs_default_the_worker_fixes_128_kib_and_the_embedded_api_nothing() -> None:
    assert fix_mmap_threshold(0) is False
    assert QueueSettings().worker_mmap_threshold_kb == 128  # over SQLite's per-query blocks
    assert ApiSettings().mmap_threshold_kb == 0  # measured worse under the embedded soak
    assert ApiSettings().allocator_trim_interval_s == QueueSettings().worker_allocator_trim_interval_s == 30


TRIM_PROBE = """
import ctypes, sys
from services.allocator import trim_free_memory

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

# 150 MB of 60 KiB blocks (heap, not mmap), touched; all freed but the last, which pins the heap's top,
# so the free space is a hole glibc keeps: what closed spaces leave between live objects.
size = 60 * 1024
blocks = [libc.malloc(size) for _ in range(2500)]
for block in blocks:
    libc.memset(block, 1, size)
for block in blocks[:-1]:
    libc.free(block)
held = rss_mb()
if sys.argv[1] == "trim":
    trim_free_memory()
print(held, rss_mb())
"""


def rss_after_freeing_a_hole(mode: str) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE, mode], cwd=ROOT, capture_output=True, text=True, check=True
    )
    held, after = done.stdout.split()
    return float(held), float(after)


def test_a_trim_gives_a_freed_hole_in_the_heap_back_to_the_system() -> None:
    if (
        not Path("/proc/self/statm").exists()
        or services.allocator._libc_function("malloc_trim", (ctypes.c_size_t,)) is None
    ):
        pytest.skip("not glibc on Linux: there is no malloc_trim, and trimming does nothing")
    held, after = rss_after_freeing_a_hole("none")
    assert after > held - 20, "glibc gave the hole back by itself: the probe no longer shows a hole"
    held, after = rss_after_freeing_a_hole("trim")
    assert after < held - 100, f"RSS {held:.0f} MB -> {after:.0f} MB after the trim"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_periodic_trim_runs_once_per_interval_and_never_at_zero() -> None:
    clock, trims = Clock(), []
    trim = PeriodicTrim(30, trim=lambda: trims.append(clock.now) or True, clock=clock)
    for now in (1000, 1029, 1030, 1031, 1059, 1060.5):
        clock.now = now
        trim()
    assert trims == [1030, 1060.5]
    never = PeriodicTrim(0, trim=lambda: trims.append(-1.0) or True, clock=clock)
    clock.now += 10_000
    assert never() is False and trims == [1030, 1060.5]
    with pytest.raises(ValueError, match="interval_s"):
        PeriodicTrim(-1)


@pytest.mark.parametrize(("interval_s", "expect_trims"), [(0.02, True), (0.0, False)])
def test_the_embedded_apis_maintenance_loop_trims_on_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval_s: float, expect_trims: bool
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(services.allocator, "trim_free_memory", lambda: trims.append(1) or True)
    settings = ApiSettings(port=0, sampler_interval_s=0.01, allocator_trim_interval_s=interval_s)
    spaces = EmbeddedSpaces(offline_config(tmp_path), settings)

    async def maintain_for_a_while() -> None:
        with anyio.move_on_after(0.5):
            await spaces.maintain()

    try:
        anyio.run(maintain_for_a_while)
    finally:
        spaces.close()
    assert (len(trims) >= 3) is expect_trims, trims
