"""`memoryos worker --processes N`: several worker processes on one host, so applying uses its cores.

One worker process applies its shards' writes on one thread: SQLite transactions, the engine's planning
and the scheduler are Python under one interpreter lock, so a host's other cores would sit idle
(docs/service.md, "Several worker processes per host"). N processes each run the whole worker
(`Worker`): the leases divide the shards between them exactly as between hosts, so per-space order,
exactly-once effect, read-your-writes, takeover and drain need nothing new. They share one embedding
engine (`memoryos/embedding/engine/`), a child of its own: the model and its CUDA context are loaded
once, and their texts meet in its batches.
`MEMORYOS_WORKER_EMBEDDING_ENGINE=false` gives each child its own model again.

The parent only supervises. It starts the children (spawned, never forked: a forked CUDA runtime is
unusable), gives child i the metrics port + i and, where the worker id is set, that id + "-i"; it starts
a child again when one exits while the parent runs (a crash, an out-of-memory kill), after a delay that
grows while children keep failing. A child that exits `max_failures` times within `failure_window_s`
fails no better for being started again (no GPU, a broken driver, a user's space too large for the
memory): the parent stops every child and raises `ChildKeepsFailingError`, and `memoryos worker` exits 1
so that the container's restart policy, not this loop, acts. Every exit in the window counts, however
long the child ran: a child that ran a minute before it exited used to count as a first failure again,
so one killed for memory every 61 s was restarted forever and the pod never failed. A long run only
resets the restart delay. On SIGTERM or SIGINT it passes SIGTERM on and waits for every child to drain
(each finishes its batch in flight, releases its leases and closes its spaces).

The engine can also stop embedding without exiting: a model that raises on every batch (a sticky CUDA
error), or a stopped or wedged process that accepts connections and answers none. With an `EngineWatch`
the loop probes the engine every `engine_check_every_s` (`memoryos/embedding/engine/health.py`) and kills
one that has been stalled or unresponsive for `embedding_engine_stall_s`; the exit path restarts it and
counts the exit like any other, so an engine that keeps stalling fails the pod. A page batch's deadline
outlasts that restart, so what was in flight is embedded by the next engine.

What the health port answers (`health.py`): `Supervisor.liveness` whether this loop still runs (a hung
supervisor restarts nothing, and only the kubelet can restart it), `Supervisor.readiness` each child's
state (running or not, restarts, last exit) and whether all serve, `Supervisor.metrics` the children's
/metrics (`child_metrics.py`). A child down makes the pod unready, never dead: restarting it is this
loop's job, and failing it for good is `ChildKeepsFailingError`'s.
"""

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from memoryos import backoff
from memoryos.embedding.engine.health import EngineWatch
from services.worker.child_metrics import merged_exposition
from services.worker.health import Verdict, metrics_answer, metrics_text

log = logging.getLogger(__name__)

CHECK_EVERY_S = 0.5
"""How often the parent looks for a child that exited."""
RESTART_FIRST_S = 1.0
"""Delay before restarting a child that exited; doubled per exit in a row, up to `RESTART_MAX_S`."""
RESTART_MAX_S = 30.0
STABLE_AFTER_S = 60.0
"""A child that ran this long before it exited is restarted after the first delay again (its exit still
counts towards `max_failures`)."""
LOOP_SILENT_AFTER_S = 30.0
"""The supervisor's loop runs every `CHECK_EVERY_S`, and a child's start (spawned) takes well under a
second: silent this long, the loop is hung, and `liveness` says so."""
ENGINE_CHECK_EVERY_S = 5.0
"""How often the loop asks the engine whether it embeds: a probe waits up to a second for its answer, so
not every round of the loop, and a stall is only acted on after `embedding_engine_stall_s` anyway."""
Answer = TypeVar("Answer")


class ChildKeepsFailingError(RuntimeError):
    """A child exited too often in the window: every child has been stopped."""


@dataclass(frozen=True)
class ChildSpec:
    """What one child runs: `target(*args)`, both importable and picklable (a spawned child imports them
    anew), its process name, and the port of its /metrics once it works (0: none; health asks it)."""

    name: str
    target: Callable[..., None]
    args: tuple[Any, ...]
    metrics_port: int = 0


@dataclass(frozen=True)
class Supervision:
    """When the supervisor restarts a child and when it gives up (`QueueSettings.worker_max_child_failures`,
    `worker_child_failure_window_s`)."""

    max_failures: int = 5
    failure_window_s: float = 300.0
    restart_first_s: float = RESTART_FIRST_S
    restart_max_s: float = RESTART_MAX_S
    stable_after_s: float = STABLE_AFTER_S
    check_every_s: float = CHECK_EVERY_S
    loop_silent_after_s: float = LOOP_SILENT_AFTER_S
    engine_check_every_s: float = ENGINE_CHECK_EVERY_S


@dataclass(frozen=True)
class _Exit:
    """One exit of a child: when (monotonic), its status, and how long that run lasted."""

    at: float
    code: int
    ran_s: float


@dataclass
class _Child:
    """One child slot: the process in it now (None while it waits for its restart), its exits within the
    window (what the bound counts), its last exit, its starts, and its exits in a row since a run of
    `stable_after_s` (what the restart delay grows with)."""

    spec: ChildSpec
    process: BaseProcess | None = None
    started_at: float = 0.0
    starts: int = 0
    exits: list[_Exit] = field(default_factory=list)
    last_exit: _Exit | None = None
    in_a_row: int = 0
    restart_at: float = 0.0

    def state(self, now: float, problem: str | None) -> str:
        """One line for the health detail: `memoryos-worker-1: running (pid 4242); 2 restarts, last
        exit SIGKILL after 61 s, 5 s ago`, with the `problem` that keeps it from serving, if any."""
        process = self.process
        if process is None:
            running = f"not running, restarted in {max(0.0, self.restart_at - now):.1f} s"
        else:
            running = f"running (pid {process.pid})" + (f", {problem}" if problem else "")
        restarts = self.starts - 1
        line = f"{self.spec.name}: {running}; {restarts} restart{'' if restarts == 1 else 's'}"
        last = self.last_exit
        if last is not None:
            line += f", last exit {_exit_name(last.code)} after {last.ran_s:.0f} s, {now - last.at:.0f} s ago"
        return line


class Supervisor:
    """The children of one `memoryos worker --processes N`: `engine`, the child the workers embed with,
    is started first and stopped last, once every worker has drained (a drain may still embed a batch)."""

    def __init__(
        self,
        workers: Sequence[ChildSpec],
        engine: ChildSpec | None = None,
        supervision: Supervision | None = None,
        engine_watch: EngineWatch | None = None,
    ) -> None:
        self._supervision = supervision or Supervision()
        self._engine = [_Child(engine)] if engine else []  # none or one slot
        self._engine_watch = engine_watch if engine else None
        self._engine_checked_at = 0.0
        self._workers = [_Child(spec) for spec in workers]
        self._children = self._engine + self._workers
        self._context = multiprocessing.get_context("spawn")
        self._loop_ran_at = time.monotonic()
        """When the supervising loop last went round: `liveness` reads it from the health threads."""
        self._draining = False

    def run(self, stop: threading.Event) -> None:
        """Run the children until `stop` is set, restarting any that exits meanwhile; then SIGTERM them
        all and wait for each to exit. `ChildKeepsFailingError` (every child stopped first) when one
        exits `max_failures` times within the window."""
        for child in self._children:
            self._start(child)
        try:
            while not stop.wait(self._supervision.check_every_s):
                now = time.monotonic()
                self._loop_ran_at = now
                for child in self._children:
                    process = child.process
                    if process is not None and not process.is_alive():
                        self._exited(child, process, now)
                    if child.process is None and now >= child.restart_at:
                        self._start(child)
                self._watch_engine(now)
        finally:
            self._draining = True  # the children's drain may take the grace period: alive meanwhile
            _terminate([child.process for child in self._workers if child.process is not None])
            _terminate([child.process for child in self._engine if child.process is not None])

    def liveness(self) -> Verdict:
        """Whether the supervising loop still goes round (or is draining the children, which may take the
        grace period): the liveness probe's answer. A child down is not the supervisor's death, and
        restarting the container for it would undo the restart this loop is about to make."""
        if self._draining:
            return Verdict(True, ["supervisor: draining the children"])
        silent_s = time.monotonic() - self._loop_ran_at
        if silent_s > self._supervision.loop_silent_after_s:
            return Verdict(False, [f"supervisor: its loop has not run for {silent_s:.0f} s"])
        return Verdict(True, ["supervisor: running"])

    def readiness(self) -> Verdict:
        """Each child's state, one line each (`_Child.state`), ready only while every child runs and each
        worker child's metrics port answers (a child still loading, or stuck, does not). Called from the
        health server's threads: it reads the slots, never reaps a process."""
        answered = {id(child): answer for _, child, answer in _probe(self._children, metrics_answer)}
        now = time.monotonic()
        lines, ready = [], True
        engine_said = self._engine_watch.last[0] if self._engine_watch is not None else None
        for child in self._children:
            problem = None
            if answered.get(id(child)) is False:
                problem = f"/metrics on port {child.spec.metrics_port} does not answer"
            if child in self._engine and engine_said in ("stalled", "unresponsive"):
                problem = f"embedding {engine_said}"
            ready = ready and child.process is not None and problem is None
            lines.append(child.state(now, problem))
        return Verdict(ready, lines)

    def metrics(self) -> bytes:
        """The metrics of every running worker child as one exposition, each sample labelled with the
        child's index in `workers` (`child_metrics.py`); a child that does not answer is left out (its
        readiness line names it). Called from the health server's threads, as `readiness`."""
        return merged_exposition(
            {index: text for index, _, text in _probe(self._workers, metrics_text) if text is not None}
        )

    def _watch_engine(self, now: float) -> None:
        """Every `engine_check_every_s`, ask the running engine whether it embeds; kill one that has
        stopped (stalled or unresponsive for the watch's `stall_after_s`): SIGKILL also ends a stopped
        process, and the exit path restarts it next round."""
        watch = self._engine_watch
        if watch is None or now - self._engine_checked_at < self._supervision.engine_check_every_s:
            return
        self._engine_checked_at = now
        (engine,) = self._engine
        process = engine.process
        if process is None or not process.is_alive():
            return
        reason = watch.restart_reason()
        if reason is not None:
            log.warning("%s: %s; restarting it", engine.spec.name, reason)
            process.kill()
            watch.reset()

    def _start(self, child: _Child) -> None:
        process = self._context.Process(target=child.spec.target, args=child.spec.args, name=child.spec.name)
        process.start()
        child.started_at = time.monotonic()
        child.starts += 1
        child.process = process

    def _exited(self, child: _Child, process: BaseProcess, now: float) -> None:
        """Count the exit in the window, however long the child ran; past the bound, raise, else schedule
        the restart (after the first delay again when the child had run `stable_after_s`)."""
        bound = self._supervision
        exit_ = _Exit(now, process.exitcode or 0, now - child.started_at)  # exitcode: set once not alive
        child.exits = [old for old in child.exits if now - old.at < bound.failure_window_s] + [exit_]
        child.last_exit = exit_
        child.process = None
        if len(child.exits) >= bound.max_failures:
            raise ChildKeepsFailingError(
                f"{child.spec.name} exited {len(child.exits)} times within {bound.failure_window_s:g} s "
                f"(exit codes {', '.join(_exit_name(old.code) for old in child.exits)}); every process stopped"
            )
        child.in_a_row = 1 if exit_.ran_s >= bound.stable_after_s else child.in_a_row + 1
        child.restart_at = now + backoff.delay_s(child.in_a_row, bound.restart_first_s, bound.restart_max_s)
        log.warning(
            "%s exited (%s) after %.0f s, %d times within %g s; restarted in %.0f s",
            child.spec.name,
            _exit_name(exit_.code),
            exit_.ran_s,
            len(child.exits),
            bound.failure_window_s,
            child.restart_at - now,
        )


def _probe(children: list[_Child], ask: Callable[[int], Answer]) -> list[tuple[int, _Child, Answer]]:
    """`ask(port)` of the metrics port of every running child of `children` that has one, with the
    child's index in `children`: all at once, so that N silent children cost one timeout, not N."""
    probed = [
        (index, child)
        for index, child in enumerate(children)
        if child.process is not None and child.spec.metrics_port
    ]
    if not probed:
        return []
    with ThreadPoolExecutor(max_workers=min(len(probed), 32)) as pool:
        answers = list(pool.map(ask, [child.spec.metrics_port for _, child in probed]))
    return [(index, child, answer) for (index, child), answer in zip(probed, answers, strict=True)]


def _exit_name(code: int) -> str:
    """An exit status as said: `1`, or the signal that ended the process (`SIGKILL`)."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return str(code)


def _terminate(processes: list[BaseProcess]) -> None:
    """SIGTERM (a worker drains, the engine finishes its batch), then wait for each."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join()
