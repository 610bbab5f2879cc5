"""`python -m bench.gpu_report`: embedding and FAISS throughput as a fraction of the device's own ceilings.

Two ceilings are measured once per device: dense matmul FLOP/s (fp16 on CUDA, and fp32 too; fp32 on CPU;
a timed large square matmul, 2·n³ FLOPs) and memory bandwidth (a timed large copy, 2 bytes moved per
byte copied). Then:

- Embedding: tokens/s vs batch size per model, in fp16 on CUDA. Tokens are counted with the model's own
  tokenizer (real tokens, no padding); FLOPs ≈ 2 × non-embedding parameters × tokens (attention's
  sequence-squared term and padding are not counted, so the fraction is a lower bound of the hardware
  use). `--architectures` adds bge-m3 / Qwen3-Embedding-0.6B built from their configurations with random
  weights where the weights cannot be had (`bench/gpu_models.py`; every such row is labelled).
- Engine: the engine's own page embedding (`create_embedder`, `SentenceTransformerEmbedder.encode`) over
  LoCoMo page texts in chunks of `embedding_batch_size`, as background ingest calls it, against the raw
  `model.encode` of the same texts at several batch sizes. The embedder's LRU cache is off so repeated
  passes reach the model (the pages are 4 passes over the 756 LoCoMo dev exchanges).
- FAISS flat inner-product search on the CPU (fp32 `IndexFlatIP`, and the engine's fp16
  `IndexScalarQuantizer` for small batches), and on the GPU when faiss has one: one query batch reads
  the whole database once, n × dim × bytes, so the bandwidth floor is that over the measured bandwidth;
  also shown is 2·n·dim·queries FLOPs against the matmul ceiling, which binds large batches.
- On CUDA, the same flat search as a torch matmul + top-k (not faiss: no faiss GPU build here), with the
  database resident in fp32 and fp16, queries uploaded and results downloaded inside the timing.

The same script runs on a CUDA machine unchanged. `--tiny` uses all-MiniLM-L6-v2 (bundled), small sizes
and the CPU, finishing in under a minute: that is how it is tested where there is no GPU and no bge-m3/Qwen3 weights.
"""

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.gpu_models import (
    ARCHITECTURES,
    load_locomo_pairs,
    load_named_model,
    model_loaders,
    page_texts,
    parse_model_spec,
    sample_texts,
)

DEFAULT_MODELS = ("BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B", "all-MiniLM-L6-v2")
TINY_MODELS = ("all-MiniLM-L6-v2",)
OUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "gpu_report.json"
TINY_OUT = OUT.with_name("gpu_report-tiny.json")
"""A smoke run never overwrites the real report."""
SECTIONS = ("embedding", "engine", "faiss", "torch_flat")
"""Measured in this order, after the ceilings (always measured: every fraction is against them)."""
TORCH_SEARCH_CHUNK = 1024
"""Queries per matmul in the torch flat search: bounds the score matrix (1024 × 1M fp32 = 4 GB)."""


class Sizes:
    """Problem sizes: full for a GPU report, tiny for a CPU smoke run."""

    def __init__(self, tiny: bool) -> None:
        self.matmul_n = 1024 if tiny else 8192
        self.copy_bytes = (64 if tiny else 2048) * 2**20
        self.batch_sizes: tuple[int, ...] = (1, 8) if tiny else (1, 8, 32, 128, 512, 2048)
        self.text_words = 16 if tiny else 120
        self.min_texts = 4 if tiny else 256
        self.max_texts = 64 if tiny else 8192
        """Texts per timed pass: 8 batches, within these bounds."""
        self.engine_texts = 32 if tiny else 3024
        self.engine_batch_sizes: tuple[int, ...] = (8, 16) if tiny else (16, 64, 256, 512)
        """Chunk sizes for the engine; each below the 756 distinct pages, so no chunk holds a duplicate."""
        self.raw_batch_sizes: tuple[int, ...] = (8, 32) if tiny else (64, 256, 1024)
        self.faiss_n = 20_000 if tiny else 1_000_000
        self.faiss_dims: tuple[int, ...] = (384,) if tiny else (384, 1024)
        self.faiss_queries: tuple[int, ...] = (1, 16) if tiny else (1, 16, 64, 256, 4096)
        self.sq_max_queries = 16 if tiny else 64
        """The fp16 scalar-quantizer scan has no BLAS path: larger batches would take minutes on a CPU."""
        self.repeats = 3 if tiny else 5
        self.search_repeats = 3


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


def matmul_ceiling(device: str, n: int, repeats: int, dtype_name: str | None = None) -> dict[str, Any]:
    import torch

    dtype = getattr(torch, dtype_name) if dtype_name else torch.float16 if device == "cuda" else torch.float32
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


def _non_embedding_params(model: Any) -> int:
    import torch

    embedding = sum(
        p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    )
    return int(sum(p.numel() for p in model.parameters()) - embedding)


def _release(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def embedding_rows(
    models: Sequence[str],
    device: str,
    sizes: Sizes,
    matmul_flops: float,
    *,
    architectures: Sequence[str] = (),
    pairs: Sequence[tuple[str, str]] = (),
    tiny: bool = False,
) -> list[dict[str, Any]]:
    """Rows per model and batch size; a model that cannot be loaded or built gets one row saying why."""
    tokenizer = _minilm_location(models) if architectures else None
    rows: list[dict[str, Any]] = []
    for label, fields, load in model_loaders(models, architectures, tokenizer, device, tiny):
        try:
            model = load()
        except Exception as error:  # a missing model is reported, not fatal: the others still run
            rows.append({"model": label, **fields, "skipped": f"{type(error).__name__}: {str(error)[:200]}"})
            continue
        rows += [{**row, **fields} for row in _model_rows(label, model, device, sizes, matmul_flops, pairs)]
        del model
        _release(device)
    return rows


def _minilm_location(models: Sequence[str]) -> str:
    """The MiniLM whose tokenizer the architecture-only models use: the first --models entry naming it."""
    for spec in models:
        label, location = parse_model_spec(spec)
        if "minilm" in label.lower():
            return location
    return parse_model_spec("all-MiniLM-L6-v2")[1]


def _count_tokens(model: Any, texts: Sequence[str]) -> int:
    encoded = model.tokenizer(list(texts), truncation=True, max_length=model.max_seq_length)
    return sum(len(ids) for ids in encoded["input_ids"])


def _model_rows(
    name: str,
    model: Any,
    device: str,
    sizes: Sizes,
    matmul_flops: float,
    pairs: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
    import torch

    params = _non_embedding_params(model)
    largest = max(sizes.batch_sizes)
    rows = []
    with torch.inference_mode():
        model.encode(sample_texts(pairs, largest, sizes.text_words), batch_size=largest)  # warm-up
        for batch_size in sizes.batch_sizes:
            count = min(max(sizes.min_texts, 8 * batch_size), max(sizes.max_texts, batch_size))
            texts = sample_texts(pairs, count, sizes.text_words)
            tokens = _count_tokens(model, texts)
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
                    "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
                    "non_embedding_params": params,
                    "batch_size": batch_size,
                    "texts": len(texts),
                    "tokens": tokens,
                    "seconds": seconds,
                    "texts_per_s": len(texts) / seconds,
                    "tokens_per_s": tokens / seconds,
                    "flops_per_s": flops,
                    "fraction_of_matmul": flops / matmul_flops,
                }
            )
    return rows


def engine_rows(
    spec: str, device: str, sizes: Sizes, pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The engine's page embedding at several `embedding_batch_size`s, then the raw model's encode."""
    import torch

    from memoryos.config import MemoryConfig
    from memoryos.embedding import create_embedder

    label, location = parse_model_spec(spec)
    texts = page_texts(pairs, sizes.engine_texts)
    threads = torch.get_num_threads()  # the embedder sets torch's threads at load; restored below
    rows: list[dict[str, Any]] = []
    try:
        raw = load_named_model(location, device)
        tokens = _count_tokens(raw, texts)
        common = {"model": label, "device": device, "texts": len(texts), "tokens": tokens}
        common["distinct_texts"] = len(set(texts))
        with torch.inference_mode():
            for batch_size in sizes.raw_batch_sizes:
                run = functools.partial(
                    raw.encode, texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True
                )
                seconds = best_seconds(run, sizes.repeats, _sync(device))
                rows.append(_throughput_row("model.encode", batch_size, seconds, common))
        del raw
        _release(device)
        for batch_size in sizes.engine_batch_sizes:
            config = MemoryConfig(
                embedding_device=device,
                embedding_model_name=location,
                embedding_batch_size=batch_size,
                embedding_cache_size=0,
            )
            embedder = create_embedder(config)
            assert embedder.dim > 0  # loads the model outside the timing

            def ingest(embedder: Any = embedder, batch_size: int = batch_size) -> None:
                for start in range(0, len(texts), batch_size):
                    embedder.encode(texts[start : start + batch_size])

            seconds = best_seconds(ingest, sizes.repeats, _sync(device))
            rows.append(_throughput_row("engine embedder", batch_size, seconds, common))
            del embedder, ingest
            _release(device)
    finally:
        torch.set_num_threads(threads)
    return rows


def _throughput_row(path: str, batch_size: int, seconds: float, common: dict[str, Any]) -> dict[str, Any]:
    return {
        **common,
        "path": path,
        "batch_size": batch_size,
        "seconds": seconds,
        "texts_per_s": common["texts"] / seconds,
        "tokens_per_s": common["tokens"] / seconds,
    }


def faiss_gpus() -> int:
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def faiss_rows(sizes: Sizes, ceilings: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    import faiss

    rows = []
    for dim in sizes.faiss_dims:
        rng = np.random.default_rng(dim)
        base = rng.standard_normal((sizes.faiss_n, dim), dtype=np.float32)
        flat = faiss.IndexFlatIP(dim)
        flat.add(base)
        sq = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        sq.add(base)
        del base
        indexes: list[tuple[str, str, Any, int]] = [
            ("cpu", "faiss IndexFlatIP fp32", flat, 4),
            ("cpu", "faiss IndexScalarQuantizer fp16 (the engine's)", sq, 2),
        ]
        if faiss_gpus() > 0 and "cuda" in ceilings:
            resources = faiss.StandardGpuResources()
            indexes.append(
                ("cuda", "faiss GpuIndexFlatIP fp32", faiss.index_cpu_to_gpu(resources, 0, flat), 4)
            )
        for backend, kind, index, bytes_per_value in indexes:
            for queries in sizes.faiss_queries:
                if bytes_per_value == 2 and queries > sizes.sq_max_queries:
                    continue
                batch = rng.standard_normal((queries, dim), dtype=np.float32)
                seconds = best_seconds(
                    functools.partial(index.search, batch, 10), sizes.search_repeats, lambda: None
                )
                matmul = ceilings[backend]["matmul" if backend == "cpu" else "matmul_float32"]
                rows.append(
                    _search_row(backend, kind, sizes.faiss_n, dim, queries, bytes_per_value, seconds)
                    | _fractions(
                        sizes.faiss_n, dim, queries, bytes_per_value, seconds, ceilings[backend], matmul
                    )
                )
        del flat, sq, indexes
    return rows


def torch_flat_rows(sizes: Sizes, ceilings: dict[str, dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """Exact inner-product top-10 as a matmul + top-k on `device`: what a GPU flat scan costs here."""
    import torch

    rows = []
    sync = _sync(device)
    generator = torch.Generator(device=device).manual_seed(0)
    for dim in sizes.faiss_dims:
        rng = np.random.default_rng(dim)
        database32 = torch.randn(sizes.faiss_n, dim, device=device, generator=generator)
        for dtype, bytes_per_value in ((torch.float32, 4), (torch.float16, 2)):
            database = database32 if dtype == torch.float32 else database32.half()
            ceiling = ceilings[device]
            matmul = ceiling["matmul_float32" if dtype == torch.float32 and device == "cuda" else "matmul"]
            for queries in sizes.faiss_queries:
                batch = rng.standard_normal((queries, dim), dtype=np.float32)

                def search(batch: np.ndarray = batch, database: Any = database, dtype: Any = dtype) -> object:
                    found = []
                    for chunk in torch.from_numpy(batch).to(device, dtype).split(TORCH_SEARCH_CHUNK):
                        scores, ids = (chunk @ database.T).topk(10, dim=1)
                        found.append((scores.float().cpu(), ids.cpu()))
                    return found

                seconds = best_seconds(search, sizes.search_repeats, sync)
                kind = f"torch matmul + topk {str(dtype).removeprefix('torch.')} (not faiss)"
                rows.append(
                    _search_row(device, kind, sizes.faiss_n, dim, queries, bytes_per_value, seconds)
                    | _fractions(sizes.faiss_n, dim, queries, bytes_per_value, seconds, ceiling, matmul)
                )
            del database
        del database32
        _release(device)
    return rows


def _search_row(
    backend: str, kind: str, n: int, dim: int, queries: int, bytes_per_value: int, seconds: float
) -> dict[str, Any]:
    scanned = n * dim * bytes_per_value
    return {
        "backend": backend,
        "index": kind,
        "vectors": n,
        "dim": dim,
        "queries": queries,
        "seconds": seconds,
        "queries_per_s": queries / seconds,
        "bytes_scanned": scanned,
        "bytes_per_s": scanned / seconds,
    }


def _fractions(
    n: int,
    dim: int,
    queries: int,
    bytes_per_value: int,
    seconds: float,
    ceiling: dict[str, Any],
    matmul: dict[str, Any],
) -> dict[str, Any]:
    scanned = n * dim * bytes_per_value
    return {
        "fraction_of_bandwidth": scanned / seconds / ceiling["bandwidth"]["bytes_per_s"],
        "fraction_of_matmul": 2 * n * dim * queries / seconds / matmul["flops_per_s"],
        "matmul_ceiling_dtype": matmul["dtype"],
    }


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _nvidia_smi() -> dict[str, str]:
    query = "name,driver_version,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    name, driver, memory = (part.strip() for part in out.splitlines()[0].split(","))
    return {"nvidia_smi_name": name, "driver": driver, "gpu_memory": memory}


def device_description(device: str) -> dict[str, Any]:
    import faiss
    import torch

    described: dict[str, Any] = {
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "sentence_transformers": _package_version("sentence-transformers"),
        "transformers": _package_version("transformers"),
        "faiss": getattr(faiss, "__version__", "unknown"),
        "faiss_threads": faiss.omp_get_max_threads(),
        "faiss_gpus": faiss_gpus(),
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        described["gpu"] = torch.cuda.get_device_name(0)
        described["cuda"] = torch.version.cuda
        described["multiprocessors"] = properties.multi_processor_count
        described |= _nvidia_smi()
    return described


def run(
    models: Sequence[str],
    tiny: bool,
    device: str,
    *,
    architectures: Sequence[str] = (),
    locomo: Path | None = None,
    sections: Sequence[str] = SECTIONS,
    sizes: Sizes | None = None,
    sink: Callable[[dict[str, Any]], None] = lambda report: None,
) -> dict[str, Any]:
    """The report; `sink` gets it after every section, so a run cut short still leaves what it measured."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and not tiny else "cpu"
    sizes = sizes or Sizes(tiny)
    started = time.perf_counter()

    def done(section: str) -> None:
        print(
            f"[gpu_report] {section} done at {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        sink(report)

    pairs = load_locomo_pairs(locomo)
    report: dict[str, Any] = {"machine": device_description(device), "tiny": tiny, "ceilings": {}}
    for name in ["cpu"] + (["cuda"] if device == "cuda" else []):
        report["ceilings"][name] = {
            "matmul": matmul_ceiling(name, sizes.matmul_n, sizes.repeats),
            "bandwidth": bandwidth_ceiling(name, sizes.copy_bytes, sizes.repeats),
        }
        if name == "cuda":
            report["ceilings"][name]["matmul_float32"] = matmul_ceiling(
                name, sizes.matmul_n, sizes.repeats, "float32"
            )
    done("ceilings")
    if "embedding" in sections:
        report["embedding"] = embedding_rows(
            models,
            device,
            sizes,
            report["ceilings"][device]["matmul"]["flops_per_s"],
            architectures=architectures,
            pairs=pairs,
            tiny=tiny,
        )
        done("embedding")
    if "engine" in sections:
        try:
            report["engine"] = engine_rows(_engine_spec(models), device, sizes, pairs)
        except Exception as error:  # reported, not fatal: the search sections still run
            report["engine"] = [{"skipped": f"{type(error).__name__}: {str(error)[:300]}"}]
        done("engine")
    if "faiss" in sections:
        report["faiss"] = faiss_rows(sizes, report["ceilings"])
        done("faiss")
    if "torch_flat" in sections and device == "cuda":
        report["torch_flat"] = torch_flat_rows(sizes, report["ceilings"], device)
        done("torch_flat")
    return report


def _engine_spec(models: Sequence[str]) -> str:
    """The engine runs MiniLM, its default: the first --models entry naming it, else the bundled one."""
    return next((spec for spec in models if "minilm" in spec.lower()), "all-MiniLM-L6-v2")


def merge(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs (a device lease too short for every section at once): each section
    from the last run that measured it, every run's machine, ceilings and command kept under `runs`.
    Each row's fractions stay against its own run's ceilings."""
    merged: dict[str, Any] = {"machine": reports[0]["machine"], "tiny": any(r["tiny"] for r in reports)}
    merged["ceilings"] = reports[0]["ceilings"]
    merged["runs"] = []
    for number, report in enumerate(reports, 1):
        sections = [section for section in SECTIONS if section in report]
        for section in sections:
            merged[section] = [{**row, "run": number} for row in report[section]]
        run: dict[str, Any] = {"run": number, "sections": sections}
        run |= {key: report[key] for key in ("command", "machine", "ceilings") if key in report}
        merged["runs"].append(run)
    return merged


def table(report: dict[str, Any]) -> str:
    lines = [*(f"- {note}" for note in report.get("notes", [])), *([""] if "notes" in report else [])]
    for run in report.get("runs", []):
        command = f" `{run['command']}`" if "command" in run else ""
        lines.append(f"Run {run['run']}:{command} measured {', '.join(run['sections'])}.")
        lines += [f"Run {run['run']} machine: {json.dumps(run['machine'])}"]
        lines += [f"Run {run['run']} {line}" for line in _ceiling_lines(run["ceilings"])] + [""]
    if "runs" not in report:
        lines += [f"Command: `{report['command']}`"] if "command" in report else []
        lines += [f"Machine: {json.dumps(report['machine'])}", "", *_ceiling_lines(report["ceilings"])]
    lines += _embedding_table(report.get("embedding", []))
    lines += _engine_table(report.get("engine", []))
    lines += _search_table("faiss flat", report.get("faiss", []))
    lines += _search_table("torch flat search", report.get("torch_flat", []))
    return "\n".join(lines) + "\n"


def _ceiling_lines(ceilings: dict[str, Any]) -> list[str]:
    lines = []
    for device, ceiling in ceilings.items():
        matmuls = [ceiling["matmul"]] + ([ceiling["matmul_float32"]] if "matmul_float32" in ceiling else [])
        described = ", ".join(f"{m['flops_per_s'] / 1e12:.3f} TFLOP/s ({m['dtype']})" for m in matmuls)
        lines.append(
            f"{device} ceilings: matmul {described}, bandwidth {ceiling['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s"
        )
    return lines


def _embedding_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| model | weights | batch | texts/s | tokens/s | TFLOP/s | of matmul ceiling |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = sorted({row["note"] for row in rows if "note" in row})
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['model']} | skipped: {row['skipped']} | | | | | |")
            continue
        weights = row.get("weights", "real") + (" *" if "note" in row else "")
        lines.append(
            f"| {row['model']} | {weights} | {row['batch_size']} | {row['texts_per_s']:,.0f} "
            f"| {row['tokens_per_s']:,.0f} | {row['flops_per_s'] / 1e12:.3f} | {row['fraction_of_matmul']:.3f} |"
        )
    return lines + [f"\n\\* {note}" for note in notes]


def _engine_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| page embedding | model | batch | texts | texts/s | tokens/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | |")
            continue
        lines.append(
            f"| {row['path']} | {row['model']} | {row['batch_size']} | {row['texts']:,} "
            f"| {row['texts_per_s']:,.0f} | {row['tokens_per_s']:,.0f} |"
        )
    return lines


def _search_table(title: str, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        f"| {title} | index | vectors × dim | queries | ms | GB/s scanned | of bandwidth | of matmul |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {row['index']} | {row['vectors']:,} × {row['dim']} | {row['queries']} "
            f"| {row['seconds'] * 1000:.2f} | {row['bytes_per_s'] / 1e9:.1f} "
            f"| {row['fraction_of_bandwidth']:.3f} | {row['fraction_of_matmul']:.3f} ({row['matmul_ceiling_dtype']}) |"
        )
    return lines


def write(report: dict[str, Any], out: Path) -> None:
    """The JSON report at `out` and its tables beside it (`.md`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    out.with_suffix(".md").write_text(table(report), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_report", description=__doc__)
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        help=f"names or LABEL=PATH (a local model directory); default {' '.join(DEFAULT_MODELS)}",
    )
    parser.add_argument(
        "--architectures",
        nargs="*",
        default=[],
        choices=sorted(ARCHITECTURES),
        help="also time these architectures with RANDOM weights (their weights are not here); "
        "tokenized with the MiniLM tokenizer, rows labelled 'architecture only'",
    )
    parser.add_argument(
        "--locomo",
        type=Path,
        default=None,
        help="LoCoMo pairs/ directory or pairs JSON (default: the dev data)",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="what to measure (default: all)",
    )
    parser.add_argument("--faiss-dims", type=int, nargs="+", default=None, help="flat-search dimensions")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement")
    parser.add_argument(
        "--merge", type=Path, nargs="+", default=None, help="measure nothing: merge these reports into --out"
    )
    parser.add_argument(
        "--note", action="append", default=[], help="with --merge: a line to print above the tables"
    )
    parser.add_argument("--tiny", action="store_true", help="MiniLM, small sizes, CPU: a smoke run")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON report, .md beside it (default {OUT}; --tiny: {TINY_OUT.name})",
    )
    args = parser.parse_args(argv)
    models = args.models or (TINY_MODELS if args.tiny else DEFAULT_MODELS)
    out = args.out or (TINY_OUT if args.tiny else OUT)
    if args.merge:
        merged = merge([json.loads(path.read_text(encoding="utf-8")) for path in args.merge])
        if args.note:
            merged = {"notes": args.note, **merged}
        write(merged, out)
        print(table(merged), end="")
        return 0
    command = " ".join(["python -m bench.gpu_report", *(sys.argv[1:] if argv is None else argv)])
    sizes = Sizes(args.tiny)
    if args.faiss_dims:
        sizes.faiss_dims = tuple(args.faiss_dims)
    if args.repeats:
        sizes.repeats = sizes.search_repeats = args.repeats
    report = run(
        models,
        args.tiny,
        args.device,
        architectures=args.architectures,
        locomo=args.locomo,
        sections=args.sections,
        sizes=sizes,
        sink=lambda partial: write({"command": command, **partial}, out),
    )
    print(table({"command": command, **report}), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
