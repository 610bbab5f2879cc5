"""MemoryOS: long-term memory for LLM agents, in three tiers (short-term, mid-term, long-term personal).

`from memoryos import Memoryos` is a drop-in for the reference package's class.
"""

from memoryos.config import MemoryConfig
from memoryos.errors import (
    EmbeddingModelMismatchError,
    InvalidInputError,
    LLMError,
    MemoryOSError,
    SpaceNotFoundError,
    StorageError,
)
from memoryos.facade.memoryos import Memoryos
from memoryos.storage.space_lock import SpaceBusyError
from memoryos.types import RetrievedContext

__all__ = [
    "EmbeddingModelMismatchError",
    "InvalidInputError",
    "LLMError",
    "MemoryConfig",
    "MemoryOSError",
    "Memoryos",
    "RetrievedContext",
    "SpaceBusyError",
    "SpaceNotFoundError",
    "StorageError",
]
__version__ = "0.1.0"
