"""How many texts one model run should pad together on a CPU (`embedding_cpu_run_size`).

The engine's embedder on the LoCoMo dev exchanges (`"User: … Assistant: …"`, the worker's page texts),
once per run size: all texts in one `encode` call (sorted longest first across all of them), and one call
per `embedding_batch_size` texts (as the batcher sends them: each batch sorted alone, so a run of 64 pads
all 64 to the longest). Every size is measured `--rounds` times, the sizes interleaved, on a new embedder
with its cache off.

    python -m bench.engine.cpu_runs [--texts 512] [--sizes 64 32 16 8 4] [--rounds 2] [--runtime auto|torch]
        [--out FILE]

`--runtime auto` is ONNX Runtime once the model's export is verified (the CPU default), `torch` PyTorch.
"""

import argparse
import time
from pathlib import Path
from typing import Any

from bench.corpus import dev_conversations, exchanges, page_texts
from bench.output import emit
from memoryos.config import MemoryConfig
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder


def texts_per_s(embedder: SentenceTransformerEmbedder, texts: list[str], per_call: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(texts), per_call):
        embedder.encode(texts[start : start + per_call])
    return round(len(texts) / (time.perf_counter() - started), 1)


def measure(texts: list[str], sizes: list[int], rounds: int, runtime: str) -> list[dict[str, Any]]:
    batch = MemoryConfig().embedding_batch_size
    rows: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for size in sizes:
            config = MemoryConfig(
                embedding_cache_size=0,
                embedding_device="cpu",
                embedding_runtime=runtime,
                embedding_cpu_run_size=size,
            )
            embedder = SentenceTransformerEmbedder(config)
            embedder.encode(["warm up"])
            rows.append(
                {
                    "round": round_ + 1,
                    "cpu_run_size": size,
                    "runtime": "onnx" if embedder.torch_free else "torch",
                    "one_call_texts_per_s": texts_per_s(embedder, texts, len(texts)),
                    f"calls_of_{batch}_texts_per_s": texts_per_s(embedder, texts, batch),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 32, 16, 8, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runtime", choices=["auto", "torch"], default="auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    texts = page_texts(exchanges(args.texts, dev_conversations()))
    emit({"texts": len(texts), "runs": measure(texts, args.sizes, args.rounds, args.runtime)}, args.out)


if __name__ == "__main__":
    main()
