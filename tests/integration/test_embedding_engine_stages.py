"""The engine's stages over the offline MiniLM: lengths are the tokenizer's (Chinese is not undercounted,
a long text is capped at the window and flagged truncated, from the one tokenization), the staged
forward pass gives the model's own vectors, and the engine built from the config runs them."""

from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.embedding.base import estimate_tokens
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.server import EmbeddingEngine
from memoryos.embedding.engine.stages import TorchStages, stages_of
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder

pytestmark = pytest.mark.integration

TEXTS = [
    "the user hiked in the alps last june",
    "我们上周末去了杭州西湖，天气很好，喝了龙井茶，还吃了很多好吃的东西。",
    "a page that runs past the window " * 60,
    "ok",
]


def test_the_engine_counts_real_tokens_and_runs_the_models_own_vectors_in_stages(tmp_path: Path) -> None:
    config = MemoryConfig(embedding_device="cpu", embedding_runtime="torch")  # the GPU path, on CPU
    embedder = SentenceTransformerEmbedder(config)
    stages = stages_of(embedder, config.embedding_cpu_run_size)
    assert isinstance(stages, TorchStages)  # tensors prepared ahead, not the model's encode
    window = stages.window
    assert window == 256
    for is_query in (False, True):
        tokenized = stages.tokenize(TEXTS, is_query)
        lengths = [item.length for item in tokenized]
        assert lengths[1] > 2 * estimate_tokens(TEXTS[1])  # characters / 4 undercounts Chinese
        assert lengths[2] == window and [item.truncated for item in tokenized] == [False, False, True, False]
        staged = stages.forward(stages.prepare(sorted(tokenized, key=lambda t: -t.length), is_query))
        order = sorted(range(len(TEXTS)), key=lambda i: -lengths[i])
        own = embedder.encode([TEXTS[i] for i in order], is_query=is_query)
        assert np.abs(staged - own).max() < 1e-4

    engine = EmbeddingEngine.from_config(embedder, tmp_path / "engine.sock", config)
    engine.start()
    try:
        client = EngineEmbedder(tmp_path / "engine.sock", timeout_s=30.0)
        assert np.abs(client.encode(TEXTS) - embedder.encode(TEXTS)).max() < 1e-4
        stats = engine.stats()
    finally:
        engine.close()
    assert stats.tokens == sum(item.length for item in stages.tokenize(TEXTS, False))
    assert stats.truncated_texts == 1
    assert stats.padded_tokens >= stats.tokens
