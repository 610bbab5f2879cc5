"""Embedding backends behind the `Embedder` protocol; `create_embedder` picks one from the config."""

from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder


def create_embedder(config: MemoryConfig) -> Embedder:
    """The embedder for `config`: the host's embedding engine's when `embedding_engine_socket` is set (this
    process loads no model), an embeddings server's when `embedding_api_base_url` is, else the local
    model. Cheap: a local model loads on first use, so CLI start-up stays fast; the engine's and the
    server's clients are imported only when configured."""
    if config.embedding_engine_socket is not None:
        from memoryos.embedding.engine.client import EngineEmbedder

        return EngineEmbedder.from_config(config)
    if config.embedding_api_base_url is not None:
        from memoryos.embedding.openai_api import OpenAIAPIEmbedder

        return OpenAIAPIEmbedder(config)
    return SentenceTransformerEmbedder(config)


__all__ = ["Embedder", "create_embedder"]
