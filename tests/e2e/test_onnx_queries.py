"""ONNX Runtime with the real bundled all-MiniLM-L6-v2: queries on the export when PyTorch is loaded, and
the torch-free encoder once the export's manifest is verified — same vectors as PyTorch for queries and
pages, the manifest written once and reused without importing torch, and every damaged or stale piece
(export, manifest, model files) falling back to PyTorch, which writes the manifest again."""

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.embedding.device import gpu_may_be_present
from memoryos.embedding.model_location import resolve_model_location
from memoryos.embedding.onnx import queries as onnx_queries
from memoryos.embedding.sentence_transformers_backend import (
    SentenceTransformerEmbedder,
)
from memoryos.errors import MemoryOSError

pytestmark = pytest.mark.e2e

QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What books has Melanie read?",
    "ok",
    "What did Caroline research after the support group meeting in May, and who did she tell about it?",
]
PAGES = [
    "User: I went hiking with my family last weekend. Assistant: How was the trail?",
    "  Café au lait à Zürich — naïve résumé; 東京で会いましょう 🙂 ",
    "remember this detail " * 150,  # over the 256-token limit: truncated alike
    "ok",
    "User: Caroline painted a sunrise. Assistant: Lovely! " * 6,
]


def embedder(
    cache_dir: Path, runtime: str = "auto", model: str = "all-MiniLM-L6-v2", cpu_run_size: int = 8
) -> SentenceTransformerEmbedder:
    config = MemoryConfig(
        embedding_model_name=model,
        embedding_device="cpu",
        embedding_cache_size=0,
        embedding_runtime=runtime,
        model_cache_dir=cache_dir,
        embedding_cpu_run_size=cpu_run_size,
    )
    return SentenceTransformerEmbedder(config)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def torch_embedder(cache_dir) -> SentenceTransformerEmbedder:
    return embedder(cache_dir, "torch")


@pytest.fixture(scope="module")
def torch_vectors(torch_embedder) -> np.ndarray:
    vectors = torch_embedder.encode(QUERIES, is_query=True)
    assert torch_embedder.query_runtime == "torch" and not torch_embedder.torch_free
    return vectors


@pytest.fixture(scope="module")
def torch_pages(torch_embedder) -> np.ndarray:
    """PyTorch's vectors for PAGES, which two tests compare with (one of them 256 tokens long)."""
    return torch_embedder.encode(PAGES)


def decided(made: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
    """The embedder once it has chosen its runtime (asking `dim` makes it choose)."""
    assert made.dim == 384
    return made


def exported_files(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "onnx").glob("*.onnx"))


def manifests(cache_dir: Path) -> list[Path]:
    return sorted(p for p in (cache_dir / "onnx").glob("*.json") if not p.name.endswith(".tokenizer.json"))


@pytest.fixture
def info_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="memoryos.embedding")
    return caplog


def test_onnx_queries_match_pytorch_and_the_manifest_is_written_once_and_reused(cache_dir, torch_vectors):
    first = embedder(cache_dir)
    one_by_one = np.stack([first.encode([q], is_query=True)[0] for q in QUERIES])
    assert first.query_runtime == "onnx" and not first.torch_free  # PyTorch loaded: no manifest yet
    np.testing.assert_allclose(one_by_one, torch_vectors, atol=1e-5)
    np.testing.assert_allclose(first.encode(QUERIES, is_query=True), torch_vectors, atol=1e-5)
    [exported] = exported_files(cache_dir)
    [manifest] = manifests(cache_dir)
    recorded = json.loads(manifest.read_text())
    assert recorded["verified"] and recorded["export"] == exported.name
    assert recorded["pooling"] == "mean" and recorded["normalize"] and recorded["max_seq_length"] == 256
    assert recorded["max_difference"] < 1e-5
    written = exported.stat().st_mtime_ns, manifest.stat().st_mtime_ns

    second = embedder(cache_dir)
    assert second.dim == 384 and second.torch_free  # answered from the manifest
    np.testing.assert_allclose(second.encode(QUERIES, is_query=True), torch_vectors, atol=1e-5)
    assert second._model is None  # PyTorch never loaded
    assert exported_files(cache_dir) == [exported] and manifests(cache_dir) == [manifest]
    assert (exported.stat().st_mtime_ns, manifest.stat().st_mtime_ns) == written  # reused, not rewritten


def test_torch_free_pages_and_queries_equal_pytorchs(cache_dir, torch_pages, torch_vectors):
    torch_free = embedder(cache_dir)
    pages = torch_free.encode(PAGES)
    assert torch_free.torch_free
    np.testing.assert_allclose(pages, torch_pages, atol=1e-5)
    np.testing.assert_allclose(torch_free.encode(QUERIES, is_query=True), torch_vectors, atol=1e-5)
    one_at_a_time = np.stack([torch_free.encode([page])[0] for page in PAGES])  # other padding
    np.testing.assert_allclose(one_at_a_time, pages, atol=1e-5)


def test_on_the_cpu_a_batch_runs_in_runs_of_the_cpu_run_size(cache_dir, torch_embedder, monkeypatch):
    pages = [f"{PAGES[i % len(PAGES)]} ({i})" for i in range(20)]
    embedder(cache_dir).encode(QUERIES[:1], is_query=True)  # the export and its manifest, if not yet there
    torch_free = decided(embedder(cache_dir, cpu_run_size=3))
    assert torch_free._torch_free is not None
    session = torch_free._torch_free._session
    rows: list[int] = []
    run = session.run
    monkeypatch.setattr(
        session, "run", lambda names, feeds: rows.append(len(feeds["input_ids"])) or run(names, feeds)
    )
    np.testing.assert_allclose(torch_free.encode(pages), torch_embedder.encode(pages), atol=1e-5)
    assert rows == [3] * 6 + [2], "20 texts in runs of 3, each padded to its own longest"

    with_torch = decided(embedder(cache_dir, "torch", cpu_run_size=3))
    model = with_torch._loaded_model()
    asked: list[int] = []
    encode = model.encode
    monkeypatch.setattr(
        model, "encode", lambda texts, **kw: asked.append(kw["batch_size"]) or encode(texts, **kw)
    )
    with_torch.encode(pages[:4])  # one call is enough to see its batch size: PyTorch is slow on pages
    assert asked == [3]


def test_a_second_process_embeds_without_importing_torch(cache_dir, torch_pages, torch_vectors):
    """The manifest made in this process serves a new one: no torch, transformers or sentence-transformers,
    and the same vectors."""
    embedder(cache_dir).encode(QUERIES[:1], is_query=True)  # the manifest exists
    probe = (
        "import json, sys\n"
        "from memoryos.config import MemoryConfig\n"
        "from memoryos.embedding import create_embedder\n"
        "e = create_embedder(MemoryConfig(embedding_device='cpu', embedding_cache_size=0))\n"
        f"pages = e.encode({PAGES!r}).tolist()\n"
        f"query = e.encode({QUERIES[:1]!r}, is_query=True).tolist()\n"
        "print(json.dumps({'pages': pages, 'query': query, 'dim': e.dim,\n"
        "    'loaded': [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules]}))\n"
    )
    env = {**os.environ, "MEMORYOS_MODEL_CACHE_DIR": str(cache_dir)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    out = json.loads(result.stdout)
    assert out["loaded"] == [] and out["dim"] == 384, result.stderr
    np.testing.assert_allclose(np.array(out["pages"]), torch_pages, atol=1e-5)
    np.testing.assert_allclose(np.array(out["query"]), torch_vectors[:1], atol=1e-5)
    # Nothing else on stderr (no progress bar): the truncation warning of the long page, as on PyTorch.
    assert result.stderr.splitlines() == [
        "embedding: 1 of 5 texts exceed all-MiniLM-L6-v2's limit of 256 tokens and were truncated"
    ]


def test_a_corrupt_export_is_replaced(cache_dir, tmp_path, torch_vectors, info_log):
    embedder(cache_dir).encode(QUERIES[:1], is_query=True)  # the export and its manifest, if not yet there
    shutil.copytree(cache_dir / "onnx", tmp_path / "onnx")  # damaged here, not in the module's cache
    [exported] = exported_files(tmp_path)
    assert decided(embedder(tmp_path)).torch_free
    size = exported.stat().st_size
    for damaged in (_with_a_weight_scaled(exported), b"not an onnx model"):  # loads but differs; won't load
        exported.write_bytes(damaged)
        info_log.clear()
        recovered = embedder(tmp_path)
        vector = recovered.encode(QUERIES[:1], is_query=True)
        assert recovered.query_runtime == "onnx" and not recovered.torch_free
        assert "loading PyTorch for all-MiniLM-L6-v2" in info_log.text  # why, at INFO
        assert "exporting the query encoder again" in info_log.text
        np.testing.assert_allclose(vector, torch_vectors[:1], atol=1e-5)
        assert exported.stat().st_size == size
        assert decided(embedder(tmp_path)).torch_free  # the manifest was written again


def _with_a_weight_scaled(exported: Path) -> bytes:
    """The export with one weight tensor (used by every token) scaled: the same size, loadable, wrong."""
    import onnx

    model = onnx.load(str(exported))
    tensor = next(
        t for t in model.graph.initializer if len(t.raw_data) > 1024 and "word_embeddings" not in t.name
    )
    weights = np.frombuffer(tensor.raw_data, dtype=np.float32) * 1.5
    tensor.raw_data = weights.astype(np.float32).tobytes()
    return model.SerializeToString()


@pytest.fixture
def model_copy(tmp_path) -> Path:
    """The bundled MiniLM as another directory: weights linked, the small files copied (editable)."""
    source = Path(resolve_model_location("all-MiniLM-L6-v2"))
    copy = tmp_path / "minilm"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    (copy / "model.safetensors").symlink_to(source / "model.safetensors")
    return copy


def test_changed_model_files_or_a_damaged_manifest_fall_back_to_pytorch_and_rewrite_it(
    cache_dir, model_copy, torch_vectors, info_log
):
    def copy_embedder() -> SentenceTransformerEmbedder:
        return embedder(cache_dir, model=str(model_copy))

    # Same weights, hence the module's export; a manifest of its own (another model directory).
    first = copy_embedder()
    first.encode(QUERIES[:1], is_query=True)
    assert not first.torch_free
    manifest = next(p for p in manifests(cache_dir) if str(model_copy) in p.read_text())
    assert decided(copy_embedder()).torch_free
    readme = model_copy / "README.md"
    readme.write_text(readme.read_text() + "\nedited")  # any file's size or mtime

    damages = {  # what the INFO line says: how the (rewritten) manifest is damaged next
        "changed since the export was checked": None,  # the README edit above
        "not a valid manifest": lambda recorded: "{not json",
        "the checked export had": lambda recorded: json.dumps({**recorded, "export_size": 1}),
        "no longer reproduces its recorded vectors": lambda recorded: json.dumps(
            {**recorded, "onnx_vectors": ""}
        ),
    }
    for why, damage in damages.items():
        if damage is not None:
            manifest.write_text(damage(json.loads(manifest.read_text())))
        info_log.clear()
        damaged = copy_embedder()
        np.testing.assert_allclose(damaged.encode(QUERIES[:1], is_query=True), torch_vectors[:1], atol=1e-5)
        assert not damaged.torch_free and "loading PyTorch" in info_log.text and why in info_log.text
        assert decided(copy_embedder()).torch_free  # written again

    tokenizer = manifest.with_name(json.loads(manifest.read_text())["tokenizer"])
    tokenizer.unlink()
    missing = copy_embedder()
    assert missing.encode(["a page"]).shape == (1, 384) and not missing.torch_free
    assert tokenizer.exists() and decided(copy_embedder()).torch_free


def test_a_pooling_mode_the_encoder_lacks_keeps_pytorch_and_says_why(cache_dir, model_copy, info_log):
    pooling = model_copy / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode": "weightedmean"}))
    made = embedder(cache_dir, model=str(model_copy))
    made.encode(QUERIES[:1], is_query=True)
    manifest = next(p for p in manifests(cache_dir) if str(model_copy) in p.read_text())
    recorded = json.loads(manifest.read_text())
    assert not recorded["verified"] and "weightedmean" in recorded["reason"]
    info_log.clear()
    again = embedder(cache_dir, model=str(model_copy))
    assert again.will_load_pytorch()
    again.encode(["a page"])
    assert not again.torch_free and "did not pass its check against PyTorch" in info_log.text


@pytest.fixture
def manifests_aside(cache_dir: Path, tmp_path: Path) -> Iterator[None]:
    """The module's cache without its manifests (else a verified one serves without PyTorch), put back
    after the test: the tests after it find them instead of loading PyTorch to write them again."""
    aside = tmp_path / "manifests"
    aside.mkdir()
    for manifest in manifests(cache_dir):
        manifest.rename(aside / manifest.name)
    yield
    for manifest in aside.iterdir():
        manifest.replace(cache_dir / "onnx" / manifest.name)


def test_an_export_that_disagrees_with_pytorch_is_not_used(
    cache_dir, manifests_aside, torch_vectors, monkeypatch, caplog
):
    assert manifests(cache_dir) == []
    monkeypatch.setattr(onnx_queries, "MAX_PROBE_DIFFERENCE", -1.0)  # no export can pass the check
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        fallback = embedder(cache_dir)
        vectors = fallback.encode(QUERIES, is_query=True)
    assert fallback.query_runtime == "torch"
    assert "queries stay on PyTorch" in caplog.text
    np.testing.assert_allclose(vectors, torch_vectors, atol=1e-6)

    forced = embedder(cache_dir, "onnx")
    with pytest.raises(MemoryOSError, match="embedding_runtime: ONNX Runtime cannot serve"):
        forced.encode(QUERIES[:1], is_query=True)


@pytest.mark.skipif(gpu_may_be_present(), reason="a GPU may be present: torch chooses the device")
def test_auto_device_goes_torch_free_on_a_host_without_a_gpu(cache_dir):
    config = MemoryConfig(embedding_cache_size=0, model_cache_dir=cache_dir)  # embedding_device="auto"
    SentenceTransformerEmbedder(config).encode(["a page"])  # PyTorch, if an earlier test left no manifest
    assert decided(SentenceTransformerEmbedder(config)).torch_free
    cuda = SentenceTransformerEmbedder(config.model_copy(update={"embedding_device": "cuda"}))
    assert cuda.will_load_pytorch()  # asked for CUDA: torch decides (and here refuses)
