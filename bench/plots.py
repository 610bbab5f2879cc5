"""PNG plots of the `python -m bench` results: latency vs stored pages, ingest throughput vs batch size,
recall@k by category. Each plot is drawn only when its section is in the results."""

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display, and no GUI toolkit to import

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

LATENCY_PNG = "latency_vs_pages.png"
THROUGHPUT_PNG = "throughput_vs_batch.png"
RECALL_PNG = "recall_by_category.png"
DPI = 120


def write_plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write the plots the results have data for into `out_dir`; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    engine = results.get("engine") or {}
    written = []
    for name, rows, draw in (
        (LATENCY_PNG, engine.get("latency"), _latency),
        (THROUGHPUT_PNG, engine.get("ingest"), _throughput),
        (RECALL_PNG, results.get("recall"), _recall),
    ):
        if not rows:
            continue
        figure = plt.figure(figsize=(7, 4.5))
        try:
            draw(figure, rows)
            figure.suptitle(f"{results.get('machine', '')}", fontsize=8, y=0.995)
            figure.tight_layout()
            figure.savefig(out_dir / name, dpi=DPI)
        finally:
            plt.close(figure)
        written.append(out_dir / name)
    return written


def _latency(figure: Figure, rows: list[dict[str, Any]]) -> None:
    axes = figure.add_subplot()
    rows = sorted(rows, key=lambda row: row["pages"])
    pages = [row["pages"] for row in rows]
    for operation, color in (("retrieve", "tab:blue"), ("add_memory", "tab:orange")):
        axes.plot(pages, [r[operation]["p50_ms"] for r in rows], "o-", color=color, label=f"{operation} p50")
        axes.plot(pages, [r[operation]["p95_ms"] for r in rows], "o--", color=color, label=f"{operation} p95")
    axes.set_xscale("log")
    axes.set_xlabel("stored pages")
    axes.set_ylabel("latency (ms)")
    axes.set_title("Latency vs stored pages")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()


def _throughput(figure: Figure, rows: list[dict[str, Any]]) -> None:
    axes = figure.add_subplot()
    rows = sorted(rows, key=lambda row: row["batch_size"])
    axes.plot([r["batch_size"] for r in rows], [r["turns_per_s"] for r in rows], "o-")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("add_memories batch size")
    axes.set_ylabel("turns / s")
    axes.set_title("Ingest throughput vs batch size")
    axes.grid(True, which="both", alpha=0.3)


def _recall(figure: Figure, rows: list[dict[str, Any]]) -> None:
    """Recall@k per category, pooled over the conversations (weighted by question counts)."""
    axes = figure.add_subplot()
    ks = sorted({int(k) for row in rows for k in row["recall"]["overall"]})
    curves: dict[str, tuple[list[float], int]] = {"all": _pooled(rows, ks, None)}
    categories = sorted({int(c) for row in rows for c in row["recall"]["by_category"]})
    for category in categories:
        curves[f"category {category}"] = _pooled(rows, ks, category)
    for label, (values, count) in curves.items():
        style = "o-" if label == "all" else "o--"
        axes.plot(ks, values, style, linewidth=2.5 if label == "all" else 1.2, label=f"{label} (n={count})")
    axes.set_xticks(ks)
    axes.set_ylim(0, 1)
    axes.set_xlabel("k (pages retrieved)")
    axes.set_ylabel("evidence recall@k")
    conversations = ", ".join(str(row.get("sample_id", "?")) for row in rows)
    axes.set_title(f"LoCoMo recall@k by category ({conversations})")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)


def _pooled(rows: list[dict[str, Any]], ks: list[int], category: int | None) -> tuple[list[float], int]:
    """Mean recall at each k over all rows' questions (of one category, or all); JSON keys are strings."""
    total = 0
    sums = [0.0] * len(ks)
    for row in rows:
        report = row["recall"]
        if category is None:
            count, by_k = report["question_count"], report["overall"]
        else:
            key = _key(report["by_category"], category)
            if key is None:
                continue
            count, by_k = report["category_counts"][key], report["by_category"][key]
        total += count
        for i, k in enumerate(ks):
            sums[i] += by_k[_key(by_k, k)] * count
    return [s / total if total else 0.0 for s in sums], total


def _key(mapping: dict[Any, Any], number: int) -> Any:
    """The key for `number` whether the dict came from JSON (strings) or from Python (ints)."""
    for key in (number, str(number)):
        if key in mapping:
            return key
    return None
