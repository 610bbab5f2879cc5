"""Embedding backends behind the `Embedder` protocol; `create_embedder` picks one from the config."""

from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder


def create_embedder(config: MemoryConfig) -> Embedder:
    """The embedder for `config`. Cheap: the model loads on first use, so CLI start-up stays fast."""
    return SentenceTransformerEmbedder(config)


__all__ = ["Embedder", "create_embedder"]
