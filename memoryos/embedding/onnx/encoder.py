"""Embedding without PyTorch: the verified ONNX export, the model's tokenizer and pooling in numpy.

Importing torch and sentence-transformers takes seconds; a CLI `retrieve` needs only a tokenizer
(`tokenizers`, Rust), the exported transformer (ONNX Runtime) and a pooling step. Everything this encoder
does was recorded, and checked against PyTorch, when the manifest was written (`onnx/manifest.py`); at
open it re-encodes a few probe texts and compares them with the recorded vectors, so a changed runtime or
a damaged file is caught before any vector is used. Neither this module nor what it imports loads torch.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memoryos.embedding.onnx.manifest import LOAD_PROBES, LOAD_TOLERANCE, ExportManifest, vectors_text
from memoryos.errors import MemoryOSError


class TorchFreeUnavailableError(MemoryOSError):
    """The manifest's files cannot be opened, or they no longer reproduce the recorded vectors."""


def runtime_versions() -> dict[str, str]:
    """The versions the torch-free encoder depends on (imports onnxruntime and tokenizers)."""
    import onnxruntime
    import tokenizers

    return {"onnxruntime": onnxruntime.__version__, "tokenizers": tokenizers.__version__}


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """sentence-transformers' `Pooling` over a padded batch: `hidden` (batch, tokens, dim) float32,
    `mask` (batch, tokens) of 0/1, either padding side."""
    weights = mask.astype(hidden.dtype)[:, :, None]
    if mode in ("mean", "mean_sqrt_len_tokens"):
        total = (hidden * weights).sum(axis=1)
        count = np.maximum(weights.sum(axis=1), 1e-9)
        return total / (count if mode == "mean" else np.sqrt(count))
    if mode == "max":
        return np.where(weights > 0, hidden, -np.inf).max(axis=1).astype(hidden.dtype)
    rows = np.arange(hidden.shape[0])
    if mode == "cls":  # the first real token (after any left padding)
        return hidden[rows, mask.argmax(axis=1)]
    if mode == "lasttoken":  # the last real token (before any right padding)
        tokens = mask.shape[1]
        last = tokens - 1 - mask[:, ::-1].argmax(axis=1)
        return (hidden * weights)[rows, last]
    raise ValueError(f"pooling mode {mode!r} is not implemented")


def cpu_session_options(threads: int) -> Any:
    """ONNX Runtime options for an encoder on CPU: `threads` intra-op threads, and no spinning. By default
    the pool's threads spin after each run waiting for the next; between page batches that burns cores
    the request threads need, and runs no faster for it (docs/engine.md)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OnnxEncoder:
    """Texts to vectors with a tokenizer and an ONNX Runtime session; thread-safe (both are)."""

    def __init__(self, manifest: ExportManifest, tokenizer: Any, session: Any) -> None:
        if manifest.pooling is None:
            raise TorchFreeUnavailableError("the manifest names no pooling mode this encoder implements")
        self.manifest = manifest
        self._pooling: str = manifest.pooling
        self._tokenizer = tokenizer
        self._session = session
        self._input_names = [item.name for item in session.get_inputs()]
        unknown = set(self._input_names) - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown:
            raise TorchFreeUnavailableError(f"the export takes inputs {sorted(unknown)} this encoder lacks")

    @property
    def dim(self) -> int:
        return self.manifest.dim

    @classmethod
    def open(cls, manifest: ExportManifest, directory: Path, threads: int) -> "OnnxEncoder":
        """The encoder over `manifest`'s files in `directory`. Raises TorchFreeUnavailableError when a
        file cannot be loaded; `check` then tells whether it reproduces the recorded vectors."""
        import onnxruntime
        import tokenizers

        export = directory / manifest.export
        try:
            size = export.stat().st_size
            tokenizer = tokenizers.Tokenizer.from_file(str(directory / manifest.tokenizer))
        except Exception as error:  # a missing, truncated or foreign file
            raise TorchFreeUnavailableError(f"cannot load the tokenizer or export: {error}") from error
        if size != manifest.export_size:
            raise TorchFreeUnavailableError(
                f"{export} has {size} bytes, the checked export had {manifest.export_size}"
            )
        tokenizer.no_padding()  # batches are padded here, to each batch's longest
        if manifest.max_seq_length is not None:
            tokenizer.enable_truncation(
                max_length=manifest.max_seq_length, direction=manifest.truncation_side
            )
        else:
            tokenizer.no_truncation()
        try:
            session = onnxruntime.InferenceSession(
                str(export), cpu_session_options(threads), providers=["CPUExecutionProvider"]
            )
        except Exception as error:
            raise TorchFreeUnavailableError(f"cannot load {export}: {error}") from error
        return cls(manifest, tokenizer, session)

    def encode(self, texts: Sequence[str], *, is_query: bool, batch_size: int) -> tuple[np.ndarray, int]:
        """float32 rows as the model's own pipeline computes them (pooled, normalized if the model does,
        cut to `truncate_dim`), and how many texts were truncated at `max_seq_length`.

        Texts are tokenized at once, sorted longest first and run in batches of `batch_size`, each padded
        to its longest: sentence-transformers' own batching."""
        encodings = self.tokenize(texts, is_query=is_query)
        truncated = sum(1 for encoding in encodings if encoding.overflowing)
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        vectors = np.empty((len(encodings), self.dim), dtype=np.float32)
        for start in range(0, len(order), max(batch_size, 1)):
            rows = order[start : start + batch_size]
            pooled = self.forward(*self.feeds([encodings[i] for i in rows]))
            if start == 0 and pooled.shape[1] != vectors.shape[1]:
                vectors = np.empty((len(encodings), pooled.shape[1]), dtype=np.float32)
            vectors[rows] = pooled
        return vectors, truncated

    def tokenize(self, texts: Sequence[str], *, is_query: bool) -> list[Any]:
        """The `tokenizers` encodings of `texts` (the query prompt first for a query), truncated at
        `max_seq_length`: one `encode_batch`, which runs outside the interpreter lock. The first stage,
        apart so that the embedding engine tokenizes the next batch while this one runs."""
        prompt = self.manifest.query_prompt if is_query else ""
        return list(
            self._tokenizer.encode_batch([prompt + text for text in texts] if prompt else list(texts))
        )

    def forward(self, feeds: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
        """The session's run over padded `feeds` (from `feeds`), pooled, normalized if the model does and
        cut to `truncate_dim`: the vectors of one padded run."""
        hidden = self._session.run(None, feeds)[0]
        vectors = pool(np.asarray(hidden, dtype=np.float32), mask, self._pooling)
        if self.manifest.normalize:  # torch.nn.functional.normalize: x / max(|x|, 1e-12)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        if self.manifest.truncate_dim is not None:
            vectors = vectors[:, : self.manifest.truncate_dim]
        return vectors

    def feeds(self, encodings: Sequence[Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The session's inputs for `encodings`, padded to their longest, and the attention mask."""
        width = max(len(encoding.ids) for encoding in encodings)
        ids = np.full((len(encodings), width), self.manifest.pad_id, dtype=np.int64)
        types = np.full((len(encodings), width), self.manifest.pad_type_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            length = len(encoding.ids)
            span = slice(width - length, width) if self.manifest.padding_side == "left" else slice(0, length)
            ids[row, span] = encoding.ids
            types[row, span] = encoding.type_ids
            mask[row, span] = 1
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {name: inputs[name] for name in self._input_names}, mask

    def encode_probes(self, count: int | None = None) -> np.ndarray:
        """The manifest's probe texts (the first `count`), queries and pages each as one batch."""
        texts = self.manifest.probe_texts[:count]
        flags = self.manifest.probe_is_query[:count]
        vectors = np.empty((len(texts), self.manifest.dim), dtype=np.float32)
        for is_query in (True, False):
            rows = [i for i, flag in enumerate(flags) if flag == is_query]
            if rows:
                vectors[rows] = self.encode(
                    [texts[i] for i in rows], is_query=is_query, batch_size=len(rows)
                )[0]
        return vectors

    def check(self) -> float:
        """Re-encode the first probes and compare them with the vectors recorded at export; returns the
        largest difference, or raises TorchFreeUnavailableError over `LOAD_TOLERANCE`."""
        try:
            expected = self.manifest.probe_vectors("onnx")[:LOAD_PROBES]
            got = self.encode_probes(LOAD_PROBES)
        except Exception as error:  # recorded vectors that do not decode, a run the session refuses
            raise TorchFreeUnavailableError(
                f"the probe check failed: {type(error).__name__}: {error}"
            ) from error
        difference = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
        if not difference <= LOAD_TOLERANCE:
            raise TorchFreeUnavailableError(
                f"the export no longer reproduces its recorded vectors (difference {difference:.1e}, "
                f"limit {LOAD_TOLERANCE:.0e})"
            )
        return difference


def verify_manifest(
    candidate: ExportManifest, directory: Path, expected: np.ndarray, limit: float, threads: int
) -> ExportManifest:
    """`candidate` (not yet verified) once the encoder it describes has encoded every probe: `verified`
    when within `limit` of PyTorch's `expected` vectors, else with the reason (files that do not load,
    inputs the export does not take, vectors that differ). Both manifest writers end here."""
    try:
        got = OnnxEncoder.open(candidate, directory, threads).encode_probes()
        difference = float(np.abs(got - expected).max())
    except Exception as error:  # whatever fails here means: not verified, and why
        return candidate.model_copy(update={"reason": f"{type(error).__name__}: {error}"})
    verified = difference <= limit
    return candidate.model_copy(
        update={
            "verified": verified,
            "reason": "" if verified else f"differs from PyTorch by {difference:.1e} (limit {limit:.0e})",
            "onnx_vectors": vectors_text(got),
            "max_difference": difference,
        }
    )
