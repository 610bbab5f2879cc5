"""`memoryos worker --processes N`: several worker processes on one host, so applying uses its cores.

One worker process applies its shards' writes on one thread: SQLite transactions, the engine's planning
and the scheduler are Python under one interpreter lock, and a host's other cores sat idle (about 300
turns/s applying alone on a 16-core GPU host, issue 38). N processes each run the whole worker
(`Worker`): the leases divide the shards between them exactly as between hosts, so per-space order,
exactly-once effect, read-your-writes, takeover and drain need nothing new. They share the host's GPU:
each loads the model once (MiniLM 90 MB, bge-m3 about 1.1 GB in fp16, and a CUDA context of about half a
GB each) and their batches interleave on the device.

The parent only supervises. It starts the children (spawned, never forked: a forked CUDA runtime is
unusable), gives child i the metrics port + i and, where the worker id is set, that id + "-i"; it starts
a child again when one exits while the parent runs (a crash, an out-of-memory kill), after a delay that
grows while children keep failing, so one that cannot start is not restarted in a loop; and on SIGTERM or
SIGINT it passes SIGTERM on and waits for every child to drain (each finishes its batch in flight,
releases its leases and closes its spaces).
"""

import argparse
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

from memoryos import backoff

log = logging.getLogger(__name__)

CHECK_EVERY_S = 0.5
"""How often the parent looks for a child that exited."""
RESTART_FIRST_S = 1.0
"""Delay before restarting a child that exited; doubled per exit in a row, up to `RESTART_MAX_S`."""
RESTART_MAX_S = 30.0
STABLE_AFTER_S = 60.0
"""A child that ran this long before it exited counts as a first failure again."""

ChildMain = Callable[[argparse.Namespace, int, Any], None]
"""What a child runs: (the command's arguments, its index, what the caller passes through)."""


class _Child:
    """One child slot: the process in it now, and how often it failed in a row."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: BaseProcess | None = None
        self.started_at = 0.0
        self.failures = 0
        self.restart_at = 0.0


def supervise(
    count: int, child_main: ChildMain, args: argparse.Namespace, passed: Any, stop: threading.Event
) -> None:
    """Run `count` children of `child_main(args, index, passed)` until `stop` is set, restarting any that
    exits meanwhile; then SIGTERM them all and wait for each to exit. `child_main` and `passed` must be
    importable and picklable (a spawned child imports them anew)."""
    context = multiprocessing.get_context("spawn")
    children = [_Child(index) for index in range(count)]

    def start(child: _Child) -> None:
        child.process = context.Process(
            target=child_main, args=(args, child.index, passed), name=f"memoryos-worker-{child.index}"
        )
        child.process.start()
        child.started_at = time.monotonic()

    for child in children:
        start(child)
    try:
        while not stop.wait(CHECK_EVERY_S):
            now = time.monotonic()
            for child in children:
                process = child.process
                if process is not None and not process.is_alive():
                    ran_s = now - child.started_at
                    child.failures = 1 if ran_s >= STABLE_AFTER_S else child.failures + 1
                    child.restart_at = now + backoff.delay_s(child.failures, RESTART_FIRST_S, RESTART_MAX_S)
                    log.warning(
                        "worker process %d exited (code %s) after %.0f s; restarted in %.0f s",
                        child.index,
                        process.exitcode,
                        ran_s,
                        child.restart_at - now,
                    )
                    child.process = None
                if child.process is None and now >= child.restart_at:
                    start(child)
    finally:
        running = [child.process for child in children if child.process is not None]
        for process in running:
            if process.is_alive():
                process.terminate()  # SIGTERM: the child drains
        for process in running:
            process.join()
