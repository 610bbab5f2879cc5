"""PNG plots from a hand-made `python -m bench` results dict."""

import json
from pathlib import Path

from bench.plots import LATENCY_PNG, RECALL_PNG, THROUGHPUT_PNG, write_plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _latency_row(pages: int, retrieve_ms: float, add_ms: float) -> dict[str, object]:
    return {
        "pages": pages,
        "retrieve": {"p50_ms": retrieve_ms, "p95_ms": retrieve_ms * 2},
        "add_memory": {"p50_ms": add_ms, "p95_ms": add_ms * 3},
    }


def _recall_row(sample_id: str, base: float) -> dict[str, object]:
    ks = [1, 3, 5, 7, 10]
    return {
        "sample_id": sample_id,
        "recall": {
            "ks": ks,
            "overall": {k: base + k / 100 for k in ks},
            "by_category": {1: {k: base / 2 + k / 50 for k in ks}, 4: {k: base + k / 40 for k in ks}},
            "question_count": 30,
            "category_counts": {1: 10, 4: 20},
            "without_evidence": 0,
        },
    }


RESULTS = {
    "machine": "test machine, 2 cores",
    "engine": {
        "latency": [
            _latency_row(1000, 12.0, 30.0),
            _latency_row(10000, 15.0, 31.0),
            _latency_row(100000, 25.0, 35.0),
        ],
        "ingest": [{"batch_size": b, "turns": 512, "turns_per_s": 10.0 * b**0.5} for b in (1, 16, 64, 256)],
    },
    "recall": [_recall_row("conv-26", 0.5), _recall_row("conv-30", 0.6)],
}


def test_every_plot_is_a_non_empty_png(tmp_path: Path) -> None:
    # Through JSON, as `python -m bench` writes it: integer keys become strings.
    results = json.loads(json.dumps(RESULTS))

    written = write_plots(results, tmp_path / "plots")

    assert [path.name for path in written] == [LATENCY_PNG, THROUGHPUT_PNG, RECALL_PNG]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000


def test_only_the_sections_present_are_drawn(tmp_path: Path) -> None:
    written = write_plots({"machine": "m", "recall": RESULTS["recall"]}, tmp_path)

    assert [path.name for path in written] == [RECALL_PNG]
    assert write_plots({"machine": "m"}, tmp_path / "none") == []
