"""`embedding_model_kwargs` reaches `SentenceTransformer(...)`, as in the reference: checked on the bundled
MiniLM (loads in seconds, CPU only), through the embedder and through `Memoryos`."""

from pathlib import Path

import numpy as np
import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.embedding import create_embedder
from memoryos.errors import MemoryOSError
from memoryos.llm.offline.backend import OfflineLLM

pytestmark = pytest.mark.e2e  # the real model

TEXTS = ["I adopted a puppy named Rex last week.", "My sister Maria lives in Porto."]


def minilm_config(**settings: object) -> MemoryConfig:
    return MemoryConfig.model_validate({"embedding_device": "cpu", "embedding_cache_size": 0, **settings})


def test_truncate_dim_gives_the_leading_components_renormalized_for_pages_and_queries() -> None:
    full = create_embedder(minilm_config()).encode(TEXTS)
    for runtime in ("torch", "onnx"):
        truncated = create_embedder(
            minilm_config(embedding_model_kwargs={"truncate_dim": 128}, embedding_runtime=runtime)
        )
        assert truncated.dim == 128
        pages = truncated.encode(TEXTS)
        queries = truncated.encode(TEXTS, is_query=True)  # the ONNX query path with runtime "onnx"
        expected = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
        assert pages.shape == queries.shape == (2, 128)
        np.testing.assert_allclose(pages, expected, atol=1e-5)
        np.testing.assert_allclose(queries, expected, atol=1e-4)


def test_a_device_in_the_kwargs_wins_over_embedding_device() -> None:
    """embedding_device "cuda" alone fails on a host without CUDA; the kwargs' "cpu" is what loads."""
    embedder = create_embedder(
        minilm_config(embedding_device="cuda", embedding_model_kwargs={"device": "cpu"})
    )
    assert embedder.encode(TEXTS[:1]).shape == (1, 384)


def test_an_argument_sentence_transformers_does_not_take_names_the_setting() -> None:
    embedder = create_embedder(minilm_config(embedding_model_kwargs={"no_such_option": 1}))
    with pytest.raises(MemoryOSError, match="embedding_model_kwargs"):
        embedder.encode(TEXTS[:1])


def test_memoryos_passes_its_embedding_model_kwargs_to_the_model(tmp_path: Path) -> None:
    memory = Memoryos(
        "alice",
        None,
        tmp_path,
        embedding_model_kwargs={"truncate_dim": 128},
        config=minilm_config(faiss_use_gpu="never", ingest_mode="inline"),
        llm=OfflineLLM(),
    )
    memory.add_memories([{"user_input": text, "agent_response": "Noted."} for text in TEXTS])
    assert memory.get_memory_stats()["embedding_dim"] == 128
    hit = memory.retrieve("Where does Maria live?", top_k=1).retrieved_pages[0]
    assert hit.user_input == TEXTS[1]
    memory.close()
