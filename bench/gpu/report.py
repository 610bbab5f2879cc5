"""`python -m bench.gpu.report`: embedding and FAISS throughput as a fraction of the device's own ceilings.

Two ceilings are measured once per device: dense matmul FLOP/s (fp16 on CUDA, and fp32 too; fp32 on CPU;
a timed large square matmul, 2·n³ FLOPs) and memory bandwidth (a timed large copy, 2 bytes moved per
byte copied). Then:

- Embedding: tokens/s vs batch size per model, in fp16 on CUDA. Tokens are counted with the model's own
  tokenizer (real tokens, no padding); FLOPs ≈ 2 × non-embedding parameters × tokens (attention's
  sequence-squared term and padding are not counted, so the fraction is a lower bound of the hardware
  use). `--architectures` adds bge-m3 / Qwen3-Embedding-0.6B built from their configurations with random
  weights where the weights cannot be had (`bench/gpu/models.py`; every such row is labelled).
- Engine: the engine's own page embedding (`create_embedder`, `SentenceTransformerEmbedder.encode`) over
  LoCoMo page texts in chunks of `embedding_batch_size`, as background ingest calls it, against the raw
  `model.encode` of the same texts at several batch sizes. The embedder's LRU cache is off so repeated
  passes reach the model (the pages are 4 passes over the 756 LoCoMo dev exchanges).
- Batcher: the engine's `EmbeddingBatcher` fed by many sources at once (`MemoryPages`, in-memory page
  sources of 3 LoCoMo pages each, all notified together), timed from the notifications to the last vector
  applied, with the engine's default limits and larger ones; beside it, on the same texts, the raw
  `model.encode` at batch 1, at several batch sizes (all texts in one call, sorted by length: the best
  case) and called per chunk of 64 (what padding costs a batch whose texts arrive together), and the
  engine embedder's own `encode` per chunk of 64, with and without the tokenizers' thread pool and with
  the truncation check of before the fix (every batch tokenized a second time) emulated.
- Spaces: the whole engine, `Memoryos` spaces (offline LLM, data under a temporary directory) sharing one
  embedder and one scheduler, each adding its turns at once from its own thread and then reading them
  back with `retrieve` (which waits for their vectors): turns/s until every space finds its turns, and
  the batcher's counters.
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
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.gpu.ceilings import Sizes, bandwidth_ceiling, device_description, matmul_ceiling
from bench.gpu.embedding import embedding_rows
from bench.gpu.engine import batcher_rows, engine_rows, spaces_rows
from bench.gpu.models import (
    ARCHITECTURES,
    load_locomo_pairs,
)
from bench.gpu.search import faiss_rows, torch_flat_rows
from bench.gpu.tables import table

DEFAULT_MODELS = ("BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B", "all-MiniLM-L6-v2")
TINY_MODELS = ("all-MiniLM-L6-v2",)
OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "gpu_report.json"
TINY_OUT = OUT.with_name("gpu_report-tiny.json")
"""A smoke run never overwrites the real report."""
SECTIONS = ("embedding", "engine", "batcher", "spaces", "faiss", "torch_flat")
"""Measured in this order, after the ceilings (always measured: every fraction is against them)."""


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
    for section, measure in (("batcher", batcher_rows), ("spaces", spaces_rows)):
        if section in sections:
            try:
                report[section] = measure(_engine_spec(models), device, sizes, pairs)
            except Exception as error:  # reported, not fatal: the next sections still run
                report[section] = [{"skipped": f"{type(error).__name__}: {str(error)[:300]}"}]
            done(section)
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
    Each row's fractions stay against its own run's ceilings. A report merged before counts as its runs
    (their rows and notes kept), so a new run is merged into the published report."""
    merged: dict[str, Any] = {"machine": reports[0]["machine"], "tiny": any(r["tiny"] for r in reports)}
    merged["ceilings"] = reports[0]["ceilings"]
    merged["runs"] = []
    notes: list[str] = []
    for report in reports:
        offset = len(merged["runs"])
        if "runs" in report:  # merged before: keep its runs, renumbered after those already here
            notes += report.get("notes", [])
            for earlier in report["runs"]:
                merged["runs"].append({**earlier, "run": earlier["run"] + offset})
            for section in SECTIONS:
                if section in report:
                    merged[section] = [{**row, "run": row["run"] + offset} for row in report[section]]
            continue
        number = offset + 1
        sections = [section for section in SECTIONS if section in report]
        for section in sections:
            merged[section] = [{**row, "run": number} for row in report[section]]
        run: dict[str, Any] = {"run": number, "sections": sections}
        run |= {key: report[key] for key in ("command", "machine", "ceilings") if key in report}
        merged["runs"].append(run)
    if notes:
        merged = {"notes": notes, **merged}
    return merged


def write(report: dict[str, Any], out: Path) -> None:
    """The JSON report at `out` and its tables beside it (`.md`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    out.with_suffix(".md").write_text(table(report), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu.report", description=__doc__)
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
    parser.add_argument("--sources", type=int, default=None, help="batcher: page sources (3 pages each)")
    parser.add_argument("--spaces", type=int, default=None, help="spaces: Memoryos spaces")
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
            merged = {"notes": [*merged.pop("notes", []), *args.note], **merged}
        write(merged, out)
        print(table(merged), end="")
        return 0
    command = " ".join(["python -m bench.gpu.report", *(sys.argv[1:] if argv is None else argv)])
    sizes = Sizes(args.tiny)
    if args.faiss_dims:
        sizes.faiss_dims = tuple(args.faiss_dims)
    if args.repeats:
        sizes.repeats = sizes.search_repeats = args.repeats
    if args.sources:
        sizes.batcher_sources = args.sources
        sizes.batch1_texts = min(sizes.batch1_texts, args.sources * sizes.pages_per_source)
    if args.spaces:
        sizes.spaces = args.spaces
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
