"""`python -m bench.gpu_report --tiny`: the CPU smoke path of the GPU report, with the bundled MiniLM."""

import json
from pathlib import Path

import pytest

from bench import gpu_report


def test_tiny_report_measures_ceilings_and_fractions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gpu.json"

    assert gpu_report.main(["--tiny", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    assert report["tiny"] is True and report["machine"]["device"] == "cpu"
    cpu = report["ceilings"]["cpu"]
    assert cpu["matmul"]["dtype"] == "float32" and cpu["matmul"]["flops_per_s"] > 1e8
    assert cpu["bandwidth"]["bytes_per_s"] > 1e8
    embedding = report["embedding"]
    assert [row["batch_size"] for row in embedding] == [1, 8]
    for row in embedding:
        assert row["model"] == "all-MiniLM-L6-v2" and row["tokens"] > row["texts"]
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
        assert row["flops_per_s"] == pytest.approx(2 * row["non_embedding_params"] * row["tokens_per_s"])
        assert 0 < row["fraction_of_matmul"] <= 1.5
    assert 10e6 < embedding[0]["non_embedding_params"] < 22e6  # MiniLM: 22.7M, 11.7M of them embeddings
    faiss_rows = report["faiss"]
    assert {row["backend"] for row in faiss_rows} == {"cpu"} and [r["queries"] for r in faiss_rows] == [1, 16]
    for row in faiss_rows:
        assert row["bytes_scanned"] == row["vectors"] * row["dim"] * 4
        assert 0 < row["fraction_of_bandwidth"] <= 1.5 and 0 < row["fraction_of_matmul"] <= 1.5
    printed = capsys.readouterr().out
    assert "cpu ceilings: matmul" in printed and "| all-MiniLM-L6-v2 | 8 |" in printed


def test_a_missing_model_is_reported_not_fatal() -> None:
    sizes = gpu_report.Sizes(tiny=True)

    (row,) = gpu_report.embedding_rows(["/nonexistent/model-dir"], "cpu", sizes, matmul_flops=1e9)

    assert row["model"] == "/nonexistent/model-dir" and "skipped" in row
