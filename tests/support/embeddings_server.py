"""A local OpenAI-compatible embeddings server, for testing `OpenAIAPIEmbedder` with the real `openai`
client (its transport, retries and timeouts) rather than a mock.

A real HTTP server on 127.0.0.1 (a free port, a background thread). POST /v1/embeddings answers each
input with a deterministic vector: `HashEmbedder`'s (texts sharing words are close, equal texts equal),
scaled to length `SCALE` so the client's normalization shows. Scripted replies (`script`) go first, one
per request: an HTTP error status (with `retry-after-ms`, which the client honours instead of its own
backoff: retry tests stay fast), a delay, a wrong dimension, a vector too few, another model's name, or a
hold until that many requests wait together (which only concurrent requests release). Requests are
recorded, with the most ever in flight at once.

A window (`window_tokens`) makes it refuse, as TEI without `--auto-truncate` does, a request holding a
text of more tokens than that: 413, stating the window in TEI's words ("must have less than N tokens"),
or a bare 413 (`states_window=False`). A token here is a whitespace-separated word, plus 2 special tokens
per text: `word_level_tokenizer` builds the `tokenizer.json` that counts the same way.
"""

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

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
    model: str | None = None
    """Name this model in the reply instead of the one asked for; "" names none."""
    together: int = 0
    """Answer only once this many requests wait here together, in groups of that many (a barrier: only
    requests sent concurrently pass; a 500 when the others do not come within `HOLD_S`)."""


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    """Lowercase names."""
    body: dict[str, Any]
    received_at: float
    """`time.monotonic()` when the request arrived."""


HOLD_S = 10.0
"""How long a held request waits for the others before failing the test with a 500."""
SPECIAL_TOKENS = 2
"""Tokens the server adds to each text's words, as [CLS] and [SEP]."""


@dataclass
class _State:
    dim: int
    window_tokens: int | None
    states_window: bool
    model: str | None = None
    replies: deque[EmbeddingsReply] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    max_in_flight: int = 0
    flight_changed: threading.Condition = field(default_factory=threading.Condition)
    barriers: dict[int, threading.Barrier] = field(default_factory=dict)


def token_count(text: str) -> int:
    """The server's count: words plus `SPECIAL_TOKENS`."""
    return len(text.split()) + SPECIAL_TOKENS


def server_vector(text: str, dim: int) -> list[float]:
    """The vector the server answers for `text` (length `SCALE`)."""
    return [float(value) * SCALE for value in HashEmbedder(dim=dim).vector(text)]


class _Handler(ScriptedHandler):
    server: "_Server"
    _in_flight = False

    def do_POST(self) -> None:
        state = self.server.state
        with state.flight_changed:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            state.flight_changed.notify_all()
        self._in_flight = True
        try:
            self._answer()
        finally:
            self._landed()

    def _landed(self) -> None:
        """This request no longer counts as in flight: before its answer is written, so that a client
        sending its next request on receiving it is never counted twice."""
        if self._in_flight:
            self._in_flight = False
            with self.server.state.flight_changed:
                self.server.state.in_flight -= 1

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self._landed()
        super()._send(status, data, content_type, headers)

    def _answer(self) -> None:
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
        if reply.together:
            with state.lock:
                barrier = state.barriers.setdefault(reply.together, threading.Barrier(reply.together))
            try:
                barrier.wait(timeout=HOLD_S)
            except threading.BrokenBarrierError:
                self._send_json(500, {"error": {"message": "the requests held never came", "type": "test"}})
                return
        if reply.status != 200:
            error = {"error": {"message": f"scripted status {reply.status}", "type": "server_error"}}
            self._send_json(reply.status, error, {"retry-after-ms": str(reply.retry_after_ms)})
            return
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        longest = max((token_count(text) for text in texts), default=0)
        if state.window_tokens is not None and longest > state.window_tokens:
            message = (
                f"Input validation error: `inputs` must have less than {state.window_tokens} tokens. "
                f"Given: {longest}"
                if state.states_window
                else "Payload Too Large"
            )
            self._send_json(413, {"message": message, "code": 413, "type": "Validation"})
            return
        if reply.drop_last:
            texts = texts[:-1]
        dim = reply.dim or state.dim
        data = [
            {"object": "embedding", "index": index, "embedding": server_vector(text, dim)}
            for index, text in enumerate(texts)
        ]
        tokens = sum(len(text.split()) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        model = reply.model if reply.model is not None else state.model or body["model"]
        answer = {"object": "list", "model": model, "data": data, "usage": usage}
        if not model:
            del answer["model"]
        self._send_json(200, answer)


class _Server(StatefulServer):
    daemon_threads = True

    def __init__(self, dim: int, window_tokens: int | None, states_window: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = _State(dim, window_tokens, states_window)


class EmbeddingsServer(ThreadedTestServer[RecordedRequest]):
    """The running server: queue replies with `script`, read what was sent from `requests`."""

    def __init__(
        self, dim: int = SERVER_DIM, *, window_tokens: int | None = None, states_window: bool = True
    ) -> None:
        super().__init__(_Server(dim, window_tokens, states_window), "embeddings-test-server")

    def script(self, *replies: EmbeddingsReply) -> None:
        """Answer the next requests with these replies, in order; then normally again."""
        with self._server.state.lock:
            self._server.state.replies.extend(replies)

    def serve_model(self, name: str | None) -> None:
        """Name this model in every reply from now on (None: the one asked for), as a server whose model
        was swapped."""
        with self._server.state.lock:
            self._server.state.model = name

    @property
    def max_in_flight(self) -> int:
        """The most requests it ever held at once."""
        with self._server.state.flight_changed:
            return self._server.state.max_in_flight


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def word_level_tokenizer(directory: Path, words: list[str]) -> Path:
    """Write a `tokenizer.json` into `directory` that counts as the server does (`token_count`): one token
    per whitespace-separated word of `words` (any other is [UNK], still one token), between [CLS] and
    [SEP]. Returns its path."""
    vocabulary = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, **{word: index + 3 for index, word in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return path
