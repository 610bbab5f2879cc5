"""`BackgroundIngestor`: the embedded mode's in-process queue worker.

`add_memory` stores a page durably without its vector and returns; this thread embeds pending pages in
batches (several adds share one model call) and runs consolidation, off the caller's path. Reads call
`flush()` first, so a caller always sees its own writes. The service replaces this thread with Redis and
a GPU worker; the work function is the same.
"""

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class BackgroundIngestor:
    """Runs `step` on a daemon thread until it reports no more work, each time it is notified.

    `step()` returns True when it did something (call it again), False when there is nothing pending.
    A failing step is logged and retried on the next notification; `flush` re-raises the failure so a
    reader is not silently served a partial state.
    """

    def __init__(self, step: Callable[[], bool], name: str = "memoryos-ingest") -> None:
        self._step = step
        self._condition = threading.Condition()
        self._requested = 0
        self._completed = 0
        self._error: BaseException | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """Ask for a pass over pending work."""
        with self._condition:
            self._requested += 1
            self._condition.notify_all()

    def flush(self, timeout_s: float | None = None) -> None:
        """Request a pass and wait for it (and every earlier one); raise the error of a failed pass."""
        self.notify()
        self.wait(timeout_s)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait until every pass requested so far has run; raise the error of a failed pass."""
        with self._condition:
            target = self._requested
            if not self._condition.wait_for(lambda: self._completed >= target or self._stopping, timeout_s):
                raise TimeoutError(f"background ingest did not finish within {timeout_s} s")
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Finish the work requested so far, then stop the thread."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._requested > self._completed or self._stopping)
                target, stopping = self._requested, self._stopping
            error = self._drain()
            with self._condition:
                if error is not None:
                    self._error = error
                self._completed = target
                self._condition.notify_all()
            if stopping:
                return

    def _drain(self) -> BaseException | None:
        try:
            while self._step():
                pass
        except Exception as error:
            log.warning(
                "background ingest step failed; pending pages stay pending", extra={"error": str(error)}
            )
            return error
        return None
