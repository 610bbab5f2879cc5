"""`python -m bench.gpu.report --tiny`: the CPU smoke path of the GPU report, with the bundled MiniLM."""

import json
import math
from pathlib import Path

import pytest
import torch

from bench.gpu import models as gpu_models
from bench.gpu import report as gpu_report


def _small_sizes() -> gpu_report.Sizes:
    sizes = gpu_report.Sizes(tiny=True)
    sizes.batch_sizes = (2,)
    sizes.min_texts = sizes.max_texts = 2
    sizes.engine_texts = 8
    sizes.engine_batch_sizes = (4,)
    sizes.raw_batch_sizes = (8,)
    sizes.faiss_n = 2_000
    sizes.faiss_queries = (1, 32)
    sizes.repeats = sizes.search_repeats = 1
    return sizes


PAIRS = [(f"I walked my dog Pico {i} times today.", f"That is a lot of walks, {i}!") for i in range(8)]


@pytest.mark.locomo  # the embedding section encodes LoCoMo's exchanges when found, its own text else
def test_tiny_report_measures_ceilings_and_fractions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gpu.json"

    assert gpu_report.main(["--tiny", "--sections", "embedding", "faiss", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    assert report["tiny"] is True and report["machine"]["device"] == "cpu"
    cpu = report["ceilings"]["cpu"]
    assert cpu["matmul"]["dtype"] == "float32" and cpu["matmul"]["flops_per_s"] > 1e8
    assert cpu["bandwidth"]["bytes_per_s"] > 1e8
    embedding = report["embedding"]
    assert [row["batch_size"] for row in embedding] == [1, 8]
    for row in embedding:
        assert (
            row["model"] == "all-MiniLM-L6-v2" and row["weights"] == "real" and row["tokens"] > row["texts"]
        )
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
        assert row["flops_per_s"] == pytest.approx(2 * row["non_embedding_params"] * row["tokens_per_s"])
        assert 0 < row["fraction_of_matmul"] <= 1.5
    assert 10e6 < embedding[0]["non_embedding_params"] < 22e6  # MiniLM: 22.7M, 11.7M of them embeddings
    faiss_rows = report["faiss"]
    assert {row["backend"] for row in faiss_rows} == {"cpu"} and "engine" not in report
    assert [(r["index"].split()[1], r["queries"]) for r in faiss_rows] == [
        ("IndexFlatIP", 1),
        ("IndexFlatIP", 16),
        ("IndexScalarQuantizer", 1),
        ("IndexScalarQuantizer", 16),
    ]
    for row in faiss_rows:
        bytes_per_value = 4 if "IndexFlatIP" in row["index"] else 2
        assert row["bytes_scanned"] == row["vectors"] * row["dim"] * bytes_per_value
        # A small database may sit in cache, beating the copy ceiling: only sanity is asserted.
        assert 0 < row["fraction_of_bandwidth"] < math.inf and 0 < row["fraction_of_matmul"] < math.inf
    printed = capsys.readouterr().out
    assert "cpu ceilings: matmul" in printed and "| all-MiniLM-L6-v2 | real | 8 |" in printed
    assert out.with_suffix(".md").read_text() == printed


def test_architecture_only_models_are_built_and_labelled() -> None:
    rows = gpu_report.embedding_rows(
        [],
        "cpu",
        _small_sizes(),
        matmul_flops=1e9,
        architectures=["bge-m3", "qwen3-embedding-0.6b"],
        pairs=PAIRS,
        tiny=True,
    )

    assert [row["model"] for row in rows] == [
        "BAAI/bge-m3 (architecture only)",
        "Qwen/Qwen3-Embedding-0.6B (architecture only)",
    ]
    for row in rows:
        assert "skipped" not in row, row
        assert row["weights"] == "random" and row["note"].startswith(gpu_models.ARCHITECTURE_NOTE)
        assert row["tokens"] > row["texts"] == 2
        assert 0 < row["non_embedding_params"] < 1e6  # the tiny shapes, not the 0.3-0.4B of the real ones
    assert [row["pooling"] for row in rows] == ["cls", "lasttoken"]
    table = gpu_report.table({"machine": {}, "ceilings": {}, "embedding": rows})
    assert "| BAAI/bge-m3 (architecture only) | random * | 2 |" in table
    assert f"\\* {gpu_models.ARCHITECTURE_NOTE}" in table


def test_engine_rows_time_the_engine_embedder_against_the_raw_model() -> None:
    threads = torch.get_num_threads()

    rows = gpu_report.engine_rows("all-MiniLM-L6-v2", "cpu", _small_sizes(), PAIRS)

    assert [(row["path"], row["batch_size"]) for row in rows] == [("model.encode", 8), ("engine embedder", 4)]
    for row in rows:
        assert row["texts"] == row["distinct_texts"] == 8 and row["tokens"] > 8 * 10
        assert row["texts_per_s"] == pytest.approx(8 / row["seconds"])
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
    assert torch.get_num_threads() == threads


def test_batcher_rows_pool_many_sources_next_to_the_raw_model_and_the_engine_embedder() -> None:
    sizes = _small_sizes()
    sizes.batcher_sources, sizes.batch1_texts, sizes.chunk = 4, 2, 4
    sizes.batcher_raw_batch_sizes = (12,)
    sizes.batcher_limits = ((None, None), (8, None))
    threads = torch.get_num_threads()

    rows = gpu_report.batcher_rows("all-MiniLM-L6-v2", "cpu", sizes, PAIRS)

    assert [(row["path"], row["batch_size"], row["parallelism"]) for row in rows] == [
        ("model.encode", 1, "default"),
        ("model.encode", 12, "default"),
        ("model.encode per chunk", 4, "default"),
        ("engine embedder, check before the fix (emulated)", 4, "false"),
        ("engine embedder", 4, "false"),
        ("engine embedder", 4, "default"),
        ("engine embedder, each run in a new thread", 4, "default"),
        ("EmbeddingBatcher", 64, "false"),  # the engine's default max_batch_size
        ("EmbeddingBatcher", 8, "false"),
        ("EmbeddingBatcher, one thread for every run", 64, "false"),
    ]
    assert rows[0]["texts"] == 2 and rows[1]["best"] is True
    for row in rows[1:]:
        assert row["texts"] == 12 and row["tokens"] > 12 * 10
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
    default, small, reused = rows[-3:]
    assert (default["sources"], default["pages_per_source"], default["embedder_batch_size"]) == (4, 3, 4)
    assert default["batches"] == 1 and default["mean_batch_size"] == 12  # every source in one batch
    assert small["batches"] == 2 and small["largest_batch"] == 8
    assert reused["batches"] == 1 and reused["mean_batch_size"] == 12  # counted per run, not since start
    for row in (default, small, reused):
        assert row["max_abs_diff_vs_engine"] < 1e-5 and "vectors" not in row
    assert torch.get_num_threads() == threads
    table = gpu_report.table({"machine": {}, "ceilings": {}, "batcher": rows})
    assert "| EmbeddingBatcher ≤16,384 tokens, 5 ms | all-MiniLM-L6-v2 | 8 | 12 |" in table
    assert "| model.encode (best) |" in table


def test_spaces_rows_write_from_threads_and_read_back() -> None:
    sizes = _small_sizes()
    sizes.spaces, sizes.turns_per_space = 3, 2

    (row,) = gpu_report.spaces_rows("all-MiniLM-L6-v2", "cpu", sizes, PAIRS)

    assert row["turns"] == 6 and row["all_found"] is True
    assert row["batched_texts"] >= 6 and row["queries"] == 3 and row["batches"] >= 1
    assert (
        row["turns_per_s"] == pytest.approx(6 / row["seconds"]) and row["written_seconds"] <= row["seconds"]
    )
    assert "| 3 × 2 turns, all-MiniLM-L6-v2 | 6 |" in gpu_report.table(
        {"machine": {}, "ceilings": {}, "spaces": [row]}
    )


def test_pages_and_pairs_for_pooling_are_distinct() -> None:
    texts = gpu_models.distinct_page_texts(PAIRS[:2], 5)
    assert len(set(texts)) == 5 and texts[2] == "User: " + PAIRS[0][0] + " Assistant: " + PAIRS[0][1] + " (2)"
    assert gpu_models.distinct_pairs(PAIRS[:2], 3)[2] == (PAIRS[0][0], PAIRS[0][1] + " (2)")


def test_torch_flat_search_rows() -> None:
    sizes = _small_sizes()
    ceilings = {
        "cpu": {"matmul": {"dtype": "float32", "flops_per_s": 1e10}, "bandwidth": {"bytes_per_s": 1e10}}
    }

    rows = gpu_report.torch_flat_rows(sizes, ceilings, "cpu")

    assert [(row["index"].split()[-3], row["queries"]) for row in rows] == [
        ("float32", 1),
        ("float32", 32),
        ("float16", 1),
        ("float16", 32),
    ]
    assert [row["bytes_scanned"] for row in rows] == [2_000 * 384 * 4] * 2 + [2_000 * 384 * 2] * 2


def test_a_missing_model_is_reported_not_fatal() -> None:
    sizes = gpu_report.Sizes(tiny=True)

    (row,) = gpu_report.embedding_rows(["/nonexistent/model-dir"], "cpu", sizes, matmul_flops=1e9)

    assert row["model"] == "/nonexistent/model-dir" and "skipped" in row


def test_model_specs_and_locomo_sources(tmp_path: Path) -> None:
    assert gpu_models.parse_model_spec("all-MiniLM-L6-v2=/models/minilm-fp16") == (
        "all-MiniLM-L6-v2",
        "/models/minilm-fp16",
    )
    assert gpu_models.parse_model_spec("BAAI/bge-m3") == ("BAAI/bge-m3", "BAAI/bge-m3")
    pairs_file = tmp_path / "pairs.json"
    pairs_file.write_text(json.dumps({"pairs": [{"user_input": "Hi", "agent_response": "Hello"}]}))

    assert gpu_models.load_locomo_pairs(pairs_file) == [("Hi", "Hello")]
    assert gpu_models.page_texts([("Hi", "Hello")], 2) == ["User: Hi Assistant: Hello"] * 2
    with pytest.raises(FileNotFoundError):
        gpu_models.load_locomo_pairs(tmp_path / "missing.json")


def test_merge_keeps_each_run_and_takes_each_section_from_the_run_that_measured_it(tmp_path: Path) -> None:
    ceilings = {
        "cpu": {"matmul": {"dtype": "float32", "flops_per_s": 1e12}, "bandwidth": {"bytes_per_s": 5e10}}
    }
    first = {"command": "one", "machine": {"gpu": "A"}, "tiny": False, "ceilings": ceilings, "embedding": []}
    second = {
        "machine": {"gpu": "B"},
        "tiny": False,
        "ceilings": ceilings,
        "faiss": [],
        "engine": [{"skipped": "x"}],
    }
    paths = [tmp_path / "1.json", tmp_path / "2.json"]
    for path, report in zip(paths, (first, second), strict=True):
        path.write_text(json.dumps(report))
    out = tmp_path / "merged.json"

    assert gpu_report.main(["--merge", *map(str, paths), "--note", "two leases", "--out", str(out)]) == 0

    merged = json.loads(out.read_text())
    assert [(run["run"], run["sections"], run["machine"]["gpu"]) for run in merged["runs"]] == [
        (1, ["embedding"], "A"),
        (2, ["engine", "faiss"], "B"),
    ]
    assert merged["engine"] == [{"skipped": "x", "run": 2}] and merged["notes"] == ["two leases"]
    printed = out.with_suffix(".md").read_text()
    assert printed.startswith("- two leases\n") and "Run 1: `one` measured embedding." in printed

    third = {"command": "three", "machine": {"gpu": "C"}, "tiny": False, "ceilings": ceilings, "batcher": []}
    paths.append(tmp_path / "3.json")
    paths[-1].write_text(json.dumps(third))
    again = tmp_path / "again.json"

    assert (
        gpu_report.main(["--merge", str(out), str(paths[-1]), "--note", "a third", "--out", str(again)]) == 0
    )

    merged = json.loads(again.read_text())
    assert [(run["run"], run["sections"]) for run in merged["runs"]] == [
        (1, ["embedding"]),
        (2, ["engine", "faiss"]),
        (3, ["batcher"]),
    ]
    assert merged["engine"] == [{"skipped": "x", "run": 2}] and merged["notes"] == ["two leases", "a third"]
