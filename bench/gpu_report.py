"""`python -m bench.gpu_report`: embedding and FAISS throughput as a fraction of the device's own ceilings.

Two ceilings are measured once per device: dense matmul FLOP/s (fp16 on CUDA, fp32 on CPU; a timed large
square matmul, 2·n³ FLOPs) and memory bandwidth (a timed large copy, 2 bytes moved per byte copied). Then:

- Embedding: tokens/s vs batch size per model, in fp16 on CUDA. Tokens are counted with the model's own
  tokenizer (real tokens, no padding); FLOPs ≈ 2 × non-embedding parameters × tokens (attention's
  sequence-squared term and padding are not counted, so the fraction is a lower bound of the hardware use).
- FAISS flat inner-product search, on the GPU when faiss has one and always on the CPU: one query batch
  reads the whole database once, n × dim × 4 bytes, so the bandwidth floor is that over the measured
  bandwidth; also shown is 2·n·dim·queries FLOPs against the matmul ceiling, which binds large batches.

The same script runs on a CUDA machine unchanged. `--tiny` uses all-MiniLM-L6-v2 (bundled), small sizes
and the CPU, finishing in seconds: that is how it is tested where there is no GPU and no bge-m3/Qwen3 weights.
"""

import argparse
import functools
import json
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_MODELS = ("BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B", "all-MiniLM-L6-v2")
TINY_MODELS = ("all-MiniLM-L6-v2",)
OUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "gpu_report.json"
TINY_OUT = OUT.with_name("gpu_report-tiny.json")
"""A smoke run never overwrites the real report."""


class Sizes:
    """Problem sizes: full for a GPU report, tiny for a CPU smoke run."""

    def __init__(self, tiny: bool) -> None:
        self.matmul_n = 1024 if tiny else 8192
        self.copy_bytes = (64 if tiny else 2048) * 2**20
        self.batch_sizes: tuple[int, ...] = (1, 8) if tiny else (1, 8, 32, 128, 512)
        self.text_words = 16 if tiny else 120
        self.min_texts = 4 if tiny else 2048
        self.faiss_n = 20_000 if tiny else 2_000_000
        self.faiss_dim = 384 if tiny else 1024
        self.faiss_queries: tuple[int, ...] = (1, 16) if tiny else (1, 16, 256, 4096)
        self.repeats = 3 if tiny else 5


def best_seconds(
    run: Callable[[], object], repeats: int, sync: Callable[[], None], *, warm_up: bool = True
) -> float:
    """Fastest of `repeats` timed runs, after one untimed run unless the caller warmed up already: the
    ceiling, not the average."""
    if warm_up:
        run()
        sync()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - started)
    return best


def _sync(device: str) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def matmul_ceiling(device: str, n: int, repeats: int) -> dict[str, Any]:
    import torch

    dtype = torch.float16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = best_seconds(lambda: torch.mm(a, b), repeats, _sync(device))
    return {"dtype": str(dtype).removeprefix("torch."), "n": n, "flops_per_s": 2 * n**3 / seconds}


def bandwidth_ceiling(device: str, nbytes: int, repeats: int) -> dict[str, Any]:
    import torch

    source = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source), repeats, _sync(device))
    return {"bytes_copied": nbytes, "bytes_per_s": 2 * nbytes / seconds}


def sample_texts(count: int, words: int) -> list[str]:
    """Deterministic English-like texts of about `words` words (LoCoMo turns when the dev data is there)."""
    corpus = _locomo_words() or [
        "the",
        "user",
        "said",
        "they",
        "went",
        "hiking",
        "with",
        "their",
        "family",
        "last",
        "weekend",
        "and",
        "the",
        "assistant",
        "asked",
        "about",
        "the",
        "trail",
        "the",
        "weather",
        "and",
        "whether",
        "they",
        "would",
        "go",
        "back",
        "again",
        "next",
        "month",
        "with",
        "friends",
    ]
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(corpus, size=words)) for _ in range(count)]


def _locomo_words() -> list[str]:
    path = (
        Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "pairs" / "conv-26.json"
    )
    if not path.exists():
        return []
    pairs = json.loads(path.read_text(encoding="utf-8"))["pairs"]
    return " ".join(p["user_input"] + " " + p["agent_response"] for p in pairs).split()


def _non_embedding_params(model: Any) -> int:
    import torch

    embedding = sum(
        p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    )
    return int(sum(p.numel() for p in model.parameters()) - embedding)


def embedding_rows(
    models: Sequence[str], device: str, sizes: Sizes, matmul_flops: float
) -> list[dict[str, Any]]:
    """Rows per model and batch size; a model that cannot be loaded gets one row saying why."""
    import torch
    from sentence_transformers import SentenceTransformer

    from memoryos.embedding.sentence_transformers_backend import resolve_model_location

    rows: list[dict[str, Any]] = []
    for name in models:
        try:
            model = SentenceTransformer(resolve_model_location(name), device=device)
        except Exception as error:  # a missing model is reported, not fatal: the others still run
            rows.append({"model": name, "skipped": f"{type(error).__name__}: {str(error)[:200]}"})
            continue
        rows += _model_rows(name, model.half() if device == "cuda" else model, device, sizes, matmul_flops)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def _model_rows(
    name: str, model: Any, device: str, sizes: Sizes, matmul_flops: float
) -> list[dict[str, Any]]:
    import torch

    params = _non_embedding_params(model)
    largest = max(sizes.batch_sizes)
    rows = []
    with torch.inference_mode():
        model.encode(sample_texts(largest, sizes.text_words), batch_size=largest)  # warm-up
        for batch_size in sizes.batch_sizes:
            texts = sample_texts(max(sizes.min_texts, 2 * batch_size), sizes.text_words)
            encoded = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)
            tokens = sum(len(ids) for ids in encoded["input_ids"])
            seconds = best_seconds(
                functools.partial(model.encode, texts, batch_size=batch_size),
                max(1, sizes.repeats - 2),
                _sync(device),
                warm_up=False,
            )
            flops = 2 * params * tokens / seconds
            rows.append(
                {
                    "model": name,
                    "device": device,
                    "dtype": "float16" if device == "cuda" else "float32",
                    "non_embedding_params": params,
                    "batch_size": batch_size,
                    "texts": len(texts),
                    "tokens": tokens,
                    "seconds": seconds,
                    "tokens_per_s": tokens / seconds,
                    "flops_per_s": flops,
                    "fraction_of_matmul": flops / matmul_flops,
                }
            )
    return rows


def faiss_gpus() -> int:
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def faiss_rows(sizes: Sizes, ceilings: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    import faiss

    rng = np.random.default_rng(0)
    base = rng.standard_normal((sizes.faiss_n, sizes.faiss_dim), dtype=np.float32)
    cpu_index = faiss.IndexFlatIP(sizes.faiss_dim)
    cpu_index.add(base)
    indexes: list[tuple[str, Any]] = [("cpu", cpu_index)]
    if faiss_gpus() > 0 and "cuda" in ceilings:
        resources = faiss.StandardGpuResources()
        indexes.append(("cuda", faiss.index_cpu_to_gpu(resources, 0, cpu_index)))
    rows = []
    scanned = sizes.faiss_n * sizes.faiss_dim * 4
    for backend, index in indexes:
        ceiling = ceilings[backend]
        for queries in sizes.faiss_queries:
            batch = rng.standard_normal((queries, sizes.faiss_dim), dtype=np.float32)
            seconds = best_seconds(functools.partial(index.search, batch, 10), sizes.repeats, lambda: None)
            flops = 2 * sizes.faiss_n * sizes.faiss_dim * queries
            rows.append(
                {
                    "backend": backend,
                    "vectors": sizes.faiss_n,
                    "dim": sizes.faiss_dim,
                    "queries": queries,
                    "seconds": seconds,
                    "queries_per_s": queries / seconds,
                    "bytes_scanned": scanned,
                    "bytes_per_s": scanned / seconds,
                    "fraction_of_bandwidth": scanned / seconds / ceiling["bandwidth"]["bytes_per_s"],
                    "fraction_of_matmul": flops / seconds / ceiling["matmul"]["flops_per_s"],
                }
            )
    return rows


def device_description(device: str) -> dict[str, Any]:
    import faiss
    import torch

    described: dict[str, Any] = {
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "faiss": getattr(faiss, "__version__", "unknown"),
        "faiss_gpus": faiss_gpus(),
    }
    if device == "cuda":
        described["gpu"] = torch.cuda.get_device_name(0)
        described["cuda"] = torch.version.cuda
    return described


def run(models: Sequence[str], tiny: bool, device: str) -> dict[str, Any]:
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and not tiny else "cpu"
    sizes = Sizes(tiny)
    ceilings: dict[str, dict[str, Any]] = {}
    for name in ["cpu"] + (["cuda"] if device == "cuda" else []):
        ceilings[name] = {
            "matmul": matmul_ceiling(name, sizes.matmul_n, sizes.repeats),
            "bandwidth": bandwidth_ceiling(name, sizes.copy_bytes, sizes.repeats),
        }
    return {
        "machine": device_description(device),
        "tiny": tiny,
        "ceilings": ceilings,
        "embedding": embedding_rows(models, device, sizes, ceilings[device]["matmul"]["flops_per_s"]),
        "faiss": faiss_rows(sizes, ceilings),
    }


def table(report: dict[str, Any]) -> str:
    lines = [f"Machine: {json.dumps(report['machine'])}", ""]
    for device, ceiling in report["ceilings"].items():
        lines.append(
            f"{device} ceilings: matmul {ceiling['matmul']['flops_per_s'] / 1e12:.3f} TFLOP/s "
            f"({ceiling['matmul']['dtype']}), bandwidth {ceiling['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s"
        )
    lines += [
        "",
        "| model | batch | tokens/s | TFLOP/s | of matmul ceiling |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in report["embedding"]:
        if "skipped" in row:
            lines.append(f"| {row['model']} | skipped: {row['skipped']} | | | |")
            continue
        lines.append(
            f"| {row['model']} | {row['batch_size']} | {row['tokens_per_s']:,.0f} "
            f"| {row['flops_per_s'] / 1e12:.4f} | {row['fraction_of_matmul']:.3f} |"
        )
    lines += [
        "",
        "| faiss flat | vectors × dim | queries | ms | GB/s scanned | of bandwidth | of matmul |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["faiss"]:
        lines.append(
            f"| {row['backend']} | {row['vectors']:,} × {row['dim']} | {row['queries']} "
            f"| {row['seconds'] * 1000:.2f} | {row['bytes_per_s'] / 1e9:.1f} "
            f"| {row['fraction_of_bandwidth']:.3f} | {row['fraction_of_matmul']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_report", description=__doc__)
    parser.add_argument("--models", nargs="+", default=None, help=f"default {' '.join(DEFAULT_MODELS)}")
    parser.add_argument("--tiny", action="store_true", help="MiniLM, small sizes, CPU: a smoke run")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"JSON report (default {OUT}; --tiny: {TINY_OUT.name})"
    )
    args = parser.parse_args(argv)
    models = args.models or (TINY_MODELS if args.tiny else DEFAULT_MODELS)
    report = run(models, args.tiny, args.device)
    out = args.out or (TINY_OUT if args.tiny else OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
