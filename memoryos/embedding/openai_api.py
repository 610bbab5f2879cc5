"""`OpenAIAPIEmbedder`: embeddings from an OpenAI-compatible server (TEI, vLLM, Ollama, OpenAI).

Chosen by `embedding_api_base_url`; `embedding_model_name` is the model the server is asked for. Each
request carries at most `embedding_api_batch_size` texts; an encode of more sends its requests from a
pool of `embedding_api_max_concurrency` threads, and its vectors come back in input order.

**One deadline per call.** Every request of one encode call, with its retries, fits in
`embedding_api_deadline_s`; each attempt waits `embedding_api_timeout_s` at most (less when the deadline
is nearer). Timeouts, connection errors, 408/409/429 and 5xx are retried here, up to
`embedding_api_max_retries` times, on the `openai` client's schedule (0.5 s doubling to 8 s, jittered, or
the server's `retry-after`); the client itself retries nothing, since its retries know no deadline. A
wait that would pass the deadline is not begun.

**The window.** A text past the model's window is refused by servers that do not truncate (TEI without
`--auto-truncate` answers 413, vLLM 400). `embedding_api_max_input_tokens` has the texts cut on the client
(`InputWindow`: the model's tokenizer when found locally, else characters). A server that still refuses
texts as too long gets them cut and sent again, without counting a retry: to the window its message
states ("less than 512 tokens", "maximum context length is 512 tokens"), which is kept for later
requests, else to half the longest text, at most `MAX_CUTS` times. One WARNING says so, once per
embedder; the compose profile's TEI truncates by itself (`--auto-truncate`).

**Checked replies.** A reply must name the model asked for (`response.model`: a server swapped to another
model of the same dimension would mix vectors silently), else `EmbeddingServerModelError`, logged once
at ERROR and permanent for the spaces that meet it (their batcher stops asking). A reply naming no model
cannot be checked and is taken, with one WARNING. A reply with the wrong number of vectors or the wrong
dimension, and whatever fails through the retries or the deadline, raises `EmbeddingServerError`: the
batcher keeps the pages pending and retries later. The key goes in the Authorization header only; only
counts and model names are logged.

The space records the model as `openai-api:<model>` (`EMBEDDINGS_API_PREFIX`): the same model name run
locally (or an earlier local run) may differ in precision, truncation or query prompt, so the vectors
are never mixed silently; moving the server (another URL) keeps the name.
"""

import logging
import random
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import numpy as np
from openai import APIConnectionError, APIStatusError, OpenAI, OpenAIError
from openai.types import CreateEmbeddingResponse

from memoryos import backoff
from memoryos.config import MemoryConfig
from memoryos.embedding.base import unit_rows
from memoryos.embedding.cache import EmbeddingCache
from memoryos.embedding.truncation import CHARS_PER_TOKEN, InputWindow
from memoryos.errors import (
    EMBEDDINGS_API_PREFIX,
    EmbeddingServerError,
    EmbeddingServerModelError,
    InvalidInputError,
)
from memoryos.llm.endpoint import PLACEHOLDER_API_KEY

log = logging.getLogger(__name__)

_DIM_PROBE_TEXT = "dimension probe"
"""Embedded once when the dimension is asked for before any reply has told it (a new space records it)."""

_MAX_ERROR_CHARS = 300

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 8.0
"""The `openai` client's own retry schedule, kept: 0.5 s doubling up to 8 s."""
MAX_RETRY_AFTER_S = 60.0
"""A server's `retry-after` is followed up to this; a longer one gets the schedule (as the client does)."""

MAX_CUTS = 8
"""Times one request's texts are cut after a too-long refusal: halving the longest from 40,000 characters
reaches 156 in 8, inside any embedding model's window. A refusal that cutting does not end (TEI's 413 for
too many texts) fails after them."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Retried as the `openai` client retries them, with every 5xx."""

_TOO_LONG = re.compile(
    r"too long|too many tokens|context length|maximum input length|must have less than \d+ tokens"
    r"|reduce the length",
    re.IGNORECASE,
)
"""A 400 or 422 that refuses a text for its length (vLLM, OpenAI); TEI says so with 413."""
_STATED_WINDOW = re.compile(
    r"(?:less than|context length is|maximum input length is)\s+(\d+)\s+tokens", re.IGNORECASE
)
"""The window in a refusal: TEI's "`inputs` must have less than 512 tokens. Given: 40000", vLLM's and
OpenAI's "This model's maximum context length is 512 tokens. However, ..."."""


class OpenAIAPIEmbedder:
    """`Embedder` over `POST /embeddings` of an OpenAI-compatible server, with the LRU cache in front of
    it (`embedding_cache_size`; `forget_texts` empties it as for a local model). Thread-safe: the client
    pools connections for every thread, the request threads are shared by every caller (the bound holds
    per embedder), and the dimension is learned under a lock. Making one logs the server's host, the
    model and who truncates at INFO (the process's shared embedder is made once per configuration)."""

    def __init__(self, config: MemoryConfig) -> None:
        if config.embedding_api_base_url is None:
            raise InvalidInputError("embedding_api_base_url", "an embeddings server's URL is needed")
        if config.embedding_model_kwargs:
            raise InvalidInputError(
                "embedding_model_kwargs",
                "SentenceTransformer arguments do not apply to an embeddings server (embedding_api_base_url)",
            )
        key = config.embedding_api_key.get_secret_value() if config.embedding_api_key is not None else ""
        self._client = OpenAI(
            api_key=key or PLACEHOLDER_API_KEY,
            base_url=config.embedding_api_base_url,
            timeout=config.embedding_api_timeout_s,
            max_retries=0,  # retried here, within the call's deadline
        )
        self._timeout_s = config.embedding_api_timeout_s
        self._max_retries = config.embedding_api_max_retries
        self._deadline_s = config.embedding_api_deadline_s
        self._model = config.embedding_model_name
        self._batch_size = config.embedding_api_batch_size
        self._configured_dim = config.embedding_api_dim
        self._query_prefix = config.embedding_api_query_prefix
        self._cache = EmbeddingCache(config.embedding_cache_size)
        self._window = InputWindow(self._model, config.embedding_api_max_input_tokens)
        self._pool = ThreadPoolExecutor(
            max_workers=config.embedding_api_max_concurrency, thread_name_prefix="memoryos-embed-api"
        )
        self._dim = config.embedding_api_dim
        self._dim_lock = threading.Lock()
        self._said: set[str] = set()
        self._said_lock = threading.Lock()
        server = urlsplit(config.embedding_api_base_url)  # its host and port: never a user or password
        log.info(
            "embedding backend: embeddings server %s:%s, model %s%s; %s",
            server.hostname,
            server.port or ("443" if server.scheme == "https" else "80"),
            self._model,
            "" if key else ", no API key",
            self._truncation(),
        )

    @property
    def name(self) -> str:
        """`openai-api:<model>`, as recorded in each memory space (module docstring)."""
        return f"{EMBEDDINGS_API_PREFIX}{self._model}"

    @property
    def dim(self) -> int:
        """`embedding_api_dim` when configured; else the dimension of the server's first reply, asking it
        with one probe text if no encode has yet."""
        if self._dim is None:
            self._request([_DIM_PROBE_TEXT], time.monotonic() + self._deadline_s)
        assert self._dim is not None  # set by the reply's check
        return self._dim

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        self._cache.discard(texts)

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """Float32 unit rows of shape (len(texts), dim), one request per `embedding_api_batch_size`
        texts, all within one `embedding_api_deadline_s`; cached texts and repeats within the call are not
        sent."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._cache.rows(texts, is_query, lambda missing: self._encode_missing(missing, is_query))

    def _encode_missing(self, texts: list[str], is_query: bool) -> np.ndarray:
        deadline = time.monotonic() + self._deadline_s
        sent = [self._query_prefix + text for text in texts] if is_query else texts
        batches = [sent[start : start + self._batch_size] for start in range(0, len(sent), self._batch_size)]
        if len(batches) == 1:
            return self._request(batches[0], deadline)
        futures = [self._pool.submit(self._request, batch, deadline) for batch in batches]
        try:
            return np.concatenate([future.result() for future in futures])
        finally:
            for future in futures:  # after a failure: the requests not yet begun are not sent
                future.cancel()

    def _request(self, texts: list[str], deadline: float) -> np.ndarray:
        """One request's vectors: its texts cut to the window, retried and cut again within `deadline`
        (module docstring), checked (`_checked_rows`) and normalized."""
        sent = [self._window.cut(text) for text in texts]
        if sent != texts:
            log.debug("texts cut to the window before sending", extra={"texts": len(texts)})
        retries = cuts = 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError("no time left")
                # "float": the client asks for base64 unless told, which not every compatible server speaks.
                response = self._client.embeddings.create(
                    model=self._model,
                    input=sent,
                    encoding_format="float",
                    timeout=min(self._timeout_s, remaining),
                )
                break
            except APIStatusError as error:
                if _too_long(error):
                    shorter = self._cut_after_refusal(texts, sent, error) if cuts < MAX_CUTS else None
                    if shorter is None:
                        raise self._failure(texts, error, f"refused as too long, cut {cuts} times") from error
                    sent, cuts = shorter, cuts + 1
                    continue
                if not _retryable(error):
                    raise self._failure(texts, error, "not retried") from error
                retries = self._wait_to_retry(texts, error, retries, deadline)
            except APIConnectionError as error:  # timeouts included
                retries = self._wait_to_retry(texts, error, retries, deadline)
            except TimeoutError as error:
                raise self._failure(texts, error, self._deadline_spent(retries)) from error
            except (OpenAIError, ValueError) as error:  # ValueError: a 200 whose body is not JSON
                raise self._failure(texts, error, "not retried") from error
        rows = self._checked_rows(response, len(texts))
        log.debug("embeddings request done", extra={"model": self._model, "texts": len(texts)})
        return unit_rows(rows)

    def _wait_to_retry(self, texts: list[str], error: Exception, retries: int, deadline: float) -> int:
        """Sleep before the next try and return the retries made so far; raise when none is left or the
        wait would pass the deadline."""
        if retries >= self._max_retries:
            raise self._failure(
                texts,
                error,
                f"timeouts and retryable statuses retried embedding_api_max_retries={self._max_retries} times",
            ) from error
        wait_s = _retry_after_s(error)
        if wait_s is None:
            wait_s = backoff.delay_s(retries + 1, RETRY_FIRST_S, RETRY_MAX_S) * (1 - 0.25 * random.random())
        if time.monotonic() + wait_s >= deadline:
            raise self._failure(texts, error, self._deadline_spent(retries)) from error
        time.sleep(wait_s)
        return retries + 1

    def _deadline_spent(self, retries: int) -> str:
        return f"embedding_api_deadline_s={self._deadline_s:g} spent, after {retries} retries"

    def _failure(self, texts: list[str], error: BaseException, why: str) -> EmbeddingServerError:
        return EmbeddingServerError(
            f"embedding_api_base_url: the request for {len(texts)} texts failed ({why}): "
            f"{type(error).__name__}: {error}"[:_MAX_ERROR_CHARS]
        )

    def _cut_after_refusal(
        self, texts: list[str], sent: list[str], error: APIStatusError
    ) -> list[str] | None:
        """The texts cut shorter than `sent` after a too-long refusal: to the window the refusal states
        when it is new, else to half the longest; None when nothing can be cut any more."""
        stated = _stated_window(error)
        shorter = None
        if stated is not None and self._window.learn(stated):
            shorter = [self._window.cut(text) for text in texts]
        if shorter is None or shorter == sent:
            longest = max(len(text) for text in sent)
            if longest <= 1:
                return None
            shorter = [self._window.cut(text, longest // 2) for text in texts]
        if self._first_time("cut"):
            log.warning(
                "the embeddings server refused texts as too long (HTTP %d); they are cut and sent again "
                "(%s). Set embedding_api_max_input_tokens to cut before sending, or let the server "
                "truncate (TEI: --auto-truncate)",
                error.status_code,
                self._truncation(),
            )
        return shorter

    def _truncation(self) -> str:
        """Who cuts texts to the model's window, as the log lines say it."""
        window = self._window.max_tokens
        if window is None:
            return "texts not cut here: the server truncates, or refuses and they are cut then"
        how = "its tokenizer" if self._window.exact else f"{CHARS_PER_TOKEN} characters per token"
        return f"texts cut here to {window} tokens ({how})"

    def _first_time(self, what: str) -> bool:
        with self._said_lock:
            if what in self._said:
                return False
            self._said.add(what)
            return True

    def _checked_rows(self, response: object, count: int) -> np.ndarray:
        """The reply's vectors in input order, refused unless it names the model asked for and has one
        vector per text, each of the dimension: `embedding_api_dim`, else the one the first reply had."""
        if not isinstance(response, CreateEmbeddingResponse):
            raise EmbeddingServerError("embedding_api_base_url: the embeddings server's reply is malformed")
        self._check_model(getattr(response, "model", None))
        data = getattr(response, "data", None)
        if not isinstance(data, list):
            raise EmbeddingServerError("embedding_api_base_url: the embeddings server's reply is malformed")
        if len(data) != count:
            raise EmbeddingServerError(
                f"embedding_api_base_url: the embeddings server answered {len(data)} vectors for {count} texts"
            )
        indexes = [getattr(item, "index", None) for item in data]
        if sorted(index for index in indexes if isinstance(index, int)) != list(range(count)):
            raise EmbeddingServerError("embedding_api_base_url: the reply's vector indexes are not 0..n-1")
        ordered = sorted(data, key=lambda item: item.index)
        try:
            rows = np.array([item.embedding for item in ordered], dtype=np.float32)
        except (TypeError, ValueError) as error:  # ragged rows, or not numbers
            raise EmbeddingServerError(
                "embedding_api_base_url: the reply's vectors are not rows of numbers of one length"
            ) from error
        if rows.ndim != 2 or rows.shape[1] == 0 or not np.isfinite(rows).all():
            raise EmbeddingServerError("embedding_api_base_url: the reply's vectors are empty or not finite")
        self._check_dim(rows.shape[1])
        return rows

    def _check_model(self, answered: object) -> None:
        if not isinstance(answered, str) or not answered:
            if self._first_time("unnamed"):
                log.warning(
                    "the embeddings server's replies name no model: they cannot be checked against %s",
                    self._model,
                )
            return
        if answered == self._model:
            return
        error = EmbeddingServerModelError(
            f"embedding_model_name: the embeddings server answered with model {answered!r}, not "
            f"{self._model!r}; its vectors are refused (spaces built with one must not get the other's). "
            f"Serve {self._model!r} there, or set embedding_model_name to {answered!r} and re-embed the "
            f"spaces: `memoryos reindex --model {answered}`"
        )
        if self._first_time(f"model {answered}"):
            log.error("%s", error)
        raise error

    def _check_dim(self, answered: int) -> None:
        with self._dim_lock:
            if self._dim is None:
                self._dim = answered
                return
        if answered == self._dim:
            return
        if self._configured_dim is not None:
            raise EmbeddingServerError(
                f"embedding_api_dim: configured {self._configured_dim}, but the embeddings server's model "
                f"{self._model!r} answers vectors of dimension {answered}"
            )
        raise EmbeddingServerError(
            f"embedding_api_base_url: the embeddings server's model {self._model!r} answered dimension "
            f"{answered} after {self._dim}: it changed model while in use"
        )


def _too_long(error: APIStatusError) -> bool:
    """Whether the server refused the request for its texts' length: TEI's 413, or a 400/422 saying so."""
    return error.status_code == 413 or (
        error.status_code in (400, 422) and bool(_TOO_LONG.search(str(error)))
    )


def _retryable(error: APIStatusError) -> bool:
    return error.status_code in RETRYABLE_STATUSES or error.status_code >= 500


def _stated_window(error: APIStatusError) -> int | None:
    found = _STATED_WINDOW.search(str(error))
    return int(found.group(1)) if found and int(found.group(1)) > 0 else None


def _retry_after_s(error: Exception) -> float | None:
    """The server's `retry-after-ms` or `retry-after` (seconds), when within `MAX_RETRY_AFTER_S`."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            wait_s = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if 0 <= wait_s <= MAX_RETRY_AFTER_S:
            return wait_s
    return None
