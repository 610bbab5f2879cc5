"""`python -m bench.gpu.batcher_diag DEVICE COUNT MODEL PAIRS_JSON`: where a pooled batcher's time goes.

Times the engine embedder called directly per 64 pages (twice: the first pass on a thread is a warm-up),
then the real `EmbeddingBatcher` fed by in-memory sources: on a new batcher thread, on one long-lived thread
(as the engine runs it), with one space per batch, without the wait, and with 256-text batches; each row
says how much of the time was inside `encode`. Ends with a cProfile of the direct path. Its output on an
H100 is `docs/benchmarks/gpu_batcher_diagnosis.log`.
"""

import cProfile
import io
import json
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.gpu.models import Countdown, MemoryPages
from memoryos.config import MemoryConfig
from memoryos.embedding import create_embedder
from memoryos.scheduler.batcher import EmbeddingBatcher


def main(device: str, count: int, model: str, pairs_json: str) -> None:
    import torch

    with open(pairs_json, encoding="utf-8") as file:
        document = json.load(file)
    pairs = [(p["user_input"], p["agent_response"]) for p in document["pairs"]]
    texts = [f"User: {u} Assistant: {a} (#{i})" for i, (u, a) in enumerate(pairs * 5)][:count]
    config = MemoryConfig(embedding_device=device, embedding_model_name=model, embedding_cache_size=0)
    embedder = create_embedder(config)
    inner: Callable[..., Any] = embedder._encode_with_model  # type: ignore[attr-defined]
    inside: list[float] = []

    def timed(batch: list[str], is_query: bool) -> Any:
        started = time.perf_counter()
        out = inner(batch, is_query)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        inside.append(time.perf_counter() - started)
        return out

    embedder._encode_with_model = timed  # type: ignore[attr-defined]
    embedder.encode(texts[:64])

    def direct() -> tuple[float, float]:
        inside.clear()
        started = time.perf_counter()
        for i in range(0, len(texts), 64):
            embedder.encode(texts[i : i + 64])
        return time.perf_counter() - started, sum(inside)

    def pooled(per: int, reuse: EmbeddingBatcher | None = None, wait_ms: float = 5.0, size: int = 64) -> str:
        inside.clear()
        countdown = Countdown(len(texts))
        sources = [
            MemoryPages(texts[i : i + per], countdown, time.perf_counter) for i in range(0, len(texts), per)
        ]
        batcher = reuse or EmbeddingBatcher(
            embedder, max_batch_size=size, max_batch_tokens=10**7, max_wait_ms=wait_ms
        )
        started = time.perf_counter()
        for source in sources:
            batcher.notify(source)
        countdown.done.wait(300)
        total = countdown.finished_at - started
        if reuse is None:
            batcher.close()
        return f"{len(texts) / total:.0f} texts/s, inside encode {sum(inside):.3f}s of {total:.3f}s"

    for name in ("direct", "direct again"):
        total, spent = direct()
        print(
            f"{name}: {len(texts) / total:.0f} texts/s, inside encode {spent:.3f}s of {total:.3f}s",
            flush=True,
        )
    shared = EmbeddingBatcher(embedder, max_batch_size=64, max_batch_tokens=10**7, max_wait_ms=5.0)
    pooled(3, shared)  # the long-lived thread's warm-up
    print("pooled 1000x3 new batcher:", pooled(3), flush=True)
    print("pooled 1000x3 reused:", pooled(3, shared), flush=True)
    print("pooled 1000x3 reused again:", pooled(3, shared), flush=True)
    print("pooled 47x64 reused:", pooled(64, shared), flush=True)
    print("pooled 1000x3 wait0:", pooled(3, wait_ms=0.0), flush=True)
    print("pooled 1000x3 size256:", pooled(3, size=256), flush=True)
    shared.close()
    profile = cProfile.Profile()
    profile.enable()
    direct()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(12)
    print(out.getvalue())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
