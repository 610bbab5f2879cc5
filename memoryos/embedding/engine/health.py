"""Whether the embedding engine is doing its work, as a supervisor reads it.

An engine can listen and still embed nothing: a model that raises on every batch (a sticky CUDA error)
fails each batch and goes on, and a stopped or wedged process accepts connections into the kernel's
backlog and answers none. Neither exits, so a supervisor that only restarts exited children never acts.

The engine answers a `health` request from its connection threads (never its encoding thread, which may be
the stuck part) with `EngineHealth`: batches done, its last success, the work waiting and the verdict
`engine_verdict` draws from them. `probe_health` asks it with a short bound, and `EngineWatch` is the
supervisor's whole decision: restart an engine whose verdict has been "stalled", or that has not
answered while listening, for `stall_after_s`.
"""

import contextlib
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from memoryos.embedding.engine.wire import recv_frame, send_frame
from memoryos.errors import EmbeddingEngineError

Verdict = Literal["ok", "idle", "stalled"]
"""`stalled`: texts have waited `stall_after_s` with no batch succeeding meanwhile, or the model has kept
failing (one failure within the last `stall_after_s`) for `stall_after_s` with no success in between: a
model that fails every batch answers each request at once with an error, so nothing waits long, and only
the failures show it. `idle`: nothing waits and the model is not failing. `ok`: otherwise."""
ProbeVerdict = Literal["ok", "idle", "stalled", "unresponsive", "absent"]
"""`Verdict`, plus what a probe alone can tell: `unresponsive` (the socket accepts, nothing answers
within the probe's bound: a stopped or wedged process) and `absent` (nothing listens: starting or dead)."""


@dataclass(frozen=True)
class EngineHealth:
    """The engine's answer to `health` (and the `health` of its stats)."""

    verdict: Verdict
    batches_total: int
    """Model batches that succeeded since the engine started."""
    failures_total: int
    """Model calls that raised (a batch, or one request of a failed batch retried alone)."""
    last_success_unix: float | None
    """Wall-clock time of the last batch that succeeded; None before the first."""
    waiting_texts: int
    """Texts read and not answered yet: queued, assembled, or inside the model."""
    oldest_waiting_s: float
    """How long the oldest of them has waited (0 when none waits)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> "EngineHealth":
        """From the engine's reply; `EmbeddingEngineError` when it is not one."""
        try:
            return cls(
                verdict=fields["verdict"],
                batches_total=int(fields["batches_total"]),
                failures_total=int(fields["failures_total"]),
                last_success_unix=None
                if fields["last_success_unix"] is None
                else float(fields["last_success_unix"]),
                waiting_texts=int(fields["waiting_texts"]),
                oldest_waiting_s=float(fields["oldest_waiting_s"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise EmbeddingEngineError(f"the embedding engine's health is malformed: {error}") from None


def engine_verdict(
    waiting_texts: int,
    oldest_waiting_s: float,
    since_success_s: float | None,
    failing_for_s: float | None,
    stall_after_s: float,
) -> Verdict:
    """The `Verdict` from the engine's state: `waiting_texts` of which the oldest arrived
    `oldest_waiting_s` ago, the last success `since_success_s` ago (None: never), and `failing_for_s`,
    how long the model has failed with no success in between and a failure within `stall_after_s` (None:
    it is not failing). An engine idle for an hour that gets a text now is not stalled; one wedged inside
    a batch is, `stall_after_s` after its oldest text arrived."""
    if failing_for_s is not None and failing_for_s >= stall_after_s:
        return "stalled"
    if waiting_texts == 0:
        return "idle" if failing_for_s is None else "ok"
    quiet_s = oldest_waiting_s if since_success_s is None else min(oldest_waiting_s, since_success_s)
    return "stalled" if quiet_s >= stall_after_s else "ok"


def probe_health(socket_path: Path, timeout_s: float = 1.0) -> tuple[ProbeVerdict, EngineHealth | None]:
    """Ask the engine at `socket_path` for its health within `timeout_s`: its verdict and health, or
    ("absent", None) when nothing listens, or ("unresponsive", None) when it accepts and does not answer.
    Never raises for an engine's state; a malformed answer counts as unresponsive."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        try:
            sock.connect(os.fspath(socket_path))
        except (FileNotFoundError, ConnectionRefusedError):
            return "absent", None
        send_frame(sock, {"op": "health", "id": 0})
        frame = recv_frame(sock)
        if frame is None or not isinstance(frame[0].get("health"), dict):
            return "unresponsive", None
        health = EngineHealth.from_dict(frame[0]["health"])
        return health.verdict, health
    except (OSError, EmbeddingEngineError):
        return "unresponsive", None
    finally:
        with contextlib.suppress(OSError):
            sock.close()


class EngineWatch:
    """The supervisor's view of one engine child: call `restart_reason` every few seconds while the child
    runs; kill and restart the child when it returns a reason, then call `reset`.

    "stalled" restarts at once: the engine said so only after `stall_after_s` without a success.
    "unresponsive" has to last `stall_after_s` of probes in a row: a probe that lands in a pause of the
    engine's (a long garbage collection) does not kill a working engine. "absent" never restarts: an engine still loading its model listens on nothing yet,
    and one that exited is the supervisor's exit path already.
    """

    def __init__(self, socket_path: Path, stall_after_s: float, probe_timeout_s: float = 1.0) -> None:
        self.socket_path = socket_path
        self.stall_after_s = stall_after_s
        self.probe_timeout_s = probe_timeout_s
        self._bad_since: float | None = None
        self.last: tuple[ProbeVerdict, EngineHealth | None] = ("absent", None)

    def restart_reason(self, now: float | None = None) -> str | None:
        """Probe once (at most `probe_timeout_s`); a line saying why the engine should be restarted, or
        None while it works, idles, starts, or has been bad for less than `stall_after_s`."""
        now = time.monotonic() if now is None else now
        self.last = verdict, health = probe_health(self.socket_path, self.probe_timeout_s)
        if verdict != "unresponsive":
            self._bad_since = None
        if verdict == "unresponsive":
            if self._bad_since is None:
                self._bad_since = now
            if now - self._bad_since < self.stall_after_s:
                return None
            return f"the embedding engine accepts connections and has answered none for {now - self._bad_since:.0f} s"
        if verdict != "stalled" or health is None:
            return None
        return (
            f"the embedding engine has {health.waiting_texts} texts waiting (the oldest {health.oldest_waiting_s:.0f} s) "
            f"and no batch succeeded since then ({health.failures_total} model failures)"
        )

    def reset(self) -> None:
        """Forget the bad streak (after a restart)."""
        self._bad_since = None
