"""`python -m bench.engine.embedding_engine`: the embedding engine's tokens per second against a plain
batched forward pass of the same texts, on the same runtime and threads.

Texts are LoCoMo dev page texts (`"User: … Assistant: …"`, about 76 tokens each: the worker's pages).
Tokens are the model's tokenizer's (no padding counted), the same count for both sides.

- **Baseline**: the engine's own stages called in series on one thread (tokenize, pad, forward), the texts
  cut in arrival order into batches of `--baseline-sizes` texts, each sorted longest first (what a batcher
  calling `encode` gets); its row is the best size of its own sweep.
- **Engine**: `EmbeddingEngine.from_config` on a Unix socket, with `--clients` threads each sending
  requests of `--request-texts` texts (as the applying processes' batchers do), once per
  `--budgets` value of `embedding_engine_max_batch_tokens`; tokens over the wall time from the first
  request to the last reply, and over the time inside the forward pass (`EngineStats.tokens_per_s`).

Every row is measured `--rounds` times, interleaved, best kept. The cache is off on both sides.

    python -m bench.engine.embedding_engine [--texts 1024] [--baseline-sizes 8 16 32 64 128]
        [--budgets 2048 4096 8192 16384 32768] [--clients 4] [--request-texts 32] [--rounds 2]
        [--runtime auto|torch] [--device auto|cpu|cuda] [--out FILE]
"""

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.corpus import dev_conversations, exchanges, page_texts
from bench.output import emit
from memoryos.config import MemoryConfig
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.server import EmbeddingEngine
from memoryos.embedding.engine.stages import ModelStages, stages_of
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder


def baseline_row(stages: ModelStages, texts: list[str], size: int, tokens: int) -> dict[str, Any]:
    """The plain batched forward: batches of `size` in arrival order, stages in series on one thread."""
    started = time.perf_counter()
    for start in range(0, len(texts), size):
        tokenized = sorted(stages.tokenize(texts[start : start + size], False), key=lambda t: -t.length)
        stages.forward(stages.prepare(tokenized, False))
    elapsed = time.perf_counter() - started
    return {"batch_texts": size, "tokens_per_s": round(tokens / elapsed)}


def engine_row(
    embedder: SentenceTransformerEmbedder,
    config: MemoryConfig,
    texts: list[str],
    clients: int,
    request_texts: int,
    tokens: int,
) -> dict[str, Any]:
    """The engine serving `clients` threads that share out `texts` in requests of `request_texts`."""
    with tempfile.TemporaryDirectory() as directory:
        socket_path = Path(directory) / "engine.sock"
        engine = EmbeddingEngine.from_config(embedder, socket_path, config)
        engine.start()
        try:
            requests = [texts[start : start + request_texts] for start in range(0, len(texts), request_texts)]
            shares = [requests[index::clients] for index in range(clients)]
            senders = [EngineEmbedder(socket_path, timeout_s=600.0) for _ in range(clients)]
            for sender in senders:
                sender.wait_ready()

            def send(index: int) -> None:
                for request in shares[index]:
                    senders[index].encode(request)

            threads = [threading.Thread(target=send, args=(index,)) for index in range(clients)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            stats = engine.stats()
        finally:
            engine.close()
    return {
        "max_batch_tokens": config.embedding_engine_max_batch_tokens,
        "tokens_per_s": round(tokens / elapsed),
        "forward_tokens_per_s": round(stats.tokens_per_s),
        "batches": stats.batches,
        "mean_batch_texts": round(stats.texts / stats.batches, 1) if stats.batches else 0.0,
        "padding_share": round(1 - stats.tokens / stats.padded_tokens, 3) if stats.padded_tokens else 0.0,
        "forward_share_of_wall": round(stats.encode_s / elapsed, 3),
    }


def measure(args: argparse.Namespace, texts: list[str]) -> dict[str, Any]:
    base = MemoryConfig(embedding_device=args.device, embedding_runtime=args.runtime, embedding_cache_size=0)
    embedder = SentenceTransformerEmbedder(base)
    embedder.encode(["warm up"])
    stages = stages_of(embedder, base.embedding_cpu_run_size)
    tokens = sum(item.length for item in stages.tokenize(texts, False))
    baseline: list[dict[str, Any]] = []
    engine: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        baseline += [baseline_row(stages, texts, size, tokens) for size in args.baseline_sizes]
        for budget in args.budgets:
            config = base.model_copy(update={"embedding_engine_max_batch_tokens": budget})
            engine.append(engine_row(embedder, config, texts, args.clients, args.request_texts, tokens))
    best_baseline = max(baseline, key=lambda row: row["tokens_per_s"])
    best_engine = max(engine, key=lambda row: row["tokens_per_s"])
    return {
        "texts": len(texts),
        "tokens": tokens,
        "runtime": type(stages).__name__,
        "baseline_rows": baseline,
        "engine_rows": engine,
        "best_baseline": best_baseline,
        "best_engine": best_engine,
        "engine_over_baseline": round(best_engine["tokens_per_s"] / best_baseline["tokens_per_s"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--baseline-sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--budgets", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--request-texts", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runtime", choices=["auto", "torch"], default="auto")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    texts = page_texts(exchanges(args.texts, dev_conversations()))
    emit(measure(args, texts), args.out)


if __name__ == "__main__":
    main()
