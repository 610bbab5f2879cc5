"""Query encodes on ONNX Runtime: the model's transformer exported once, pooled by the model's own modules.

A one-query MiniLM encode took 19–23 ms in eager PyTorch on one thread here and 7.5 ms in ONNX Runtime,
with the same vectors (largest difference 2e-7): for a short text, PyTorch's per-operator dispatch costs
more than the arithmetic. The query encode is most of a retrieve, so queries take this path on CPU; page
batches stay on PyTorch, where the two measured the same throughput.

Only the transformer is exported. Tokenization is sentence-transformers' own `preprocess`, and pooling and
normalization are the loaded model's own modules, so the model's pipeline stays the one definition of
its vectors. The export is cached under a fingerprint of the weights and library versions, and every
load is checked against PyTorch on probe texts: a stale, foreign or wrongly traced export is never used.
"""

import hashlib
import logging
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

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
    """Encodes texts with an ONNX Runtime session over the exported transformer of a loaded model."""

    def __init__(self, model: "SentenceTransformer", session: Any, prompt: str) -> None:
        self._model = model
        self._session = session
        self._input_names = [item.name for item in session.get_inputs()]
        self._prompt = prompt

    @classmethod
    def build(
        cls, model: "SentenceTransformer", cache_dir: Path, threads: int, prompt: str
    ) -> "OnnxQueryEncoder":
        """Load the cached export of `model` (exporting it first if absent) and check it against PyTorch.

        Raises OnnxUnavailableError when this model cannot be served: the caller keeps PyTorch.
        """
        _check_supported(model, prompt)
        path = cache_dir / f"{_fingerprint(model)}.onnx"
        session = None
        if path.exists():
            try:
                session = _session(path, threads)
            except OnnxUnavailableError as error:
                logger.warning("embedding: exporting the query encoder again: %s", error)
        if session is None:
            _export(model, path)
            session = _session(path, threads)
        encoder = cls(model, session, prompt)
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

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # a truncated or foreign file
        raise OnnxUnavailableError(f"cannot load {path}: {error}") from error
