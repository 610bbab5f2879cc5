"""The scheduler's threads run at a lower priority than the threads answering callers (Linux nice), so a
write's acknowledgement or a read is not queued behind a backlog being embedded."""

import os
import sys
import threading

import pytest

from memoryos.config import MemoryConfig
from memoryos.scheduler import Scheduler
from memoryos.scheduler.priority import MAX_NICE, lower_this_thread
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are Linux's")


def nice_of(thread_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, thread_id)


def nice_after(increment: int) -> tuple[bool, int]:
    """Whether `lower_this_thread(increment)` lowered a fresh thread, and that thread's nice value."""
    seen: list[tuple[bool, int]] = []

    def run() -> None:
        lowered = lower_this_thread(increment)
        seen.append((lowered, nice_of(threading.get_native_id())))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen[0]


def test_lowering_a_thread_raises_only_its_own_nice_value_capped_at_19() -> None:
    base = nice_of(os.getpid())
    assert nice_after(3) == (True, min(MAX_NICE, base + 3))
    assert nice_after(100) == (True, MAX_NICE)
    assert nice_after(0) == (False, base)
    assert nice_of(threading.get_native_id()) == base, "the caller's thread keeps its priority"
    lowered_twice: list[int] = []

    def lowered_thread_starting_another() -> None:
        lower_this_thread(3)
        child = threading.Thread(
            target=lambda: (lower_this_thread(3), lowered_twice.append(nice_of(threading.get_native_id())))
        )
        child.start()
        child.join()

    parent = threading.Thread(target=lowered_thread_starting_another)
    parent.start()
    parent.join()
    assert lowered_twice == [min(MAX_NICE, base + 3)], (
        "a thread started by a lowered one is not lowered twice"
    )


def test_the_batcher_loop_and_store_threads_run_background_nice_lower_than_the_caller() -> None:
    base = nice_of(os.getpid())
    scheduler = Scheduler(MemoryConfig(background_nice=7, embedding_max_wait_ms=1.0), name="test-nice")
    try:
        batcher = scheduler.batcher(HashEmbedder())
        batcher.encode_texts(["a page"])  # the batcher's thread has run
        scheduler.submit(scheduler.in_store_pool(lambda: None)).result(timeout=10)  # a store thread too
        threads = scheduler.threads()
        names = {thread.name.split("-")[2].rstrip("_0123456789") for thread in threads}
        assert names == {"scheduler", "store", "embed"}
        assert {t.name: nice_of(t.native_id) for t in threads if t.native_id} == {
            t.name: min(MAX_NICE, base + 7) for t in threads
        }
        assert nice_of(threading.get_native_id()) == base, "the caller's thread keeps its priority"
    finally:
        scheduler.close()


def test_background_nice_0_keeps_one_priority_for_all() -> None:
    base = nice_of(os.getpid())
    scheduler = Scheduler(MemoryConfig(background_nice=0, embedding_max_wait_ms=1.0), name="test-flat")
    try:
        scheduler.batcher(HashEmbedder()).encode_texts(["a page"])
        assert {nice_of(t.native_id) for t in scheduler.threads() if t.native_id} == {base}
    finally:
        scheduler.close()
