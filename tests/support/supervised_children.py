"""Children for `services.worker.processes.Supervisor` tests: module-level, so a spawned child imports
them. Each records its start as a file in `starts_dir` (the test counts restarts from them)."""

import os
import sys
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server


def _record_start(starts_dir: Path) -> int:
    """This start's number, from 1."""
    number = len(list(starts_dir.iterdir())) + 1
    (starts_dir / f"{number}-{os.getpid()}").touch()
    return number


def _serve_metrics_forever(port: int) -> None:
    """Serve /metrics on `port` with one family of each kind, valued by the port (told apart once
    merged), until SIGTERM ends the process."""
    registry = CollectorRegistry()
    Gauge("child_port", "The port this child serves on.", registry=registry).set(port)
    Counter("child_requests", "Counted to the port.", registry=registry).inc(port)
    Histogram("child_seconds", "One observation.", buckets=(1.0,), registry=registry).observe(0.5)
    Info("child", "What runs.", registry=registry).info({"port": str(port)})
    start_http_server(port, addr="127.0.0.1", registry=registry)
    threading.Event().wait()


def serve_metrics(starts_dir: Path, port: int) -> None:
    """A working worker child, as health sees one: 200 on /metrics at `port` until SIGTERM ends it."""
    _record_start(starts_dir)
    _serve_metrics_forever(port)


def fail_first(starts_dir: Path, failures: int, port: int) -> None:
    """Exits 1 at once on its first `failures` starts (a driver that is not there), then works."""
    if _record_start(starts_dir) <= failures:
        sys.exit(1)
    _serve_metrics_forever(port)


def exit_after(starts_dir: Path, seconds: float) -> None:
    """Runs `seconds`, then exits 1 (a crash after a stable stretch)."""
    _record_start(starts_dir)
    time.sleep(seconds)
    sys.exit(1)


class HeldStartsDir:
    """A child's `starts_dir` argument that holds the supervisor inside `Process.start` while `released`
    is clear: a spawned child's arguments are pickled there, in the supervising loop, and this one's
    pickling waits. The child receives the plain `Path`. A hung start (a wedged fork server, a full
    pipe) as the supervisor's liveness must see it."""

    def __init__(self, path: Path, released: threading.Event) -> None:
        self.path = path
        self.released = released

    def __reduce__(self) -> tuple[type[Path], tuple[str]]:
        self.released.wait()
        return Path, (str(self.path),)


def engine_wedged_first(starts_dir: Path, socket_path: Path) -> None:
    """The host's embedding engine, wedged on its first start: it listens on `socket_path` and never
    answers (connections wait in the kernel's backlog, as with a stopped or stuck process); started
    again, a real engine over the hashed fake embedder."""
    import socket

    from memoryos.embedding.engine.server import EmbeddingEngine
    from tests.support.fakes import HashEmbedder

    if _record_start(starts_dir) == 1:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(socket_path))
        listener.listen(16)
        threading.Event().wait()
    socket_path.unlink(missing_ok=True)
    EmbeddingEngine(HashEmbedder(), socket_path).start()
    threading.Event().wait()
