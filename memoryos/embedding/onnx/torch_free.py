"""The export and its manifest made without PyTorch: a plain install's first run on CPU.

`onnx.queries.record_manifest` needs the model loaded in PyTorch; this makes the same pair of files from
the model directory alone: the graph from its safetensors (`onnx/build.py`), the pipeline from its
sentence-transformers files (`model_pipeline.py`), and the check against PyTorch's vectors for the probes
recorded ahead of time for these exact files (`onnx/reference.py`). The manifest written is the one a
PyTorch process would read, so every later process, with or without PyTorch, opens it the same way.
"""

from pathlib import Path
from typing import Any

from memoryos.embedding.model_pipeline import read_pipeline
from memoryos.embedding.onnx.build import UnsupportedModelError, write_graph
from memoryos.embedding.onnx.encoder import runtime_versions, verify_manifest
from memoryos.embedding.onnx.manifest import (
    FORMAT,
    LOAD_TOLERANCE,
    ExportManifest,
    vectors_text,
    write_manifest,
)
from memoryos.embedding.onnx.reference import content_digest, read_references
from memoryos.storage.atomic import atomic_write_bytes


def build_torch_free(
    path: Path, *, name: str, model_dir: Path, kwargs: dict[str, Any], fingerprint: str, threads: int
) -> ExportManifest:
    """Build the export of the model in `model_dir`, describe its pipeline, encode the recorded probes and
    write the manifest to `path` (the export and tokenizer beside it): `verified` when every probe is
    within `LOAD_TOLERANCE` of PyTorch's recorded vector. Returns what was written.

    Raises UnsupportedModelError, writing nothing, when the model is outside what the builder and encoder
    do, or no reference is recorded for these files (nothing could tell a wrong graph from a right one).
    The tolerance is the one a later load allows against these same vectors, not the looser
    `MAX_PROBE_DIFFERENCE` of a PyTorch-made export: a graph written by hand earns no slack.
    """
    import onnx

    pipeline = read_pipeline(model_dir, kwargs)  # what cannot be built is refused before reading weights
    digest = content_digest(model_dir)
    reference = read_references().get(digest)
    if reference is None:
        raise UnsupportedModelError(
            f"no PyTorch vectors are recorded for these files (content {digest[:12]}), so an export built "
            "without PyTorch could not be checked"
        )
    export = path.parent / f"{digest[:32]}.onnx"
    write_graph(pipeline.config, pipeline.transformer_dir / "model.safetensors", export)
    tokenizer_file = f"{path.stem}.tokenizer.json"
    atomic_write_bytes(path.parent / tokenizer_file, pipeline.tokenizer_json.encode())
    expected = reference.probe_vectors()[:, : pipeline.fields["truncate_dim"]]
    candidate = ExportManifest(
        format=FORMAT,
        verified=False,
        checked_against=f"reference {digest[:12]}",
        model_name=name,
        model_dir=str(model_dir),
        model_kwargs=kwargs,
        fingerprint=fingerprint,
        export=export.name,
        export_size=export.stat().st_size,
        tokenizer=tokenizer_file,
        **pipeline.fields,
        dim=int(expected.shape[1]),
        versions={**runtime_versions(), "onnx": onnx.__version__, **reference.versions},
        probe_texts=reference.probe_texts,
        probe_is_query=reference.probe_is_query,
        torch_vectors=vectors_text(expected),
        onnx_vectors="",
        max_difference=None,
    )
    manifest = verify_manifest(candidate, path.parent, expected, LOAD_TOLERANCE, threads)
    write_manifest(path, manifest)
    return manifest
