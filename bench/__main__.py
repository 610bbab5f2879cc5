"""`python -m bench`: run the benchmark suite and write docs/benchmarks/: results.{json,md} (engine and
recall), the PNG plots, scheduler.{json,md} (many spaces, a slow LLM) and index.{json,md} (vector
indexes, also `python -m bench.engine.index`)."""

import argparse
import json
import os
import platform
from pathlib import Path

from bench.corpus import locomo_raw
from bench.engine.index import DEFAULT_SIZES, run_index_bench, write_index_results
from bench.engine.latency import run_engine
from bench.engine.scheduler import run_scheduler, scheduler_markdown
from bench.plots import write_plots
from bench.quality.recall import run_recall
from bench.report import markdown
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.embedding.shared import shared_embedder
from memoryos.eval.locomo import load_conversations

OUT_DIR = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"
SCHEDULER_CONVERSATION = "conv-26"


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_scheduler_results(config: MemoryConfig, model: Embedder, out: Path) -> None:
    """The scheduler part: scheduler.{json,md}."""
    (conversation,) = load_conversations(locomo_raw(), [SCHEDULER_CONVERSATION])
    results = {"machine": machine(), **run_scheduler(config, model, conversation)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "scheduler.json").write_text(json.dumps(results, indent=2))
    (out / "scheduler.md").write_text(scheduler_markdown(results))
    print(scheduler_markdown(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000", help="stored pages for the latency runs")
    parser.add_argument(
        "--index-sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="vectors for the index runs",
    )
    parser.add_argument("--only", choices=["engine", "recall", "index", "scheduler"], default=None)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    if args.only == "index":
        write_index_results(run_index_bench([int(s) for s in args.index_sizes.split(",")]), args.out)
        return
    config = MemoryConfig(torch_threads=1)
    model = shared_embedder(config)
    model.encode(["warm up the query encoder"], is_query=True)  # its one-time export is not a timed call
    if args.only == "scheduler":
        write_scheduler_results(config, model, args.out)
        return
    results: dict[str, object] = {"machine": machine(), "torch_threads": 1}
    if args.only in (None, "engine"):
        results["engine"] = run_engine([int(s) for s in args.sizes.split(",")], config, model)
    if args.only in (None, "recall"):
        results["recall"] = run_recall(config, model)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.only is None else f"-{args.only}"
    (args.out / f"results{suffix}.json").write_text(json.dumps(results, indent=2))
    (args.out / f"results{suffix}.md").write_text(markdown(results))
    if args.only is None:
        write_plots(results, args.out)
    print(markdown(results))
    if args.only is None:
        write_scheduler_results(config, model, args.out)
        write_index_results(run_index_bench([int(s) for s in args.index_sizes.split(",")]), args.out)


if __name__ == "__main__":
    main()
