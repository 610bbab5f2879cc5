"""A local OpenAI-compatible chat server that answers every request with fixed text, at once or after a
fixed delay.

It stands in for the LLM of a system under evaluation when no key is wanted, above all the reference
`memoryos-pro`, which cannot be given an in-process LLM: it only talks to an OpenAI-compatible endpoint.
Every POST to `.../chat/completions` gets a 200 with the fixed reply (or the reply of the first rule
whose marker appears in the request's messages) and a word-count `usage`, so client code that reads
usage works. With `delay_s`, each request is answered that long after it arrived, requests in parallel
(a thread each): a slow model endpoint for benchmarks (`bench/engine/scheduler.py`). `MEMORY_TASK_RULES` gives
every consolidation task of MemoryOS's own `OpenAILLM` a reply its parser accepts. It is a real HTTP
server on 127.0.0.1 (a free port, a background thread); requests are counted and the last
`RECORDED_REQUESTS` JSON bodies kept in memory for tests to read (`requests`), never logged, since they
carry conversation text.

Tests of the client's bounds and fallbacks make it misbehave as real servers do: `reject_response_format`
answers any request carrying `response_format` with 400 (an endpoint without structured outputs), and
`bad_reply` sends each reply as a model gone wrong would: "loop" repeats it line after line and cuts it
at the request's `max_tokens` words (`DEFAULT_MAX_TOKENS` when none is sent, as a server's own cap),
reported as cut there (`finish_reason` "length"); "prose" wraps it in chatter and a code fence, except in answer to a request with
`response_format`, which a server with structured outputs answers with the JSON alone.
"""

import json
import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

DEFAULT_REPLY = "ok"
"""What the reference's LLM calls get: not "true" (no continuity), not JSON (no topic themes), so every
page is filed under its fallback segment. The reference figures in docs/benchmarks.md were measured this way."""

MEMORY_TASK_RULES: tuple[tuple[str, str], ...] = (
    ("Reply with one word: yes or no.", "yes"),
    ("say what this conversation is about", "The two friends catch up on family, work and their plans."),
    (
        "Name the single main topic of this conversation",
        '{"summary": "Catching up on family, work and plans.", "keywords": ["family", "work", "plans"]}',
    ),
    ("Update the user profile", "- Talks with a close friend about family, work and plans."),
    (
        "Extract the facts worth remembering",
        '{"user_facts": ["The user has a close friend."], '
        '"assistant_facts": ["The assistant listened to the user."]}',
    ),
)
"""(marker, reply) per consolidation task of MemoryOS's prompts (`memoryos/llm/prompts.py`): continuity
(yes), chain summary (text), topic (JSON summary and keywords), profile (text), knowledge (JSON facts).
Each marker is a phrase of its task's instruction only; any other request (an answer) gets the fixed
reply. `tests/unit/test_bench_scheduler.py` checks both against the prompts and parsers."""

RECORDED_REQUESTS = 256
"""Request bodies kept (the latest): enough for a test's calls, bounded for a benchmark's thousands."""

DEFAULT_MAX_TOKENS = 4096
"""The cap a "loop" reply runs to when the request sends no `max_tokens`: a server's own default."""

BadReply = Literal["loop", "prose"]


def _misbehaved(reply: str, bad_reply: BadReply, body: dict[str, Any]) -> tuple[str, str]:
    """(content, finish_reason) of `reply` sent as `bad_reply` says, for this request body."""
    if bad_reply == "prose":
        if "response_format" in body:
            return reply, "stop"
        return f"Sure! Here is what you asked for:\n```json\n{reply}\n```\nHope this helps.", "stop"
    cap = body.get("max_tokens")
    cap = cap if isinstance(cap, int) and cap > 0 else DEFAULT_MAX_TOKENS
    looped = "\n".join([reply] * (cap // max(1, len(reply.split())) + 1))
    words = list(re.finditer(r"\S+", looped))[:cap]
    return looped[: words[-1].end()] if words else "", "length"


class _Handler(BaseHTTPRequestHandler):
    server: "_StubServer"

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            body = {}
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        body = body if isinstance(body, dict) else {}
        self.server.record(body)
        if self.server.reject_response_format and "response_format" in body:
            message = "response_format is not supported by this server"
            error = {"message": message, "type": "invalid_request_error", "param": "response_format"}
            self._send(400, {"error": error})
            return
        messages = body.get("messages")
        prompt = " ".join(str(m.get("content", "")) for m in messages or [] if isinstance(m, dict))
        reply, finish_reason = self.server.reply_for(prompt), "stop"
        if self.server.bad_reply is not None:
            reply, finish_reason = _misbehaved(reply, self.server.bad_reply, body)
        if self.server.delay_s > 0:
            time.sleep(self.server.delay_s)  # this request's own thread: others are answered meanwhile
        prompt_tokens, completion_tokens = len(prompt.split()), len(reply.split())
        self._send(
            200,
            {
                "id": f"chatcmpl-stub-{self.server.count()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model", "stub")),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish_reason,
                        "message": {"role": "assistant", "content": reply},
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        """No per-request stderr lines."""


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    """Listen backlog. The default (5) refuses connections when more than a handful arrive at once, as
    they do from a client with many calls in flight (`llm_max_concurrency`)."""

    def __init__(
        self,
        reply: str,
        rules: Sequence[tuple[str, str]],
        delay_s: float,
        reject_response_format: bool,
        bad_reply: BadReply | None,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay_s = delay_s
        self.reject_response_format = reject_response_format
        self.bad_reply = bad_reply
        self._reply = reply
        self._rules = list(rules)
        self._lock = threading.Lock()
        self._served = 0
        self._bodies: deque[dict[str, Any]] = deque(maxlen=RECORDED_REQUESTS)

    def record(self, body: dict[str, Any]) -> None:
        with self._lock:
            self._bodies.append(body)

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._bodies)

    def reply_for(self, prompt: str) -> str:
        with self._lock:
            self._served += 1
        return next((reply for marker, reply in self._rules if marker in prompt), self._reply)

    def count(self) -> int:
        with self._lock:
            return self._served


class StubLLMServer:
    """The running server; use as a context manager. `rules` are (marker, reply): the first rule whose
    marker occurs in a request's messages answers it, any other request gets `reply`. `delay_s`: seconds
    each completion is held before its answer is sent (0: at once). `reject_response_format` and
    `bad_reply`: the misbehaviours in the module's docstring."""

    def __init__(
        self,
        reply: str = DEFAULT_REPLY,
        rules: Sequence[tuple[str, str]] = (),
        delay_s: float = 0.0,
        *,
        reject_response_format: bool = False,
        bad_reply: BadReply | None = None,
    ) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, not {delay_s}")
        self._server = _StubServer(reply, rules, delay_s, reject_response_format, bad_reply)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="stub-llm", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests_served(self) -> int:
        return self._server.count()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the last `RECORDED_REQUESTS` requests, oldest first (refused ones too)."""
        return self._server.bodies()

    def start(self) -> "StubLLMServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "StubLLMServer":
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
