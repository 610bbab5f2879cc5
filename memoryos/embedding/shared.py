"""The process's embedders: one loaded model per distinct embedding configuration.

A model costs seconds to load and hundreds of MB to hold, and every space of a process (a CLI run, the
evaluation harness, a service worker with thousands of users) should share it.
"""

import functools

from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder, create_embedder


@functools.cache
def _shared_embedder(config_json: str, api_key: SecretStr | None) -> Embedder:
    """One embedder (one loaded model) per distinct embedding configuration in this process. The key
    travels apart: the JSON masks a secret, and `SecretStr` compares and hashes by its value."""
    config = MemoryConfig.model_validate_json(config_json)
    config.embedding_api_key = api_key
    return create_embedder(config)


EMBEDDER_FIELDS = frozenset(
    {
        "embedding_model_name",
        "embedding_model_kwargs",
        "embedding_device",
        "embedding_batch_size",
        "embedding_cpu_run_size",
        "embedding_cache_size",
        "embedding_runtime",
        "embedding_speed_only",
        "embedding_api_base_url",
        "embedding_api_key",
        "embedding_api_timeout_s",
        "embedding_api_max_retries",
        "embedding_api_batch_size",
        "embedding_api_dim",
        "embedding_api_query_prefix",
        "embedding_engine_socket",
        "embedding_engine_timeout_s",
        "embedding_engine_query_timeout_s",
        "model_cache_dir",
        "torch_threads",
        "show_progress",
    }
)
"""Every setting the embedder reads: configs that differ in any of them never share a model."""
_JSON_FIELDS = set(EMBEDDER_FIELDS - {"embedding_api_key"})
"""`EMBEDDER_FIELDS` but the key, which the JSON would mask: it keys `_shared_embedder` by itself."""


def shared_embedder(config: MemoryConfig) -> Embedder:
    """The process's embedder for `config`'s embedding settings, created on first request."""
    return _shared_embedder(config.model_dump_json(include=_JSON_FIELDS), config.embedding_api_key)
