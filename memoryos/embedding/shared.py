"""The process's embedders: one loaded model per distinct embedding configuration.

A model costs seconds to load and hundreds of MB to hold, and every space of a process (a CLI run, the
evaluation harness, a service worker with thousands of users) should share it.
"""

import functools

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder, create_embedder


@functools.cache
def _shared_embedder(config_json: str) -> Embedder:
    """One embedder (one loaded model) per distinct embedding configuration in this process."""
    return create_embedder(MemoryConfig.model_validate_json(config_json))


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
        "model_cache_dir",
        "torch_threads",
        "show_progress",
    }
)
"""Every setting the embedder reads: configs that differ in any of them never share a model."""


def shared_embedder(config: MemoryConfig) -> Embedder:
    """The process's embedder for `config`'s embedding settings, created on first request."""
    return _shared_embedder(config.model_dump_json(include=set(EMBEDDER_FIELDS)))
