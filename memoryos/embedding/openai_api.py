"""`OpenAIAPIEmbedder`: embeddings from an OpenAI-compatible server (TEI, vLLM, Ollama, OpenAI).

Chosen by `embedding_api_base_url`; `embedding_model_name` is the model the server is asked for. Each
request carries at most `embedding_api_batch_size` texts and is bounded by `embedding_api_timeout_s`;
timeouts, connection errors, 408/409/429 and 5xx are retried by the `openai` client itself
(`embedding_api_max_retries`, exponential backoff from 0.5 s to 8 s, or the server's `retry-after`), so
one request fails after at most (retries + 1) x timeout plus backoff. What then fails, and a reply with
the wrong number of vectors or the wrong dimension, raises `EmbeddingServerError`: the batcher keeps the
pages pending and retries later. The key goes in the Authorization header only; only counts are logged.

The space records the model as `openai-api:<model>` (`EMBEDDINGS_API_PREFIX`): the same model name run
locally (or an earlier local run) may differ in precision, truncation or query prompt, so the vectors
are never mixed silently; moving the server (another URL) keeps the name.
"""

import logging
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

import numpy as np
from openai import OpenAI, OpenAIError
from openai.types import CreateEmbeddingResponse

from memoryos.config import MemoryConfig
from memoryos.embedding.base import unit_rows
from memoryos.embedding.cache import EmbeddingCache
from memoryos.errors import EMBEDDINGS_API_PREFIX, EmbeddingServerError, InvalidInputError
from memoryos.llm.endpoint import PLACEHOLDER_API_KEY

log = logging.getLogger(__name__)

_DIM_PROBE_TEXT = "dimension probe"
"""Embedded once when the dimension is asked for before any reply has told it (a new space records it)."""

_MAX_ERROR_CHARS = 300


class OpenAIAPIEmbedder:
    """`Embedder` over `POST /embeddings` of an OpenAI-compatible server, with the LRU cache in front of
    it (`embedding_cache_size`; `forget_texts` empties it as for a local model). Thread-safe: the client
    pools connections for every thread, and the dimension is learned under a lock. Making one logs the
    server's host and the model at INFO (the process's shared embedder is made once per configuration)."""

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
            max_retries=config.embedding_api_max_retries,
        )
        self._max_retries = config.embedding_api_max_retries
        self._model = config.embedding_model_name
        self._batch_size = config.embedding_api_batch_size
        self._configured_dim = config.embedding_api_dim
        self._query_prefix = config.embedding_api_query_prefix
        self._cache = EmbeddingCache(config.embedding_cache_size)
        self._dim = config.embedding_api_dim
        self._dim_lock = threading.Lock()
        server = urlsplit(config.embedding_api_base_url)  # its host and port: never a user or password
        log.info(
            "embedding backend: embeddings server %s:%s, model %s%s",
            server.hostname,
            server.port or ("443" if server.scheme == "https" else "80"),
            self._model,
            "" if key else ", no API key",
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
            self._request([_DIM_PROBE_TEXT])
        assert self._dim is not None  # set by the reply's check
        return self._dim

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        self._cache.discard(texts)

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """Float32 unit rows of shape (len(texts), dim), one request per `embedding_api_batch_size`
        texts; cached texts and repeats within the call are not sent."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._cache.rows(texts, is_query, lambda missing: self._encode_missing(missing, is_query))

    def _encode_missing(self, texts: list[str], is_query: bool) -> np.ndarray:
        sent = [self._query_prefix + text for text in texts] if is_query else texts
        batches = [sent[start : start + self._batch_size] for start in range(0, len(sent), self._batch_size)]
        return np.concatenate([self._request(batch) for batch in batches])

    def _request(self, texts: list[str]) -> np.ndarray:
        """One request's vectors, checked (`_checked_rows`) and normalized."""
        try:
            # "float": the client asks for base64 unless told, which not every compatible server speaks.
            response = self._client.embeddings.create(model=self._model, input=texts, encoding_format="float")
        except (OpenAIError, ValueError) as error:  # ValueError: a 200 whose body is not JSON
            raise EmbeddingServerError(
                f"embedding_api_base_url: the request for {len(texts)} texts failed (timeouts and "
                f"retryable statuses retried embedding_api_max_retries={self._max_retries} times): "
                f"{type(error).__name__}: {error}"[:_MAX_ERROR_CHARS]
            ) from error
        rows = self._checked_rows(response, len(texts))
        log.debug("embeddings request done", extra={"model": self._model, "texts": len(texts)})
        return unit_rows(rows)

    def _checked_rows(self, response: object, count: int) -> np.ndarray:
        """The reply's vectors in input order, refused unless there is one per text, each of the
        dimension: `embedding_api_dim`, else the one the first reply had."""
        data = response.data if isinstance(response, CreateEmbeddingResponse) else None
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
