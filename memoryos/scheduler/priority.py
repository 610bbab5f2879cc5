"""Background threads yield the CPU to the threads that answer callers.

On a machine with few cores the embedding batcher can keep every core busy for minutes after a burst of
writes, and a write's acknowledgement or a read then waits for a core behind it. Raising the nice value of
the scheduler's own threads (Linux keeps one per thread) lets the kernel run request threads first while
the background work still gets every idle cycle: nothing is slower when cores are free.
"""

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

MAX_NICE = 19


def lower_this_thread(increment: int) -> bool:
    """Run the calling thread `increment` nice levels below the process's main thread (capped at 19). A
    thread inherits its creator's nice value, so the target is taken from the main thread, not from this
    thread: a store thread started by the (already lowered) loop thread is not lowered twice. Linux only:
    elsewhere `setpriority` would renice the whole process. Returns whether the thread now runs lower."""
    if increment <= 0 or sys.platform != "linux":
        return False
    thread = threading.get_native_id()
    try:
        target = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, os.getpid()) + increment)
        if os.getpriority(os.PRIO_PROCESS, thread) < target:
            os.setpriority(os.PRIO_PROCESS, thread, target)
    except OSError as error:  # a sandbox may refuse it; the thread then runs at the caller's priority
        log.debug("could not lower a background thread's priority (%s)", error)
        return False
    return True
