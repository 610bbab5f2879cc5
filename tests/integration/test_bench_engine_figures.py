"""The GPU figures issue 50 asks of the ingest bench and the forward-pass ceiling: the ceiling's batches
are the ones the real engine makes from the same queued texts, its tokens are the tokenizer's (no padding),
the ingest bench finds the worker's engine and reports the engine's rates over the run, and the GPU's busy
share comes from nvidia-smi's samples where it exists."""

import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from bench.gpu.embedding import count_tokens
from bench.gpu.forward import engine_shaped_batches, forward_ceiling
from bench.gpu.models import load_named_model, parse_model_spec
from bench.serving import ingest
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.server import EmbeddingEngine, EngineLimits
from services.queue.settings import QueueSettings
from tests.support.fakes import HashEmbedder
from tests.support.locomo_data import SKIP_REASON, locomo_source
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration


class RecordingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.batches.append(list(texts))
        return super().encode(texts, is_query=is_query)


def test_the_ceilings_batches_are_the_engines_own_for_the_same_queued_texts(tmp_path: Path) -> None:
    texts = [f"page {i} " + "word " * (i * 7 % 23) for i in range(200)]  # lengths vary, arrival order kept
    embedder = RecordingEmbedder()
    engine = EmbeddingEngine(
        embedder, tmp_path / "engine.sock", limits=EngineLimits(max_batch_texts=16, max_batch_tokens=300)
    )
    engine.start()
    client = EngineEmbedder(tmp_path / "engine.sock")
    try:
        client.encode(texts)  # one request: every text queued at once, as a full queue holds them
    finally:
        client.close()
        engine.close()
    assert embedder.batches == engine_shaped_batches(texts, 16, 300)
    assert max(len(batch) for batch in embedder.batches) == 16  # both bounds bind somewhere
    assert min(len(batch) for batch in embedder.batches) < 16


def test_the_forward_ceiling_counts_the_tokenizers_tokens_not_the_padding() -> None:
    location = parse_model_spec("all-MiniLM-L6-v2")[1]
    texts = [f"the user said {'very ' * (i % 9)}much about hiking, turn {i}" for i in range(24)]
    report = forward_ceiling(location, "cpu", texts, [8, 24], 16384, 1)
    tokens = count_tokens(load_named_model(location, "cpu"), texts)
    assert [row["tokens"] for row in report["rows"]] == [tokens, tokens]
    # the engine's batches of these texts: one length bucket each, so more than texts / size
    assert [row["batches"] for row in report["rows"]] == [
        len(engine_shaped_batches(texts, size, 16384)) for size in (8, 24)
    ]
    assert report["rows"][0]["batches"] > report["rows"][1]["batches"] >= 1
    assert all(0 < row["padding_share"] < 1 for row in report["rows"])
    assert report["tokens_per_s"] == max(row["tokens_per_s"] for row in report["rows"]) > 0
    assert 0.3 < report["real_over_estimated_tokens"] < 3


def test_the_engines_figures_are_its_counters_over_the_run() -> None:
    before = {"texts": 10, "batches": 2, "tokens": 500, "encode_s": 1.0, "failures": 0}
    after = {"texts": 310, "batches": 8, "tokens": 30_500, "encode_s": 4.0, "failures": 1}
    assert ingest.engine_figures(before, after, 10.0) == {
        "engine_texts_per_s": 100.0,
        "engine_tokens_per_s": 10_000,
        "engine_batches": 6,
        "engine_mean_batch": 50.0,
        "engine_encode_share": 0.3,
        "engine_failures": 1,
    }
    assert ingest.engine_figures({}, {}, 10.0) == {}  # no engine: nothing reported


def test_the_gpu_busy_share_is_the_mean_of_nvidia_smis_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\necho "$@" > "$0.args"\nprintf \'40\\n80\\n90\\n\'\nsleep 30\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    busy = ingest.GpuBusy(tmp_path / "samples.csv")
    ingest.time.sleep(0.5)
    assert busy.finish() == {"gpu_busy_percent_mean": 70.0, "gpu_busy_samples": 3}
    assert "utilization.gpu" in tool.with_name("nvidia-smi.args").read_text()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert ingest.GpuBusy(tmp_path / "none.csv").finish() == {
        "gpu_busy_percent_mean": None,
        "gpu_busy_samples": 0,
    }


@pytest.mark.locomo
@pytest.mark.skipif(locomo_source() is None, reason=SKIP_REASON)  # the ingest bench writes LoCoMo's turns
def test_an_ingest_with_the_engine_on_reports_the_engines_rates(tmp_path: Path) -> None:
    """The real worker tree (two applying processes and the engine, the hash embedder in it): the bench
    finds the engine's socket on the worker's stdout and takes its counters over the run."""
    with running_redis(tmp_path / "redis") as server:
        settings = QueueSettings(redis_url=server.url, shard_count=8, queue_max_entries=10**9)
        env = ingest.worker_environment(
            settings, tmp_path / "data", "all-MiniLM-L6-v2", "cpu", False, ingest.free_ports(2)
        )
        env["MEMORYOS_WORKER_EMBEDDING_ENGINE"] = "true"
        report = ingest.run_ingest(settings, env, 5, 2, 2, 0.5, True, tmp_path / "worker.log")
    assert report["engine_batches"] >= 1 and report["engine_texts_per_s"] > 0
    assert report["engine_mean_batch"] > 0 and 0 < report["engine_encode_share"] <= 1
    assert report["engine_failures"] == 0
