"""A local OpenAI-compatible embeddings server, for testing `OpenAIAPIEmbedder` with the real `openai`
client (its transport, retries and timeouts) rather than a mock.

A real HTTP server on 127.0.0.1 (a free port, a background thread). POST /v1/embeddings answers each
input with a deterministic vector: `HashEmbedder`'s (texts sharing words are close, equal texts equal),
scaled to length `SCALE` so the client's normalization shows. Scripted replies (`script`) go first, one
per request: an HTTP error status (with `retry-after-ms`, which the client honours instead of its own
backoff: retry tests stay fast), a delay, a wrong dimension or a vector too few. Requests are recorded.
"""

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.fakes import HashEmbedder
from tests.support.threaded_http import ScriptedHandler, StatefulServer, ThreadedTestServer

SERVER_DIM = 24
SCALE = 3.0
"""The length of every vector the server sends: the embedder must answer unit rows anyway."""


@dataclass(frozen=True)
class EmbeddingsReply:
    """One scripted answer; the defaults answer normally."""

    status: int = 200
    delay_s: float = 0.0
    dim: int | None = None
    """Vectors of this dimension instead of the server's."""
    drop_last: bool = False
    """One vector fewer than the inputs."""
    retry_after_ms: int = 1


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    """Lowercase names."""
    body: dict[str, Any]
    received_at: float
    """`time.monotonic()` when the request arrived."""


@dataclass
class _State:
    dim: int
    replies: deque[EmbeddingsReply] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)


def server_vector(text: str, dim: int) -> list[float]:
    """The vector the server answers for `text` (length `SCALE`)."""
    return [float(value) * SCALE for value in HashEmbedder(dim=dim).vector(text)]


class _Handler(ScriptedHandler):
    server: "_Server"

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        state = self.server.state
        with state.lock:
            headers = {name.lower(): value for name, value in self.headers.items()}
            state.requests.append(RecordedRequest(self.path, headers, body, time.monotonic()))
            reply = state.replies.popleft() if state.replies else EmbeddingsReply()
        if self.path.rstrip("/") != "/v1/embeddings":
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if reply.delay_s and state.closing.wait(reply.delay_s):
            return
        if reply.status != 200:
            error = {"error": {"message": f"scripted status {reply.status}", "type": "server_error"}}
            self._send_json(reply.status, error, {"retry-after-ms": str(reply.retry_after_ms)})
            return
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if reply.drop_last:
            texts = texts[:-1]
        dim = reply.dim or state.dim
        data = [
            {"object": "embedding", "index": index, "embedding": server_vector(text, dim)}
            for index, text in enumerate(texts)
        ]
        tokens = sum(len(text.split()) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self._send_json(200, {"object": "list", "model": body["model"], "data": data, "usage": usage})


class _Server(StatefulServer):
    daemon_threads = True

    def __init__(self, dim: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = _State(dim)


class EmbeddingsServer(ThreadedTestServer[RecordedRequest]):
    """The running server: queue replies with `script`, read what was sent from `requests`."""

    def __init__(self, dim: int = SERVER_DIM) -> None:
        super().__init__(_Server(dim), "embeddings-test-server")

    def script(self, *replies: EmbeddingsReply) -> None:
        """Answer the next requests with these replies, in order; then normally again."""
        with self._server.state.lock:
            self._server.state.replies.extend(replies)


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
