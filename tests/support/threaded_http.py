"""A scripted test HTTP server on a thread of its own, on a free loopback port: what the local
OpenAI-compatible servers of the tests (chat, `openai_server.py`; embeddings, `embeddings_server.py`)
share — starting, stopping so that handlers asleep in a scripted delay wake, the base URL, the requests
recorded."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar


class StatefulServer(ThreadingHTTPServer):
    state: Any
    """Set by each server's own constructor: its `lock`, recorded `requests` and `closing` event."""


class ScriptedHandler(BaseHTTPRequestHandler):
    """What both servers' handlers answer with: a body and its headers, a client that gave up (its
    timeout) left unanswered, and no stderr line per request."""

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # The client gave up (its timeout): nothing to answer.

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr lines."""


R = TypeVar("R")


class ThreadedTestServer(Generic[R]):
    """`server` served on a daemon thread from `start` until `stop`; `R` is the type of its recorded
    requests."""

    def __init__(self, server: StatefulServer, name: str) -> None:
        self._server = server
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[R]:
        with self._server.state.lock:
            return list(self._server.state.requests)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and wake handlers still sleeping in a scripted delay."""
        self._server.state.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
