"""`GET /healthz` of `memoryos worker` (`MEMORYOS_WORKER_HEALTH_PORT`): the one endpoint the container
healthcheck and the Kubernetes probes ask, whatever the number of processes.

With one process the worker answers it itself, so it answers while the worker serves. With
`--processes N` the supervisor answers it (`processes.Supervisor.unhealthy`): 200 only while every child
runs and each worker child's metrics port answers, so a child that died, or one started again that has
not yet loaded, makes the whole container unhealthy, where a probe of port 9400 saw child 0 alone.
The same port serves `GET /metrics` (every worker child's, `child_metrics.py`; with one process, the
worker's own): one port to probe and scrape.
"""

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

PROBE_TIMEOUT_S = 1.5
"""How long a child's metrics port may take to answer the supervisor's health check: under the 2 s the
container healthchecks give /healthz, so a slow child reads as a 503 naming it, not as a timeout."""

UnhealthyParts = Callable[[], list[str]]
"""Names the parts that are not working now, one line each; empty when all are."""
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


@contextmanager
def serving_health(port: int, unhealthy: UnhealthyParts, metrics: Exposition | None = None) -> Iterator[None]:
    """Answer `GET /healthz` on `port` (every address: a kubelet probes the pod's) while inside: 200
    "ok", or 503 with the lines of `unhealthy()`; and, given `metrics`, `GET /metrics` with what it
    returns. Port 0: nothing is served."""
    if not port:
        yield
        return
    server = ThreadingHTTPServer(("", port), _handler(unhealthy, metrics))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="memoryos-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _handler(unhealthy: UnhealthyParts, metrics: Exposition | None) -> type[BaseHTTPRequestHandler]:
    served = "GET /healthz" + (" or /metrics" if metrics is not None else "")

    class HealthHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                down = unhealthy()
                self._reply(503 if down else 200, "".join(f"{line}\n" for line in down) or "ok\n")
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
