"""The sentence-transformers `Embedder`: MiniLM bundled offline, bge-m3 and Qwen3-Embedding from the HF cache.

sentence-transformers and torch take ~5 s to import, so nothing here imports them at module level, and on
CPU they are not imported at all once the model's ONNX export has been checked against PyTorch: the
embedder then runs the export with the model's tokenizer alone (`onnx/encoder.py`, `onnx/manifest.py`).
PyTorch is loaded when there is no verified export yet (the first run makes one), when the model's files
changed, on a GPU, or when `embedding_runtime="torch"`. Where PyTorch is not installed (the default install;
it is the `torch` extra), the first run on CPU builds the export and manifest from the model's files instead
and checks them against PyTorch's recorded vectors (`onnx/torch_free.py`); what only PyTorch can do is then
an error naming the extra (`device.choose_route`). Weights are never downloaded at runtime; a model
missing locally is a configuration error with the fix in its message.
"""

import contextlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.embedding.base import unit_rows
from memoryos.embedding.cache import EmbeddingCache
from memoryos.embedding.device import (
    TORCH_EXTRA,
    Route,
    choose_route,
    choose_torch_threads,
    cpu_without_torch,
    requested_device,
    run_size,
    select_device,
    use_fp16,
    use_onnx_queries,
)
from memoryos.embedding.model_location import resolve_model_location
from memoryos.embedding.onnx.build import UnsupportedModelError
from memoryos.embedding.onnx.encoder import OnnxEncoder, TorchFreeUnavailableError, runtime_versions
from memoryos.embedding.onnx.manifest import (
    ExportManifest,
    directory_fingerprint,
    manifest_path,
    model_directory,
    read_manifest,
    stale_because,
)
from memoryos.embedding.random_weights import refuse_random_weights
from memoryos.embedding.truncation import WidthProbe, count_truncated, may_exceed
from memoryos.errors import MemoryOSError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from memoryos.embedding.onnx.queries import OnnxQueryEncoder

logger = logging.getLogger(__name__)


def model_cache_dir(configured: Path | None) -> Path:
    """Where exported models live: the configured directory, else the user's cache directory."""
    if configured is not None:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryos"


def _onnx_importable() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def _torch_free_importable() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "tokenizers"))


def _torch_importable() -> bool:
    """Whether the PyTorch path can load (a plain install has neither package: `choose_route`)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "sentence_transformers"))


class SentenceTransformerEmbedder:
    """`Embedder` over a local sentence-transformers model, with an LRU cache in front of it.

    On first use it decides, once, what encodes: on CPU, with a verified ONNX export of this model whose
    files have not changed, `OnnxEncoder` — queries and page batches, no PyTorch in the process; otherwise
    the sentence-transformers model on PyTorch, which on CPU also (re)makes the export and its manifest for
    the next process, and sends queries to ONNX Runtime (`OnnxQueryEncoder`) when `embedding_runtime`
    allows. Why PyTorch was needed is logged once at INFO.

    Thread-safe: one lock serializes loading and PyTorch calls (torch already uses every configured thread
    for one batch); the cache has its own lock, so cache hits never wait for a running batch. ONNX Runtime
    encodes run outside that lock, so a query does not queue behind a page batch.
    """

    def __init__(self, config: MemoryConfig) -> None:
        self._name = config.embedding_model_name
        self._model_kwargs: dict[str, Any] = dict(config.embedding_model_kwargs)
        self._requested_device = config.embedding_device
        self._batch_size = config.embedding_batch_size
        self._cpu_run_size = config.embedding_cpu_run_size
        self._torch_threads = config.torch_threads
        self._runtime = config.embedding_runtime
        self._speed_only = config.embedding_speed_only
        self._model_cache_dir = config.model_cache_dir
        self._show_progress = config.show_progress
        self._query_encoder: OnnxQueryEncoder | None = None
        self._torch_free: OnnxEncoder | None = None
        self._torch_free_failed = False
        self._export_suspect = False
        self._decided = False
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
        """Vector dimension: from the verified export's manifest on CPU, else from the loaded model."""
        self._ready()
        assert self._dim is not None  # set before the runtime is published
        return self._dim

    @property
    def query_runtime(self) -> str:
        """ "onnx" or "torch": what encodes queries, once the first use has decided it."""
        return "onnx" if self._torch_free is not None or self._query_encoder is not None else "torch"

    @property
    def torch_free(self) -> bool:
        """Whether this embedder runs without PyTorch (once the first use has decided it)."""
        return self._torch_free is not None

    def will_load_pytorch(self) -> bool:
        """Whether encoding loads PyTorch, told without loading it (reads the manifest): for a message
        before a long wait."""
        if self._decided:
            return self._torch_free is None and self._model is None
        try:
            route = self._route()
        except MemoryOSError:  # PyTorch is needed and missing: encoding says so, and loads nothing
            return False
        return route != "manifest-or-build" and self._torch_free_manifest(route)[0] is None

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        self._cache.discard(texts)

    def page_runtime(self) -> "OnnxEncoder | SentenceTransformer":
        """What encodes page batches, deciding it on first use: the torch-free encoder, or the PyTorch
        model. The embedding engine runs it in stages of its own (`engine/stages.py`), outside this
        embedder's cache and lock: its encoding thread is the model's only caller."""
        torch_free = self._ready()
        return torch_free if torch_free is not None else self._loaded_model()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """Return float32 unit rows of shape (len(texts), dim); cached texts do not reach the model.

        Duplicates within one call are encoded once. Batches are not pre-sorted here: both runtimes sort
        each call's texts by length to minimize padding.
        """
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._cache.rows(texts, is_query, lambda missing: self._encode_with_model(missing, is_query))

    def _encode_with_model(self, texts: list[str], is_query: bool) -> np.ndarray:
        torch_free = self._ready()
        if torch_free is not None:
            vectors, truncated = torch_free.encode(
                texts, is_query=is_query, batch_size=run_size("cpu", self._batch_size, self._cpu_run_size)
            )
            if truncated:
                self._log_truncated(truncated, len(texts), torch_free.manifest.max_seq_length)
            return unit_rows(vectors)
        model = self._loaded_model()
        # Every model has a "query" entry in `prompts` (empty unless its config defines one), so only a
        # non-empty prompt means the model encodes queries differently.
        prompt = (model.prompts.get("query") or "") if is_query else ""
        max_tokens = model.max_seq_length
        # Texts that might be truncated, by a bound on their token count (most pages and queries are not).
        suspects = [] if max_tokens is None else self._truncation_suspects(model, prompt, texts, max_tokens)
        query_encoder = self._query_encoder if is_query else None
        if query_encoder is not None:
            self._warn_if_truncated(model, suspects, len(texts), max_tokens)
            return unit_rows(query_encoder.encode(texts))
        with self._lock:
            probe = WidthProbe(model, max_tokens or 0)
            with probe if suspects else contextlib.nullcontext():
                vectors = model.encode(
                    texts,
                    prompt_name="query" if prompt else None,
                    batch_size=run_size(str(model.device), self._batch_size, self._cpu_run_size),
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
            if probe.reached:  # a batch reached the limit: count exactly how many suspects went over it
                self._warn_if_truncated(model, suspects, len(texts), max_tokens)
        return unit_rows(vectors)

    # --- choosing the runtime -------------------------------------------------------------------------
    def _ready(self) -> OnnxEncoder | None:
        """Decide the runtime on first use: the torch-free encoder, or (None) the loaded PyTorch model."""
        if not self._decided:
            with self._lock:
                if not self._decided:
                    refuse_random_weights(resolve_model_location(self._name), self._speed_only)
                    route = self._route()
                    torch_free = self._open_torch_free(route)
                    if torch_free is None and route == "manifest-or-build":
                        torch_free = self._build_torch_free()
                    if torch_free is not None:
                        # As on the PyTorch path: on CPU the tokenizers pool competes with the model's threads.
                        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                        self._dim = torch_free.dim
                        self._torch_free = torch_free
                    else:
                        self._load_model_locked()
                    self._decided = True
        return self._torch_free

    def _route(self) -> Route:
        kwargs_device = self._model_kwargs.get("device")
        device: str = self._requested_device if kwargs_device is None else str(kwargs_device)
        field = "embedding_device" if kwargs_device is None else "embedding_model_kwargs.device"
        cpu_known = cpu_without_torch(self._requested_device, None if kwargs_device is None else device)
        return choose_route(self._runtime, device, cpu_known, _torch_importable(), field)

    def _onnx_dir(self) -> Path:
        return model_cache_dir(self._model_cache_dir) / "onnx"

    def _torch_free_manifest(self, route: Route) -> tuple[ExportManifest | None, str]:
        """The verified manifest this process may use without PyTorch, or None and why not ("" when
        PyTorch was asked for, or the model is not found: the next step says so)."""
        if route == "torch":
            if self._runtime == "torch":
                return None, ""
            device = self._model_kwargs.get("device", self._requested_device)
            if device == "auto":
                return None, "a GPU may be present (embedding_device 'auto'), so torch chooses the device"
            return None, f"the device asked for is {device!r}"
        if not _torch_free_importable():
            return None, "onnxruntime or tokenizers is not installed"
        model_dir = model_directory(resolve_model_location(self._name), self._model_kwargs)
        if model_dir is None:
            return None, ""
        manifest, reason = read_manifest(manifest_path(self._onnx_dir(), model_dir, self._model_kwargs))
        if manifest is None:
            return None, reason
        try:
            stale = stale_because(manifest, directory_fingerprint(model_dir), runtime_versions())
        except (OSError, ImportError) as error:  # an unreadable model file, a broken onnxruntime install
            return None, f"{type(error).__name__}: {error}"
        return (None, stale) if stale else (manifest, "")

    def _open_torch_free(self, route: Route) -> OnnxEncoder | None:
        """The torch-free encoder when a verified manifest fits and its files reproduce the recorded
        vectors; else None, with the reason logged at INFO."""
        manifest, reason = self._torch_free_manifest(route)
        encoder = None
        if manifest is not None:
            encoder, reason = self._checked_encoder(manifest)
            self._torch_free_failed = encoder is None
        if encoder is None and reason:
            step = (
                "building its ONNX export without PyTorch"
                if route == "manifest-or-build"
                else "loading PyTorch"
            )
            logger.info("embedding: %s for %s: %s", step, self._name, reason)
        return encoder

    def _build_torch_free(self) -> OnnxEncoder:
        """Without PyTorch: build the export and manifest from the model's files (`onnx/torch_free.py`) and
        open them. Raises MemoryOSError, saying how to install PyTorch, when this model cannot be built or
        its build does not reproduce PyTorch's recorded vectors."""
        from memoryos.embedding.onnx.torch_free import build_torch_free

        model_dir = model_directory(resolve_model_location(self._name), self._model_kwargs)
        if model_dir is None:
            raise _missing_model_error(self._name)
        cannot = f"embedding_model_name: {self._name!r} cannot run without PyTorch"
        hint = (
            f"Install the torch extra ({TORCH_EXTRA}) once: that process exports the model and checks the "
            "export against PyTorch, and later processes run on it without PyTorch"
        )
        started = time.perf_counter()
        try:
            manifest = build_torch_free(
                manifest_path(self._onnx_dir(), model_dir, self._model_kwargs),
                name=self._name,
                model_dir=model_dir,
                kwargs=self._model_kwargs,
                fingerprint=directory_fingerprint(model_dir),
                threads=choose_torch_threads(self._torch_threads, os.cpu_count()),
            )
        except UnsupportedModelError as error:
            raise MemoryOSError(f"{cannot}: {error}. {hint}") from error
        if not manifest.verified:
            raise MemoryOSError(f"{cannot}: its ONNX build {manifest.reason}. {hint}")
        logger.info(
            "embedding: built the ONNX export of %s without PyTorch in %.1f s",
            self._name,
            time.perf_counter() - started,
        )
        encoder, reason = self._checked_encoder(manifest)
        if encoder is None:
            raise MemoryOSError(f"{cannot}: the export just built does not load: {reason}. {hint}")
        return encoder

    def _checked_encoder(self, manifest: ExportManifest) -> tuple[OnnxEncoder | None, str]:
        threads = choose_torch_threads(self._torch_threads, os.cpu_count())
        try:
            encoder = OnnxEncoder.open(manifest, self._onnx_dir(), threads)
        except TorchFreeUnavailableError as error:
            return None, str(error)
        try:
            difference = encoder.check()
        except TorchFreeUnavailableError as error:
            self._export_suspect = True  # it reproduced these vectors when its manifest was written
            return None, str(error)
        logger.info(
            "embedding: %s runs on ONNX Runtime without PyTorch (%s, checked against %s when exported; "
            "probes reproduced within %.0e)",
            self._name,
            manifest.export,
            "PyTorch"
            if manifest.checked_against == "pytorch"
            else f"PyTorch's recorded vectors ({manifest.checked_against})",
            difference,
        )
        return encoder, ""

    def _loaded_model(self) -> "SentenceTransformer":
        """The sentence-transformers model, loaded on first call (also on the torch-free path: for tools
        and tests that need the PyTorch model itself)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._load_model_locked()
        assert self._model is not None
        return self._model

    def _load_model_locked(self) -> None:
        model = self._load()
        dim = model.get_embedding_dimension()
        if dim is None:
            raise MemoryOSError(f"embedding_model_name: {self._name!r} does not report its dimension")
        self._dim = dim
        self._query_encoder = self._build_query_encoder(model)
        self._model = model

    def _build_query_encoder(self, model: "SentenceTransformer") -> "OnnxQueryEncoder | None":
        """On CPU: the ONNX query encoder (exporting the model first if needed) and the manifest that lets
        the next process go without PyTorch. None when PyTorch serves queries."""
        from memoryos.embedding.onnx.queries import OnnxQueryEncoder, OnnxUnavailableError

        device = str(model.device)
        if not use_onnx_queries(self._runtime, device, _onnx_importable(), use_fp16(device)):
            return None
        prompt = model.prompts.get("query") or ""
        threads = choose_torch_threads(self._torch_threads, os.cpu_count())
        try:
            encoder = OnnxQueryEncoder.build(model, self._onnx_dir(), threads, prompt, self._export_suspect)
        except (OnnxUnavailableError, OSError) as error:
            if self._runtime == "onnx":
                raise MemoryOSError(
                    f"embedding_runtime: ONNX Runtime cannot serve {self._name!r}: {error}"
                ) from error
            logger.warning("embedding: queries stay on PyTorch for %s: %s", self._name, error)
            return None
        logger.info("embedding: queries of %s run on ONNX Runtime", self._name)
        if _torch_free_importable():
            self._record_manifest(model, encoder, prompt, threads)
        return encoder

    def _record_manifest(
        self, model: "SentenceTransformer", encoder: "OnnxQueryEncoder", prompt: str, threads: int
    ) -> None:
        """Write the torch-free manifest unless a verified one already describes these files and this
        export, and did not fail in this process."""
        from memoryos.embedding.onnx.queries import record_manifest

        model_dir = model_directory(resolve_model_location(self._name), self._model_kwargs)
        if model_dir is None:
            return
        path = manifest_path(self._onnx_dir(), model_dir, self._model_kwargs)
        try:
            fingerprint = directory_fingerprint(model_dir)
            existing, _ = read_manifest(path)
            if (
                existing is not None
                and not stale_because(existing, fingerprint, runtime_versions())
                and not encoder.exported
                and not self._torch_free_failed
                and existing.export == encoder.path.name
                and existing.export_size == encoder.path.stat().st_size
            ):
                return
            manifest = record_manifest(
                model,
                encoder.path,
                path,
                name=self._name,
                model_dir=model_dir,
                kwargs=self._model_kwargs,
                fingerprint=fingerprint,
                prompt=prompt,
                threads=threads,
            )
        except Exception as error:  # a read-only cache, a library surprise: this process is served anyway
            logger.warning("embedding: could not record the export's manifest for %s: %s", self._name, error)
            return
        if not manifest.verified:
            logger.info("embedding: %s will keep loading PyTorch: %s", self._name, manifest.reason)

    # --- truncation warnings --------------------------------------------------------------------------
    def _truncation_suspects(
        self, model: "SentenceTransformer", prompt: str, texts: list[str], max_tokens: int
    ) -> list[str]:
        """The texts, prompt included, that `may_exceed` cannot rule out."""
        if self._special_tokens is None:
            count = getattr(model.tokenizer, "num_special_tokens_to_add", None)
            self._special_tokens = int(count(pair=False)) if callable(count) else max_tokens
        special = self._special_tokens
        prompted = (prompt + text for text in texts) if prompt else texts
        return [text for text in prompted if may_exceed(text, max_tokens, special)]

    def _warn_if_truncated(
        self, model: "SentenceTransformer", suspects: list[str], total: int, max_tokens: int | None
    ) -> None:
        """Log how many of a call's `total` texts exceed the model's limit of `max_tokens` (the model keeps
        only their beginning). Only `suspects` can: the others were ruled out without the tokenizer."""
        if not suspects or max_tokens is None:
            return
        self._log_truncated(self._count_truncated(model, suspects, max_tokens), total, max_tokens)

    def _log_truncated(self, truncated: int, total: int, max_tokens: int | None) -> None:
        if truncated:
            logger.warning(
                "embedding: %d of %d texts exceed %s's limit of %s tokens and were truncated",
                truncated,
                total,
                self._name,
                max_tokens,
            )

    def _count_truncated(self, model: "SentenceTransformer", texts: list[str], max_tokens: int) -> int:
        """How many of `texts` tokenize to more than `max_tokens` (a method: tests count its calls)."""
        return count_truncated(model, texts, max_tokens)

    # --- loading PyTorch ------------------------------------------------------------------------------
    def _load(self) -> "SentenceTransformer":
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(choose_torch_threads(self._torch_threads, os.cpu_count()))
        kwargs = dict(self._model_kwargs)
        requested, field = requested_device(self._requested_device, kwargs)
        kwargs.pop("device", None)
        device = select_device(requested, torch.cuda.is_available(), field)
        if not device.startswith("cuda"):
            # On CPU the tokenizers thread pool keeps competing with torch after a batch encode (docs/engine.md,
            # "spinning off"). On a GPU the forward pass leaves the cores idle, and the
            # pool tokenizes each page batch in parallel (the environment variable is read on every call).
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        location = resolve_model_location(self._name)
        refuse_random_weights(location, self._speed_only)
        try:
            with _progress_bars(self._show_progress):
                model = SentenceTransformer(location, device=device, local_files_only=True, **kwargs)
        except OSError as exc:
            raise _missing_model_error(self._name) from exc
        except TypeError as exc:  # an argument SentenceTransformer does not take
            raise MemoryOSError(f"embedding_model_kwargs: {exc}") from exc
        fp16 = use_fp16(device, _names_dtype(kwargs))
        if fp16:
            model.half()
        logger.info("embedding: loaded %s on %s with PyTorch (fp16=%s)", self._name, device, fp16)
        return model


def _missing_model_error(name: str) -> MemoryOSError:
    return MemoryOSError(
        f"embedding_model_name: the weights of {name!r} must be in the local Hugging Face "
        "cache (HF_HOME / HF_HUB_CACHE); MemoryOS never downloads models at runtime. Fetch them once "
        f"with `hf download {name}` on a machine with network access"
    )


@contextlib.contextmanager
def _progress_bars(show: bool) -> Iterator[None]:
    """transformers' "Loading weights ... 103/103" bar, shown only when asked (`show_progress`, the CLI's
    `--verbose`): the global switch is turned off around the load and restored after it."""
    from transformers.utils import logging as transformers_logging

    enabled = transformers_logging.is_progress_bar_enabled()
    if show or not enabled:
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


def _names_dtype(kwargs: dict[str, Any]) -> bool:
    """Whether the caller chose the weights' dtype (`model_kwargs` goes to transformers' from_pretrained)."""
    model_kwargs = kwargs.get("model_kwargs")
    return isinstance(model_kwargs, dict) and bool({"torch_dtype", "dtype"} & model_kwargs.keys())
