"""The bundled MiniLM, small enough to travel to a GPU machine that has no copy of it and reaches no registry.

The device tool carries at most 64 MiB with the working tree, and faiss-cpu, pydantic and redis-py wheels
take a third of it; MiniLM's fp32 weights are 87 MiB and even fp16 (43 MiB) does not fit beside them. So
each float matrix travels as int8 with one fp32 scale per row (symmetric, per output row), 22 MiB in all,
and is expanded back to an fp32 sentence-transformers directory on arrival. The copy is a real model, not
random weights: `pack` prints the cosine between the original's vectors and the round-tripped model's
(≥ 0.99 on LoCoMo texts), so retrieval on the GPU machine returns the pages it should, and speed, which
does not depend on the weights' values, is the same.

    python -m bench.gpu.carry pack .gpucarry/minilm-int8          # here, from the bundled model
    python -m bench.gpu.carry unpack .gpucarry/minilm-int8 /tmp/minilm   # there
"""

import argparse
import shutil
from pathlib import Path

import numpy as np

WEIGHTS = "model.safetensors"
PACKED = "weights_int8.npz"


def quantize_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and the per-row fp32 scales that bring them back (`codes * scale[:, None]`)."""
    rows = matrix.reshape(matrix.shape[0], -1) if matrix.ndim > 1 else matrix.reshape(1, -1)
    peak = np.abs(rows).max(axis=1)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def dequantize_rows(codes: np.ndarray, scale: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return (codes.astype(np.float32) * scale[:, None]).reshape(shape)


def pack(source: Path, target: Path) -> None:
    """Every file of the model directory but its weights, plus the weights as int8 rows."""
    from safetensors.numpy import load_file

    target.mkdir(parents=True, exist_ok=True)
    for path in source.rglob("*"):
        if path.is_file() and path.name != WEIGHTS and path.suffix != ".md":
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
    arrays: dict[str, np.ndarray] = {}
    for name, tensor in load_file(str(source / WEIGHTS)).items():
        if tensor.dtype.kind == "f":
            codes, scale = quantize_rows(tensor.astype(np.float32))
            arrays[f"{name}|codes"] = codes
            arrays[f"{name}|scale"] = scale
            arrays[f"{name}|shape"] = np.array(tensor.shape, dtype=np.int64)
        else:
            arrays[f"{name}|raw"] = tensor
    np.savez_compressed(target / PACKED, **arrays)  # type: ignore[arg-type]


def unpack(source: Path, target: Path) -> None:
    """A loadable sentence-transformers directory (fp32 safetensors) from a `pack` output."""
    from safetensors.numpy import save_file

    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(PACKED))
    packed = np.load(source / PACKED)
    names = sorted({key.split("|")[0] for key in packed.files})
    tensors = {}
    for name in names:
        if f"{name}|raw" in packed.files:
            tensors[name] = packed[f"{name}|raw"]
        else:
            shape = tuple(int(n) for n in packed[f"{name}|shape"])
            tensors[name] = dequantize_rows(packed[f"{name}|codes"], packed[f"{name}|scale"], shape)
    save_file(tensors, str(target / WEIGHTS))


def agreement(original: Path, copy: Path, texts: list[str]) -> float:
    """Smallest cosine between the two models' vectors for the same texts."""
    from sentence_transformers import SentenceTransformer

    a = SentenceTransformer(str(original), device="cpu").encode(texts, normalize_embeddings=True)
    b = SentenceTransformer(str(copy), device="cpu").encode(texts, normalize_embeddings=True)
    return float((a * b).sum(axis=1).min())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("pack", "unpack"))
    parser.add_argument("source", type=Path, help="pack: the packed directory to write; unpack: to read")
    parser.add_argument("target", type=Path, nargs="?", help="unpack: the model directory to write")
    args = parser.parse_args()
    if args.action == "unpack":
        if args.target is None:
            parser.error("unpack needs a target directory")
        unpack(args.source, args.target)
        print(f"unpacked {args.source} -> {args.target}")
        return
    import tempfile

    from bench.corpus import dev_conversations, exchanges
    from memoryos.embedding.model_location import resolve_model_location

    bundled = Path(resolve_model_location("all-MiniLM-L6-v2"))
    pack(bundled, args.source)
    with tempfile.TemporaryDirectory() as scratch:
        unpack(args.source, Path(scratch) / "model")
        texts = [f"{t['user_input']} {t['agent_response']}" for t in exchanges(200, dev_conversations())]
        print(
            f"packed {bundled} -> {args.source}; lowest cosine to the original over 200 LoCoMo pages: "
            f"{agreement(bundled, Path(scratch) / 'model', texts):.4f}"
        )


if __name__ == "__main__":
    main()
