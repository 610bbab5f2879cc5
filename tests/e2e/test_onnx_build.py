"""The export and manifest built without PyTorch (`onnx/torch_free.py`) with the real bundled
all-MiniLM-L6-v2: PyTorch's vectors for the probes and a conversation's texts, the manifest PyTorch would
write, a process where torch cannot be imported building from an empty cache and the next one reusing it,
and every model the builder cannot check refused with the way out."""

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.embedding import sentence_transformers_backend
from memoryos.embedding.model_location import resolve_model_location
from memoryos.embedding.onnx.build import build_graph
from memoryos.embedding.onnx.encoder import OnnxEncoder
from memoryos.embedding.onnx.manifest import (
    LOAD_TOLERANCE,
    PROBES,
    ExportManifest,
    directory_fingerprint,
    manifest_path,
    read_manifest,
)
from memoryos.embedding.onnx.torch_free import build_torch_free
from memoryos.embedding.sentence_transformers_backend import (
    SentenceTransformerEmbedder,
)
from memoryos.errors import MemoryOSError
from memoryos.eval.locomo import find_locomo_raw, load_conversations

pytestmark = pytest.mark.e2e

MODEL = "all-MiniLM-L6-v2"
MODEL_DIR = Path(resolve_model_location(MODEL)).resolve()
OWN_CONVERSATION = Path(__file__).parents[1] / "data" / "own_conversation.json"
LOCOMO_PAIRS = 60
"""Pairs (two pages each) and questions taken from LoCoMo's first conversation when the file is found."""

BLOCK_TORCH = """
import builtins, sys
BLOCKED = ("torch", "sentence_transformers", "transformers")
for name in BLOCKED:
    sys.modules[name] = None  # `import torch` fails, importlib.util.find_spec says absent
attempts = []
real_import = builtins.__import__
def watching(name, *args, **kwargs):
    if name.split(".")[0] in BLOCKED:
        attempts.append(name)
    return real_import(name, *args, **kwargs)
builtins.__import__ = watching
"""
"""The prelude of a process where torch, transformers and sentence-transformers are not installed, which
also records any attempt to import them (one caught by an `except ImportError` would go unseen)."""


def conversation_texts() -> tuple[list[str], list[str]]:
    """(pages, queries): our own conversation's turns, pairs and questions, and LoCoMo's when found."""
    own = json.loads(OWN_CONVERSATION.read_text())
    pairs = [(pair["user_input"], pair["agent_response"]) for pair in own["pairs"]]
    queries = [item["question"] for item in own["qa"]]
    locomo = find_locomo_raw()
    if locomo is not None:
        conversation = load_conversations(locomo)[0]
        pairs += [(pair.user_input, pair.agent_response) for pair in conversation.pairs][:LOCOMO_PAIRS]
        queries += [question.question for question in conversation.qa][:LOCOMO_PAIRS]
    pages = [text for user, agent in pairs for text in (user, f"User: {user} Assistant: {agent}")]
    return pages, queries


def embedder(cache_dir: Path, **settings: object) -> SentenceTransformerEmbedder:
    config = MemoryConfig(
        embedding_model_name=str(settings.pop("model", MODEL)),
        model_cache_dir=cache_dir,
        **{"embedding_device": "cpu", "embedding_cache_size": 0, **settings},
    )
    return SentenceTransformerEmbedder(config)


@pytest.fixture
def without_torch(monkeypatch) -> None:
    """This process's embedders see no torch (it is loaded here, so only the route can be told)."""
    monkeypatch.setattr(sentence_transformers_backend, "_torch_importable", lambda: False)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[ExportManifest, Path]:
    """The bundled model's torch-free manifest and the directory of its files."""
    directory = tmp_path_factory.mktemp("built")
    return build_torch_free(
        manifest_path(directory, MODEL_DIR, {}),
        name=MODEL,
        model_dir=MODEL_DIR,
        kwargs={},
        fingerprint=directory_fingerprint(MODEL_DIR),
        threads=2,
    ), directory


@pytest.fixture(scope="module")
def pytorch(tmp_path_factory) -> SentenceTransformerEmbedder:
    """PyTorch's vectors, the reference, each text encoded once for the module (its cache holds them: the
    tests compare overlapping texts, the conversation's and the probes)."""
    return embedder(tmp_path_factory.mktemp("torch"), embedding_runtime="torch", embedding_cache_size=4096)


@pytest.mark.locomo  # conversation_texts() adds LoCoMo's texts when found
def test_the_built_graph_gives_pytorchs_vectors(built, pytorch):
    manifest, directory = built
    assert manifest.verified and manifest.checked_against.startswith("reference ")
    assert manifest.max_difference is not None and manifest.max_difference <= LOAD_TOLERANCE
    encoder = OnnxEncoder.open(manifest, directory, threads=2)
    pages, queries = conversation_texts()
    pages += [text for text, is_query in PROBES if not is_query]
    queries += [text for text, is_query in PROBES if is_query]
    worst = 0.0
    for texts, is_query in ((pages, False), (queries, True)):
        got, _ = encoder.encode(texts, is_query=is_query, batch_size=8)
        expected = pytorch.encode(texts, is_query=is_query)  # unit rows, as the embedder returns them
        worst = max(worst, float(np.abs(got - expected).max()))
    logging.getLogger(__name__).info(
        "largest difference from PyTorch over %d texts: %.1e", len(pages + queries), worst
    )
    assert worst <= LOAD_TOLERANCE


def test_the_manifest_is_the_one_pytorch_writes(built):
    """Against the manifest in this run's model cache (tests/conftest.py): every process that writes there
    has PyTorch, so it is PyTorch's (written here if no earlier test wrote it), and exporting again only
    for this comparison took seconds."""
    manifest, directory = built
    cache = Path(os.environ["MEMORYOS_MODEL_CACHE_DIR"])
    embedder(cache).encode(["a query"], is_query=True)  # PyTorch loads, exports, writes, if not yet done
    made, _ = read_manifest(manifest_path(cache / "onnx", MODEL_DIR, {}))
    assert made is not None and made.verified and made.checked_against == "pytorch"
    pipeline = [
        "model_dir",
        "model_kwargs",
        "fingerprint",
        "input_names",
        "max_seq_length",
        "truncation_side",
        "pad_id",
        "pad_type_id",
        "padding_side",
        "pooling",
        "normalize",
        "truncate_dim",
        "query_prompt",
        "dim",
        "probe_texts",
        "probe_is_query",
    ]
    assert {key: getattr(manifest, key) for key in pipeline} == {key: getattr(made, key) for key in pipeline}
    tokenizers = (where / found.tokenizer for where, found in ((directory, manifest), (cache / "onnx", made)))
    assert len({path.read_text() for path in tokenizers}) == 1
    np.testing.assert_allclose(manifest.probe_vectors("torch"), made.probe_vectors("torch"), atol=1e-6)
    np.testing.assert_allclose(
        manifest.probe_vectors("onnx"), made.probe_vectors("onnx"), atol=LOAD_TOLERANCE
    )


def run_without_torch(cache_dir: Path, code: str) -> tuple[dict, str]:
    env = {**os.environ, "MEMORYOS_MODEL_CACHE_DIR": str(cache_dir), "MEMORYOS_LOG_LEVEL": "INFO"}
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


EMBED = """
import json, logging
logging.basicConfig(level=logging.INFO, format="%(message)s")
from memoryos.config import MemoryConfig
from memoryos.embedding import create_embedder
e = create_embedder(MemoryConfig(embedding_cache_size=0))  # embedding_device "auto"
pages = e.encode(PAGES).tolist()
queries = e.encode(QUERIES, is_query=True).tolist()
print(json.dumps({"pages": pages, "queries": queries, "torch_free": e.torch_free, "attempts": attempts,
    "loaded": [name for name in BLOCKED if sys.modules.get(name) is not None]}))
"""


@pytest.mark.locomo  # conversation_texts() adds LoCoMo's texts when found
def test_a_process_without_torch_builds_from_an_empty_cache_and_the_next_reuses_it(tmp_path, pytorch):
    pages, queries = conversation_texts()
    pages, queries = pages[:40], queries[:10]
    code = f"PAGES = {pages!r}\nQUERIES = {queries!r}\n{EMBED}"
    first, log = run_without_torch(tmp_path, code)
    assert first["torch_free"] and first["loaded"] == [] and first["attempts"] == [], log
    assert "built the ONNX export of all-MiniLM-L6-v2 without PyTorch" in log
    [path] = [p for p in (tmp_path / "onnx").glob("*.json") if not p.name.endswith(".tokenizer.json")]
    manifest, _ = read_manifest(path)
    assert manifest is not None and manifest.verified and manifest.checked_against.startswith("reference ")
    np.testing.assert_allclose(np.array(first["pages"]), pytorch.encode(pages), atol=LOAD_TOLERANCE)
    np.testing.assert_allclose(
        np.array(first["queries"]), pytorch.encode(queries, is_query=True), atol=LOAD_TOLERANCE
    )
    written = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "onnx").iterdir())

    second, log = run_without_torch(tmp_path, code)
    assert second["torch_free"] and second["attempts"] == [] and "built" not in log, log
    assert "checked against PyTorch's recorded vectors" in log
    assert second["pages"] == first["pages"] and second["queries"] == first["queries"]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "onnx").iterdir()) == written


@pytest.fixture
def model_copy(tmp_path) -> Path:
    """The bundled MiniLM as another directory: weights linked, the small files copied (editable)."""
    copy = tmp_path / "minilm"
    shutil.copytree(MODEL_DIR, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    (copy / "model.safetensors").symlink_to(MODEL_DIR / "model.safetensors")
    return copy


def test_without_torch_what_cannot_be_checked_is_refused_with_the_way_out(
    tmp_path, model_copy, without_torch
):
    config = model_copy / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "qwen3"}))
    with pytest.raises(
        MemoryOSError,
        match=r"model_type 'qwen3' has no torch-free ONNX builder.*pip install -e '[^']*\[torch\]",
    ):
        embedder(tmp_path, model=str(model_copy)).encode(["a page"])
    with pytest.raises(MemoryOSError, match=r"embedding_runtime: 'torch' needs PyTorch"):
        embedder(tmp_path, embedding_runtime="torch").encode(["a page"])
    with pytest.raises(MemoryOSError, match=r"embedding_device: 'cuda' needs PyTorch"):
        embedder(tmp_path, embedding_device="cuda").encode(["a page"])
    assert not (tmp_path / "onnx").exists()  # refused before writing anything


def test_without_torch_changed_weights_are_refused_and_a_damaged_export_rebuilt(
    tmp_path, without_torch, caplog
):
    copy = tmp_path / "minilm"
    shutil.copytree(MODEL_DIR, copy)  # the same contents: the recorded reference applies
    made = embedder(tmp_path, model=str(copy))
    vectors = made.encode(["a page"])
    assert made.torch_free
    [export] = (tmp_path / "onnx").glob("*.onnx")

    size = export.stat().st_size
    export.write_bytes(b"not an onnx model")
    caplog.set_level(logging.INFO, logger="memoryos.embedding")
    rebuilt = embedder(tmp_path, model=str(copy))
    np.testing.assert_array_equal(rebuilt.encode(["a page"]), vectors)
    assert rebuilt.torch_free and export.stat().st_size == size
    assert "building its ONNX export without PyTorch" in caplog.text and "checked export had" in caplog.text

    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4000:-2000] = bytes(2000)  # inside the last tensor: loads, same size, other weights
    weights.write_bytes(data)
    with pytest.raises(
        MemoryOSError,
        match=r"no PyTorch vectors are recorded for these files.*pip install -e '[^']*\[torch\]",
    ):
        embedder(tmp_path, model=str(copy)).encode(["a page"])


def test_without_torch_truncate_dim_is_honoured(tmp_path, without_torch, pytorch):
    """sentence-transformers cuts the normalized vector; the embedder normalizes the cut again."""
    torch_free = embedder(tmp_path, embedding_model_kwargs={"truncate_dim": 64})
    texts = [text for text, _ in PROBES]
    cut = pytorch.encode(texts)[:, :64]
    assert torch_free.dim == 64 and torch_free.torch_free
    expected = cut / np.linalg.norm(cut, axis=1, keepdims=True)
    np.testing.assert_allclose(torch_free.encode(texts), expected, atol=LOAD_TOLERANCE)


def test_an_xlm_roberta_graph_gives_transformers_hidden_states(tmp_path):
    """Position ids counted from padding_idx + 1 over the real tokens, no token types: a small random
    XLM-RoBERTa, padded on the right as its tokenizer pads, equal to transformers' last_hidden_state."""
    import onnxruntime
    import torch
    from safetensors.numpy import load_file
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(0)
    config = XLMRobertaConfig(
        vocab_size=300,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=40,
        type_vocab_size=1,
        pad_token_id=1,
    )
    model = XLMRobertaModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    graph = build_graph(json.loads((tmp_path / "config.json").read_text()), weights)
    session = onnxruntime.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [item.name for item in session.get_inputs()] == ["input_ids", "attention_mask"]
    ids = np.array([[0, 17, 250, 9, 2, 1, 1], [0, 5, 6, 7, 8, 99, 2]], dtype=np.int64)
    mask = (ids != 1).astype(np.int64)
    got = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    with torch.no_grad():
        expected = model(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
        ).last_hidden_state
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], expected.numpy()[real], atol=LOAD_TOLERANCE)
