"""The probes of `memoryos worker` on its health port (`MEMORYOS_WORKER_HEALTH_PORT`, 9399): the one port
the container healthchecks, the Kubernetes probes and Prometheus ask, whatever the number of processes.

- `GET /livez`: whether the worker should be restarted. With `--processes N`, whether the supervisor's
  loop still goes round (`processes.Supervisor.liveness`): a child down is the supervisor's to restart,
  and a liveness probe that failed on it restarted the whole pod, every healthy child with it.
- `GET /readyz` (and `GET /healthz`, its older name, which the container healthchecks ask): 200 while
  every process serves, 503 otherwise, and either way one line per child: running or not, its restarts,
  its last exit (`Supervisor.readiness`). A child that died, or one started again that has not yet
  loaded, makes the pod unready until it serves again.
- `GET /metrics`: every worker child's metrics (`child_metrics.py`; with one process, the worker's own).

With one process the worker answers them itself, once it serves: 200 while it answers at all.
"""

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

PROBE_TIMEOUT_S = 1.5
"""How long a child's metrics port may take to answer the supervisor's health check: under the 2 s the
container healthchecks give /healthz, so a slow child reads as a 503 naming it, not as a timeout."""


@dataclass(frozen=True)
class Verdict:
    """A probe's answer: 200 when `ok`, else 503; `lines` say why, one part (a child) a line."""

    ok: bool
    lines: list[str]


Probe = Callable[[], Verdict]
"""Asks the worker one question (is it alive, is it ready) now."""
Exposition = Callable[[], bytes]
"""The metrics to serve now, in the Prometheus text format."""


def metrics_text(port: int) -> str | None:
    """What the worker process serving /metrics on `port` of this host answers; None unless it answers
    200 within `PROBE_TIMEOUT_S`."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=PROBE_TIMEOUT_S) as reply:
            return reply.read().decode() if reply.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def metrics_answer(port: int) -> bool:
    """Whether the worker process serving /metrics on `port` of this host answers 200."""
    return metrics_text(port) is not None


def serving(part: str) -> Probe:
    """The probe of a worker that answers by answering: `part` serving, as long as it is asked."""
    return lambda: Verdict(True, [f"{part}: serving"])


@contextmanager
def serving_health(port: int, live: Probe, ready: Probe, metrics: Exposition | None = None) -> Iterator[None]:
    """Answer the probes on `port` (every address: a kubelet probes the pod's) while inside: `GET /livez`
    with `live()`, `GET /readyz` and `GET /healthz` with `ready()`, each 200 or 503 with its lines; and,
    given `metrics`, `GET /metrics` with what it returns. Port 0: nothing is served."""
    if not port:
        yield
        return
    server = ThreadingHTTPServer(("", port), _handler(live, ready, metrics))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="memoryos-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _handler(live: Probe, ready: Probe, metrics: Exposition | None) -> type[BaseHTTPRequestHandler]:
    probes = {"/livez": live, "/readyz": ready, "/healthz": ready}
    served = "GET /livez, /readyz, /healthz" + (" or /metrics" if metrics is not None else "")

    class HealthHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in probes:
                verdict = probes[path]()
                self._reply(200 if verdict.ok else 503, "".join(f"{line}\n" for line in verdict.lines))
            elif path == "/metrics" and metrics is not None:
                self._reply(200, metrics(), CONTENT_TYPE_LATEST)
            else:
                self._reply(404, f"not found: {served}\n")

        def _reply(
            self, status: int, body: str | bytes, content_type: str = "text/plain; charset=utf-8"
        ) -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Probes come every few seconds: not logged."""

    return HealthHandler
