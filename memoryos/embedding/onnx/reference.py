"""PyTorch's vectors for the probe texts, recorded once per model and shipped, so that an ONNX graph built
without PyTorch can still be checked against PyTorch.

A manifest made with PyTorch loaded is `verified` because the torch-free encoder reproduced PyTorch's own
vectors in that process. A process without PyTorch cannot compute those, so they are recorded ahead of
time, with PyTorch, by

    python -m memoryos.embedding.onnx.reference [MODEL_NAME]   # default: the bundled all-MiniLM-L6-v2

into `references.json` beside this module, keyed by a digest of the model's *contents* (its weights
and every JSON file: config, tokenizer, modules, pooling, prompts), which unlike the manifest's
fingerprint (sizes and mtimes) is the same in every installation of the same files. A torch-free build
whose vectors match a reference within `LOAD_TOLERANCE` is verified "against the recorded reference";
without a reference for the files at hand it is refused, since nothing would tell a wrong graph from a
right one.
"""

import argparse
import base64
import hashlib
import json
import os
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from memoryos.embedding.onnx.manifest import model_directory, vectors_text

REFERENCES_PATH = Path(__file__).with_name("references.json")


class Reference(BaseModel):
    """PyTorch's vectors for `probe_texts` with one model's files (`digest`), and what made them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_name: str
    probe_texts: list[str]
    probe_is_query: list[bool]
    vectors: str
    """Base64 little-endian float32 rows, as the manifest's `torch_vectors`."""
    versions: dict[str, str]

    def probe_vectors(self) -> np.ndarray:
        raw = base64.b64decode(self.vectors)
        return np.frombuffer(raw, dtype="<f4").reshape(len(self.probe_texts), -1)


def content_digest(model_dir: Path) -> str:
    """sha256 over the model's weights and every JSON file under `model_dir` (names and contents; hidden
    entries skipped, symlinks followed as in a Hugging Face snapshot): what decides the vectors, and
    nothing that differs between two installations of the same files. Reads the weights once (~0.2 s for
    MiniLM's 90 MB)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir, followlinks=True):
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or not (name.endswith(".json") or name == "model.safetensors"):
                continue
            path = Path(root) / name
            digest.update(f"{path.relative_to(model_dir).as_posix()}\0".encode())
            with path.open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def read_references(path: Path = REFERENCES_PATH) -> dict[str, Reference]:
    """The recorded references by content digest (none when the file is absent)."""
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {digest: Reference.model_validate(entry) for digest, entry in raw.items()}


def record_reference(model_name: str, path: Path = REFERENCES_PATH) -> str:
    """Load `model_name` with sentence-transformers on CPU (torch needed), compute its vectors for the
    manifest's PROBES as the embedder's PyTorch path does, and add them to `path` under the model's content
    digest; returns the digest. Run again after changing PROBES or updating the bundled model."""
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    from memoryos.embedding.model_location import resolve_model_location
    from memoryos.embedding.onnx.manifest import PROBES
    from memoryos.embedding.onnx.queries import probe_vectors

    location = resolve_model_location(model_name)
    model = SentenceTransformer(location, device="cpu", local_files_only=True)
    texts = [text for text, _ in PROBES]
    flags = [is_query for _, is_query in PROBES]
    vectors = probe_vectors(model, model.prompts.get("query") or "", texts, flags)
    model_dir = model_directory(location, {})
    if model_dir is None:
        raise SystemExit(f"{model_name} is not a directory nor in the Hugging Face cache")
    digest = content_digest(model_dir)
    reference = Reference(
        model_name=model_name,
        probe_texts=texts,
        probe_is_query=flags,
        vectors=vectors_text(vectors),
        versions={
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
        },
    )
    references = {**read_references(path), digest: reference}
    entries = {key: value.model_dump() for key, value in sorted(references.items())}
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return digest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m memoryos.embedding.onnx.reference",
        description="Record PyTorch's probe vectors for a model, so torch-free installs can verify their "
        "ONNX build of it (needs torch and sentence-transformers).",
    )
    parser.add_argument("model", nargs="?", default="all-MiniLM-L6-v2", help="embedding_model_name")
    parser.add_argument("--output", type=Path, default=REFERENCES_PATH, help="references file to update")
    args = parser.parse_args(argv)
    digest = record_reference(args.model, args.output)
    print(f"recorded {args.model} ({digest[:12]}) in {args.output}")


if __name__ == "__main__":
    main()
