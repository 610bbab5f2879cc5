"""A loopback proxy in front of an OpenAI-compatible server that keeps every exchange, for tests that
check what really went over the wire to a real model: each request's bounds and format, each reply's
`finish_reason`, token counts and text, and how many requests were in flight at once.

The engine, the worker and the API are pointed at `base_url` instead of the server; exchanges are kept in
memory (they carry conversation text) and never logged."""

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Exchange:
    request: dict[str, Any]
    status: int
    response: dict[str, Any]


class _Handler(BaseHTTPRequestHandler):
    server: "_ProxyServer"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        proxy = self.server.proxy
        proxy.entered()
        try:
            upstream = urllib.request.Request(
                proxy.upstream_origin + self.path,
                data=body,
                headers={"content-type": "application/json", "authorization": "Bearer not-needed"},
            )
            try:
                with urllib.request.urlopen(upstream, timeout=proxy.timeout_s) as answer:
                    status, payload = answer.status, answer.read()
            except urllib.error.HTTPError as error:
                status, payload = error.code, error.read()
        finally:
            proxy.left()
        proxy.record(Exchange(json.loads(body or b"{}"), status, json.loads(payload or b"{}")))
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # conversation text stays out of the logs
        return


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, proxy: "RecordingProxy") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy


class RecordingProxy:
    """Forwards `POST <path>` to the same path on `upstream` (a base URL such as http://127.0.0.1:8088/v1);
    `base_url` is the proxy's equivalent. A context manager: serving on a thread inside the block."""

    def __init__(self, upstream: str, timeout_s: float = 900.0) -> None:
        parts = urlsplit(upstream)
        self.upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self.timeout_s = timeout_s
        self._server = _ProxyServer(self)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}{parts.path}"
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._in_flight = 0
        self.max_in_flight = 0
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "RecordingProxy":
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def entered(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def left(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)
