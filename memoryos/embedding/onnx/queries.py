"""The ONNX export of a model's transformer, made and checked with PyTorch loaded.

For a short text, PyTorch's per-operator dispatch costs more than the arithmetic, so ONNX Runtime encodes
a query several times faster with the same vectors (docs/engine.md). The export serves two encoders:

- `OnnxQueryEncoder`, in a process that loaded PyTorch anyway (the first run, a model without a verified
  manifest): the export for the transformer, sentence-transformers' own `preprocess` and pooling modules
  around it, checked against PyTorch on probe texts at every load.
- `record_manifest` describes the whole pipeline (tokenizer, pooling, normalization, prompt, dimension)
  and checks the torch-free encoder built from that description against PyTorch, once, when the export
  is made or the model's files changed; later processes then embed without importing PyTorch
  (`onnx/manifest.py`, `onnx/encoder.py`).

Only the transformer is exported. The export is cached under a fingerprint of the weights and library
versions: a stale, foreign or wrongly traced export is never used.
"""

import hashlib
import logging
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from memoryos.embedding.onnx.encoder import cpu_session_options, runtime_versions, verify_manifest
from memoryos.embedding.onnx.manifest import (
    FORMAT,
    POOLING_MODES,
    PROBES,
    ExportManifest,
    vectors_text,
    write_manifest,
)
from memoryos.errors import MemoryOSError
from memoryos.storage.atomic import atomic_write_bytes

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

OPSET = 17
PROBE_TEXTS = (
    "When did she start the pottery class?",
    "User: We moved to a new city last spring, and the kids finally like their school. "
    "Assistant: That is a big change; how are you settling in?",
)
"""Different lengths, so the check also covers padding within a batch."""
MAX_PROBE_DIFFERENCE = 1e-4
"""Largest per-component difference from PyTorch accepted (measured: 2e-7 for MiniLM)."""


class OnnxUnavailableError(MemoryOSError):
    """The model cannot be served by ONNX Runtime (architecture, prompt handling, export or check failed)."""


class OnnxQueryEncoder:
    """Encodes texts with an ONNX Runtime session over the exported transformer of a loaded model
    (`path`: the export)."""

    def __init__(self, model: "SentenceTransformer", session: Any, prompt: str, path: Path) -> None:
        self.path = path
        self.exported = False
        """Whether `build` made the export (rather than loading a cached one)."""
        self._model = model
        self._session = session
        self._input_names = [item.name for item in session.get_inputs()]
        self._prompt = prompt

    @classmethod
    def build(
        cls, model: "SentenceTransformer", cache_dir: Path, threads: int, prompt: str, suspect: bool = False
    ) -> "OnnxQueryEncoder":
        """Load the cached export of `model` (exporting it first if absent) and check it against PyTorch.

        A cached export that cannot be loaded is exported again; one that loads but disagrees with PyTorch
        only when `suspect` (it no longer reproduced the vectors its manifest recorded: damaged since).
        Otherwise the disagreement is the exporter's, and exporting again would only repeat it.
        Raises OnnxUnavailableError when this model cannot be served: the caller keeps PyTorch.
        """
        _check_supported(model, prompt)
        path = cache_dir / f"{_fingerprint(model)}.onnx"
        if path.exists():
            try:
                session = _session(path, threads)
            except OnnxUnavailableError as error:
                logger.warning("embedding: exporting the query encoder again: %s", error)
            else:
                encoder = cls(model, session, prompt, path)
                try:
                    encoder._check_against(model)
                    return encoder
                except OnnxUnavailableError as error:
                    if not suspect:
                        raise
                    logger.warning("embedding: exporting the query encoder again: %s", error)
        _export(model, path)
        encoder = cls(model, _session(path, threads), prompt, path)
        encoder.exported = True
        encoder._check_against(model)
        return encoder

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit rows as the model's own pipeline computes them; ONNX Runtime sessions are thread-safe."""
        import torch

        features = self._model.preprocess([self._prompt + text for text in texts])
        feeds = {name: features[name].numpy().astype(np.int64) for name in self._input_names}
        hidden = self._session.run(None, feeds)[0]
        pooled = {"token_embeddings": torch.from_numpy(hidden), "attention_mask": features["attention_mask"]}
        with torch.inference_mode():
            for module in list(self._model)[1:]:
                pooled = module(pooled)
        vectors = pooled["sentence_embedding"].float().numpy()
        # `truncate_dim` is applied by SentenceTransformer.encode, after its modules, so here as well.
        truncate_dim = self._model.truncate_dim
        return vectors[:, :truncate_dim] if truncate_dim is not None else vectors

    def _check_against(self, model: "SentenceTransformer") -> None:
        texts = list(PROBE_TEXTS)
        expected = model.encode(
            [self._prompt + text for text in texts], convert_to_numpy=True, show_progress_bar=False
        )
        difference = float(np.abs(self.encode(texts) - expected).max())
        if difference > MAX_PROBE_DIFFERENCE:
            raise OnnxUnavailableError(
                f"the ONNX export differs from PyTorch by {difference:.1e} (limit {MAX_PROBE_DIFFERENCE:.0e})"
            )


def _check_supported(model: "SentenceTransformer", prompt: str) -> None:
    """A Transformer first module, and no prompt that pooling must leave out (that needs the prompt length,
    which only sentence-transformers' own encode tracks)."""
    from sentence_transformers.sentence_transformer.modules import Transformer

    if not isinstance(model[0], Transformer) or getattr(model[0], "auto_model", None) is None:
        raise OnnxUnavailableError(f"first module is {type(model[0]).__name__}, not a Transformer")
    if prompt and any(getattr(module, "include_prompt", True) is False for module in model):
        raise OnnxUnavailableError("the query prompt is excluded from pooling")


def _transformer(model: "SentenceTransformer") -> "torch.nn.Module":
    """The Hugging Face model inside the first module (checked by `_check_supported`)."""
    return cast("torch.nn.Module", model[0].auto_model)


def _fingerprint(model: "SentenceTransformer") -> str:
    """Names, shapes and checksums of every weight, plus library versions: new weights or a new exporter
    mean a new file, while the probe check catches anything this misses."""
    import onnxruntime
    import torch
    import transformers

    digest = hashlib.sha256(
        f"{torch.__version__}|{transformers.__version__}|{onnxruntime.__version__}".encode()
    )
    for name, tensor in _transformer(model).state_dict().items():
        flat = tensor.detach().float().flatten()
        digest.update(f"{name}|{tuple(tensor.shape)}|{float(flat.double().sum())!r}".encode())
        digest.update(flat[:64].numpy().tobytes())
    return digest.hexdigest()[:32]


def _export(model: "SentenceTransformer", path: Path) -> None:
    import torch

    transformer = _transformer(model).eval()
    example = model.preprocess(list(PROBE_TEXTS))
    names = [name for name in model.tokenizer.model_input_names if name in example]

    class HiddenStates(torch.nn.Module):
        """The transformer with positional inputs and one output, as the exporter wants."""

        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.transformer(**dict(zip(names, inputs, strict=True))).last_hidden_state

    axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "hidden"]}
    try:
        with tempfile.TemporaryDirectory() as scratch, warnings.catch_warnings(), torch.no_grad():
            exported = Path(scratch) / "model.onnx"
            warnings.simplefilter("ignore")  # tracer warnings about shapes: the probe check is the judge
            torch.onnx.export(
                HiddenStates(),
                tuple(example[name] for name in names),
                exported,
                input_names=names,
                output_names=["hidden"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
            data = exported.read_bytes()
    except Exception as error:  # any exporter failure means: serve this model with PyTorch
        raise OnnxUnavailableError(f"export failed: {error}") from error
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    logger.info("embedding: exported the query encoder to %s", path)


def _session(path: Path, threads: int) -> Any:
    import onnxruntime

    try:
        return onnxruntime.InferenceSession(
            str(path), cpu_session_options(threads), providers=["CPUExecutionProvider"]
        )
    except Exception as error:  # a truncated or foreign file
        raise OnnxUnavailableError(f"cannot load {path}: {error}") from error


def record_manifest(
    model: "SentenceTransformer",
    export: Path,
    path: Path,
    *,
    name: str,
    model_dir: Path,
    kwargs: dict[str, Any],
    fingerprint: str,
    prompt: str,
    threads: int,
) -> ExportManifest:
    """Describe `model`'s pipeline for the torch-free encoder, build that encoder from the description and
    `export`, compare it with PyTorch on every probe, and write the manifest to `path`: `verified` when it
    matched within `MAX_PROBE_DIFFERENCE`, else with the reason (a pooling mode the encoder does not
    implement, a tokenizer it cannot read, vectors that differ). Returns what was written."""
    import sentence_transformers
    import torch
    import transformers

    texts = [text for text, _ in PROBES]
    flags = [is_query for _, is_query in PROBES]
    expected = probe_vectors(model, prompt, texts, flags)
    tokenizer_file = f"{path.stem}.tokenizer.json"
    base: dict[str, Any] = {
        "format": FORMAT,
        "verified": False,
        "model_name": name,
        "model_dir": str(model_dir),
        "model_kwargs": kwargs,
        "fingerprint": fingerprint,
        "export": export.name,
        "export_size": export.stat().st_size,
        "tokenizer": tokenizer_file,
        "query_prompt": prompt,
        "truncate_dim": model.truncate_dim,
        "dim": int(expected.shape[1]),
        "versions": {
            **runtime_versions(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
        },
        "probe_texts": texts,
        "probe_is_query": flags,
        "torch_vectors": vectors_text(expected),
        "onnx_vectors": "",
        "max_difference": None,
    }
    try:
        pipeline, tokenizer_json = _pipeline(model, prompt)
    except OnnxUnavailableError as error:
        unsupported: dict[str, Any] = {
            "input_names": [],
            "max_seq_length": None,
            "truncation_side": "right",
            "pad_id": 0,
            "pad_type_id": 0,
            "padding_side": "right",
            "pooling": None,
            "normalize": False,
        }
        manifest = ExportManifest(**{**base, **unsupported, "reason": str(error)})
        write_manifest(path, manifest)
        return manifest
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path.parent / tokenizer_file, tokenizer_json.encode())
    manifest = verify_manifest(
        ExportManifest(**base, **pipeline), export.parent, expected, MAX_PROBE_DIFFERENCE, threads
    )
    write_manifest(path, manifest)
    return manifest


def probe_vectors(
    model: "SentenceTransformer", prompt: str, texts: list[str], flags: list[bool]
) -> np.ndarray:
    """PyTorch's vectors for the probes, as the embedder's PyTorch path makes them (queries and pages each
    as one batch: padding is part of what is compared)."""
    vectors: np.ndarray | None = None
    for is_query in (True, False):
        rows = [i for i, flag in enumerate(flags) if flag == is_query]
        if not rows:
            continue
        encoded = model.encode(
            [texts[i] for i in rows],
            prompt_name="query" if is_query and prompt else None,
            batch_size=len(rows),
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        if vectors is None:
            vectors = np.empty((len(texts), encoded.shape[1]), dtype=np.float32)
        vectors[rows] = encoded
    assert vectors is not None  # PROBES holds both kinds
    return vectors


def _pipeline(model: "SentenceTransformer", prompt: str) -> tuple[dict[str, Any], str]:
    """The manifest fields describing `model`'s tokenizer and modules, and its tokenizer as JSON; raises
    OnnxUnavailableError for what the torch-free encoder does not implement."""
    import tokenizers

    _check_supported(model, prompt)
    first, *rest = list(model)
    if getattr(first, "do_lower_case", False):
        raise OnnxUnavailableError("the Transformer module lowercases its input")
    if "message" in (getattr(first, "modality_config", None) or {}):
        raise OnnxUnavailableError("the model formats its input with a chat template")
    kinds = [type(module).__name__ for module in rest]
    if kinds not in (["Pooling"], ["Pooling", "Normalize"]):
        raise OnnxUnavailableError(f"modules after the Transformer are {kinds}, not Pooling [+ Normalize]")
    pooling: Any = rest[0]
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None and callable(getattr(pooling, "get_pooling_mode_str", None)):
        mode = pooling.get_pooling_mode_str()  # older sentence-transformers
    if not isinstance(mode, str) or mode not in POOLING_MODES:
        raise OnnxUnavailableError(f"pooling mode {mode!r} is not one of {', '.join(POOLING_MODES)}")
    hf_tokenizer = model.tokenizer
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise OnnxUnavailableError(f"{type(hf_tokenizer).__name__} has no `tokenizers` backend")
    # The backend as transformers runs it (normalizer, added tokens, post-processor), without the
    # truncation and padding of its last call: the encoder sets those itself.
    try:
        tokenizer = tokenizers.Tokenizer.from_str(backend.to_str())
    except Exception as error:  # a backend this version of `tokenizers` cannot read back
        raise OnnxUnavailableError(f"the tokenizer cannot be saved for `tokenizers`: {error}") from error
    tokenizer.no_truncation()
    tokenizer.no_padding()
    max_length = model.max_seq_length
    pipeline = {
        "input_names": list(hf_tokenizer.model_input_names),
        "max_seq_length": max_length if isinstance(max_length, int) and max_length < 1_000_000 else None,
        "truncation_side": getattr(hf_tokenizer, "truncation_side", "right"),
        "pad_id": int(hf_tokenizer.pad_token_id if hf_tokenizer.pad_token_id is not None else 0),
        "pad_type_id": int(getattr(hf_tokenizer, "pad_token_type_id", 0) or 0),
        "padding_side": getattr(hf_tokenizer, "padding_side", "right"),
        "pooling": mode,
        "normalize": kinds[-1] == "Normalize",
    }
    return pipeline, tokenizer.to_str()
