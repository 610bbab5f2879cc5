"""The record that lets a process embed without PyTorch, kept beside the ONNX export.

When PyTorch has the model loaded on CPU and the export exists, the engine writes a manifest: which model
directory it describes (a cheap fingerprint: file names, sizes and mtimes), the tokenizer the model really
uses, how its modules pool and normalize, the query prompt, the dimension, the library versions that
matter, a few probe texts with the vectors PyTorch and the torch-free pipeline gave for them, and
`verified` once those agreed. A later process on CPU reads it, checks the fingerprint and versions, opens
the export with ONNX Runtime and the tokenizer with `tokenizers`, reproduces the recorded probe vectors
(a few ms) and never imports torch, transformers or sentence-transformers (`onnx/encoder.py`).

The manifest is named after the configuration (model directory and `embedding_model_kwargs`), not after
the export: the export's own name is a fingerprint of the loaded weights, which takes PyTorch to compute.
Where PyTorch is not installed, `onnx/torch_free.py` writes the same manifest from the model's files, its
probes checked against PyTorch's vectors recorded beforehand (`checked_against`).
This module imports nothing heavy: it runs at every start.
"""

import base64
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from memoryos.storage.atomic import atomic_write_bytes

logger = logging.getLogger(__name__)

FORMAT = 1
"""Manifest format; another value is a stale manifest."""

LOAD_TOLERANCE = 1e-5
"""Largest per-component difference from the recorded torch-free vectors accepted at a later load: the
same runtime on the same files, so only thread-count rounding (measured: 0 to 1e-7) is expected."""

PoolingMode = Literal["cls", "mean", "max", "lasttoken", "mean_sqrt_len_tokens"]
POOLING_MODES: tuple[str, ...] = ("cls", "mean", "max", "lasttoken", "mean_sqrt_len_tokens")
"""What `onnx.encoder.pool` implements (sentence-transformers' padded-batch definitions)."""

PROBES: tuple[tuple[str, bool], ...] = (
    ("When did she start the pottery class?", True),
    ("What did I say about the new flat?", True),
    (
        "User: We moved to a new city last spring, and the kids finally like their school. "
        "Assistant: That is a big change; how are you settling in?",
        False,
    ),
    ("  Café au lait in Zürich — naïve résumé, 東京で会いましょう 🙂  ", False),
    ("remember this detail " * 100, False),
    ("ok", False),
)
"""(text, is_query): queries with the model's prompt; pages of different lengths in one batch (padding),
non-ASCII and surrounding spaces, and one text over a 256-token limit (truncation)."""

LOAD_PROBES = 3
"""Probes re-encoded at each load (the first queries and the first page: a few ms); all of them are
compared with PyTorch when the manifest is written."""


class ExportManifest(BaseModel):
    """What a torch-free encoder needs, and the evidence that it matches PyTorch."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    format: int
    verified: bool
    reason: str = ""
    checked_against: str = "pytorch"
    """What `verified` was decided against: "pytorch" (the model loaded in the process that wrote the
    manifest) or "reference <digest>" (PyTorch's vectors recorded in `onnx/references.json`, for an
    export built without PyTorch: `onnx/torch_free.py`)."""
    model_name: str
    model_dir: str
    model_kwargs: dict[str, Any]
    fingerprint: str
    export: str
    export_size: int
    tokenizer: str
    input_names: list[str]
    max_seq_length: int | None
    truncation_side: Literal["left", "right"]
    pad_id: int
    pad_type_id: int
    padding_side: Literal["left", "right"]
    pooling: PoolingMode | None
    normalize: bool
    truncate_dim: int | None
    query_prompt: str
    dim: int
    versions: dict[str, str]
    probe_texts: list[str]
    probe_is_query: list[bool]
    torch_vectors: str
    onnx_vectors: str
    max_difference: float | None

    def probe_vectors(self, which: Literal["torch", "onnx"]) -> np.ndarray:
        raw = base64.b64decode(self.torch_vectors if which == "torch" else self.onnx_vectors)
        return np.frombuffer(raw, dtype="<f4").reshape(len(self.probe_texts), -1)


def vectors_text(vectors: np.ndarray) -> str:
    """Vectors as base64 little-endian float32: exact, and 4x smaller than JSON numbers."""
    return base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode("ascii")


def model_directory(location: str, kwargs: Mapping[str, Any]) -> Path | None:
    """The directory the model loads from: `location` itself, or its snapshot in the Hugging Face cache
    (None when it is not there: then sentence-transformers reports the missing model)."""
    path = Path(location).expanduser()
    if path.is_dir():
        return path.resolve()
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    revision = kwargs.get("revision")
    cache_dir = kwargs.get("cache_folder")
    try:
        found = try_to_load_from_cache(
            location,
            "config.json",
            cache_dir=cache_dir if isinstance(cache_dir, str) else None,
            revision=revision if isinstance(revision, str) else None,
        )
    except Exception:  # not a repo id (a mistyped path): the PyTorch path says what is wrong
        return None
    return Path(found).parent.resolve() if isinstance(found, str) else None


def directory_fingerprint(directory: Path) -> str:
    """Names, sizes and mtimes of every file under `directory` (symlinks followed, as in a Hugging Face
    snapshot; hidden entries skipped): new weights, a new tokenizer or a changed config change it, and
    it costs a few stat calls instead of hashing the weights at every start."""
    entries = []
    for root, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root) / name
            status = path.stat()
            entries.append(f"{path.relative_to(directory)}|{status.st_size}|{status.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:32]


def manifest_path(cache_dir: Path, model_dir: Path, kwargs: Mapping[str, Any]) -> Path:
    """`<cache_dir>/<key>.json`, keyed by what decides the vectors besides the files: the model directory
    and the `SentenceTransformer` arguments (truncate_dim, prompts, model_kwargs ...)."""
    identity = json.dumps({"model_dir": str(model_dir), "kwargs": kwargs}, sort_keys=True, default=str)
    return cache_dir / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def read_manifest(path: Path) -> tuple[ExportManifest | None, str]:
    """The manifest at `path`, or None and why not (absent, unreadable, not a manifest)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"no export manifest yet ({path})"
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror or error}"
    try:
        manifest = ExportManifest.model_validate_json(text)
    except ValidationError as error:
        return None, f"{path} is not a valid manifest ({error.error_count()} errors)"
    if manifest.format != FORMAT:
        return None, f"{path} has format {manifest.format}, this version writes {FORMAT}"
    return manifest, ""


def stale_because(manifest: ExportManifest, fingerprint: str, versions: Mapping[str, str]) -> str:
    """Why `manifest` cannot serve this process ("" when it can): not verified, files changed since, or
    other versions of the libraries the torch-free encoder runs on."""
    if not manifest.verified:
        return f"the export did not pass its check against PyTorch when it was made: {manifest.reason}"
    if manifest.fingerprint != fingerprint:
        return f"the files in {manifest.model_dir} changed since the export was checked"
    for library, version in versions.items():
        if manifest.versions.get(library) != version:
            return f"{library} is {version}, the export was checked with {manifest.versions.get(library)}"
    return ""


def write_manifest(path: Path, manifest: ExportManifest) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, manifest.model_dump_json(indent=1).encode())
    logger.info(
        "embedding: wrote %s (verified: %s%s)",
        path,
        manifest.verified,
        f", largest difference from PyTorch {manifest.max_difference:.1e}"
        if manifest.max_difference is not None
        else "",
    )
