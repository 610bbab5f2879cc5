"""Children for `services.worker.processes.Supervisor` tests: module-level, so a spawned child imports
them. Each records its start as a file in `starts_dir` (the test counts restarts from them)."""

import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _record_start(starts_dir: Path) -> int:
    """This start's number, from 1."""
    number = len(list(starts_dir.iterdir())) + 1
    (starts_dir / f"{number}-{os.getpid()}").touch()
    return number


def serve_metrics(starts_dir: Path, port: int) -> None:
    """A working worker child, as health sees one: 200 on /metrics at `port` until SIGTERM ends it."""
    _record_start(starts_dir)
    HTTPServer(("127.0.0.1", port), _Metrics).serve_forever()


def fail_first(starts_dir: Path, failures: int, port: int) -> None:
    """Exits 1 at once on its first `failures` starts (a driver that is not there), then works."""
    if _record_start(starts_dir) <= failures:
        sys.exit(1)
    HTTPServer(("127.0.0.1", port), _Metrics).serve_forever()


def exit_after(starts_dir: Path, seconds: float) -> None:
    """Runs `seconds`, then exits 1 (a crash after a stable stretch)."""
    _record_start(starts_dir)
    time.sleep(seconds)
    sys.exit(1)
