"""Query encodes on ONNX Runtime with the real bundled all-MiniLM-L6-v2: same vectors as PyTorch, cached
export, recovery from a bad cache file, and PyTorch as the fallback when the check fails."""

import logging
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.embedding import onnx_queries
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder
from memoryos.errors import MemoryOSError

pytestmark = pytest.mark.e2e

QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What books has Melanie read?",
    "ok",
    "What did Caroline research after the support group meeting in May, and who did she tell about it?",
]


def embedder(cache_dir: Path, runtime: str) -> SentenceTransformerEmbedder:
    config = MemoryConfig(
        embedding_device="cpu", embedding_cache_size=0, embedding_runtime=runtime, model_cache_dir=cache_dir
    )
    return SentenceTransformerEmbedder(config)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def torch_vectors(cache_dir) -> np.ndarray:
    plain = embedder(cache_dir, "torch")
    vectors = plain.encode(QUERIES, is_query=True)
    assert plain.query_runtime == "torch"
    return vectors


def exported_files(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "onnx").glob("*.onnx"))


def test_onnx_queries_match_pytorch_and_reuse_the_export(cache_dir, torch_vectors):
    first = embedder(cache_dir, "auto")
    one_by_one = np.stack([first.encode([q], is_query=True)[0] for q in QUERIES])
    assert first.query_runtime == "onnx"
    np.testing.assert_allclose(one_by_one, torch_vectors, atol=1e-5)
    np.testing.assert_allclose(first.encode(QUERIES, is_query=True), torch_vectors, atol=1e-5)
    [exported] = exported_files(cache_dir)
    written = exported.stat().st_mtime_ns

    second = embedder(cache_dir, "auto")
    np.testing.assert_allclose(second.encode(QUERIES[:1], is_query=True), torch_vectors[:1], atol=1e-5)
    assert second.query_runtime == "onnx"
    assert exported_files(cache_dir) == [exported]
    assert exported.stat().st_mtime_ns == written  # loaded, not exported again


def test_a_corrupt_export_is_replaced(tmp_path, torch_vectors, caplog):
    embedder(tmp_path, "auto").encode(QUERIES[:1], is_query=True)
    [exported] = exported_files(tmp_path)
    exported.write_bytes(b"not an onnx model")
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        recovered = embedder(tmp_path, "auto")
        vector = recovered.encode(QUERIES[:1], is_query=True)
    assert recovered.query_runtime == "onnx"
    assert "exporting the query encoder again" in caplog.text
    np.testing.assert_allclose(vector, torch_vectors[:1], atol=1e-5)
    assert exported.stat().st_size > 1_000_000


def test_an_export_that_disagrees_with_pytorch_is_not_used(cache_dir, torch_vectors, monkeypatch, caplog):
    monkeypatch.setattr(onnx_queries, "MAX_PROBE_DIFFERENCE", -1.0)  # no export can pass the check
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        fallback = embedder(cache_dir, "auto")
        vectors = fallback.encode(QUERIES, is_query=True)
    assert fallback.query_runtime == "torch"
    assert "queries stay on PyTorch" in caplog.text
    np.testing.assert_allclose(vectors, torch_vectors, atol=1e-6)

    forced = embedder(cache_dir, "onnx")
    with pytest.raises(MemoryOSError, match="embedding_runtime: ONNX Runtime cannot serve"):
        forced.encode(QUERIES[:1], is_query=True)
