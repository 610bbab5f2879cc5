"""A local OpenAI-compatible chat server with scripted replies, for testing the real `openai` client.

It is a real HTTP server on 127.0.0.1 (a free port, a background thread), so the tests exercise the
client's own transport, retries and timeouts rather than a mock. Each POST /v1/chat/completions takes the
next reply from a queue: a content string, an HTTP error status, optionally after a delay. Requests are
recorded so tests can assert what the client sent. An exhausted queue answers 400, which the client does
not retry, so a test that scripted too few replies fails at once instead of hanging in backoff — unless
`respond_always` set a default reply, which then answers every request the queue does not (load and
concurrency tests). The server counts requests being handled at once (`in_flight`, `max_in_flight`).
`respond_with(function)` computes each reply the queue does not hold from the request's body instead: a
model that reads its prompt (one that obeys instructions found there, or one that fails on purpose).
"""

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.threaded_http import ScriptedHandler, StatefulServer, ThreadedTestServer


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted answer. `status` other than 200 sends an OpenAI-style error body instead of content.

    `retry_after_ms` is sent on errors as the `retry-after-ms` header, which the openai client honours
    instead of its own 0.5 s-and-up backoff: that keeps retry tests fast without patching the client.
    """

    content: str = ""
    status: int = 200
    delay_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    retry_after_ms: int = 1
    retry_after_s: int | None = None
    """Set: sent on errors as a standard `Retry-After` header (seconds) instead of `retry-after-ms`."""
    send_usage: bool = True
    """False: no `usage` field, as some OpenAI-compatible servers answer."""
    raw_body: str | None = None
    """Sent verbatim with status 200 instead of a completion: a misconfigured proxy (text/html), a
    truncated or malformed JSON body, a completion with no choices (`raw_content_type`)."""
    raw_content_type: str = "text/html"


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = 0.0
    """`time.monotonic()` when the request arrived."""


@dataclass
class _State:
    replies: deque[ScriptedReply] = field(default_factory=deque)
    default_reply: ScriptedReply | None = None
    responder: "Callable[[dict[str, Any]], ScriptedReply | str] | None" = None
    requests: list[RecordedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)


def _word_count(text: str) -> int:
    return len(text.split())


class _Handler(ScriptedHandler):
    server: "_Server"
    _handling = False
    """This request is counted in the server's `in_flight`."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        state = self.server.state
        with state.lock:
            state.requests.append(
                RecordedRequest(self.path, dict(self.headers.items()), body, time.monotonic())
            )
            reply = state.replies.popleft() if state.replies else state.default_reply
            responder = state.responder if reply is None else None
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            self._handling = True
        try:
            if responder is not None:
                computed = responder(body)
                reply = ScriptedReply(computed) if isinstance(computed, str) else computed
            self._answer(body, reply)
        finally:
            self._done_handling()

    def _done_handling(self) -> None:
        """Uncount the request; called before its response is written, so a client that sends its next
        request on receiving this response can never be seen overlapping with it."""
        if self._handling:
            self._handling = False
            state = self.server.state
            with state.lock:
                state.in_flight -= 1

    def _answer(self, body: dict[str, Any], reply: ScriptedReply | None) -> None:
        state = self.server.state
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if reply is None:
            self._send_json(400, {"error": {"message": "no scripted reply left", "type": "test_script"}})
            return
        if reply.delay_s and state.closing.wait(reply.delay_s):
            return
        if reply.raw_body is not None:
            self._send(200, reply.raw_body.encode(), reply.raw_content_type)
            return
        if reply.status != 200:
            error = {"error": {"message": f"scripted status {reply.status}", "type": "server_error"}}
            retry_after = (
                {"retry-after": str(reply.retry_after_s)}
                if reply.retry_after_s is not None
                else {"retry-after-ms": str(reply.retry_after_ms)}
            )
            self._send_json(reply.status, error, retry_after)
            return
        prompt_text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else _word_count(prompt_text)
        completion_tokens = (
            reply.completion_tokens if reply.completion_tokens is not None else _word_count(reply.content)
        )
        completion: dict[str, Any] = {
            "id": f"chatcmpl-test-{len(state.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": reply.content},
                }
            ],
        }
        if reply.send_usage:
            completion["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        self._send_json(200, completion)

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self._done_handling()
        super()._send(status, data, content_type, headers)


class _Server(StatefulServer):
    daemon_threads = True
    request_queue_size = 128
    """Listen backlog: dozens of concurrent clients connect at once in concurrency tests (default 5)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = _State()


class ScriptedOpenAIServer(ThreadedTestServer[RecordedRequest]):
    """The running server: queue replies with `script`, read what was sent from `requests`."""

    def __init__(self) -> None:
        super().__init__(_Server(), "openai-test-server")

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered."""
        with self._server.state.lock:
            return self._server.state.in_flight

    @property
    def max_in_flight(self) -> int:
        """The most requests ever being handled at the same time (from a request's arrival to the moment
        its response is written)."""
        with self._server.state.lock:
            return self._server.state.max_in_flight

    def script(self, *replies: ScriptedReply | str) -> None:
        """Queue replies in order; a plain string is a 200 reply with that content."""
        with self._server.state.lock:
            for reply in replies:
                self._server.state.replies.append(ScriptedReply(reply) if isinstance(reply, str) else reply)

    def respond_always(self, reply: ScriptedReply | str, delay_s: float = 0.0) -> None:
        """Answer every request the script does not with `reply` (a plain string: a 200 with that content,
        after `delay_s`); scripted replies still go first."""
        default = ScriptedReply(reply, delay_s=delay_s) if isinstance(reply, str) else reply
        with self._server.state.lock:
            self._server.state.default_reply = default

    def respond_with(self, responder: Callable[[dict[str, Any]], ScriptedReply | str] | None) -> None:
        """Answer every request that neither the script nor `respond_always` does with
        `responder(request body)` (a plain string: a 200 with that content); None stops it. Swapping the
        function swaps the model's behaviour for the next request: a failing model that recovers."""
        with self._server.state.lock:
            self._server.state.responder = responder


@pytest.fixture
def openai_server() -> Iterator[ScriptedOpenAIServer]:
    server = ScriptedOpenAIServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
