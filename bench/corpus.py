"""Benchmark inputs: LoCoMo exchanges, and a precomputing embedder to fill large stores quickly.

Filling a 100k-page space through the model would take ~12 minutes of encoding on 2 cores and measures
nothing of the engine, so fills reuse vectors of the real texts; every timed operation (add_memory,
retrieve, batch ingest) encodes with the real model.
"""

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memoryos.embedding.base import Embedder
from memoryos.eval.locomo import LocomoConversation, load_conversations

_COPY_SUFFIX = re.compile(r" \(#\d+\)")
LOCOMO_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo"


def dev_conversations() -> list[LocomoConversation]:
    return load_conversations(LOCOMO_DIR / "pairs")


def exchanges(count: int, conversations: Sequence[LocomoConversation]) -> list[dict[str, str]]:
    """`count` exchanges cycling through the conversations; repeats get a suffix so every text differs."""
    base = [pair for conversation in conversations for pair in conversation.pairs]
    turns = []
    for i in range(count):
        pair = base[i % len(base)]
        suffix = f" (#{i // len(base)})" if i >= len(base) else ""
        turns.append(
            {
                "user_input": pair.user_input + suffix,
                "agent_response": pair.agent_response,
                "timestamp": pair.timestamp,
            }
        )
    return turns


class ReusingEmbedder:
    """Encodes each distinct base text once with the real model and reuses its vector for suffixed copies."""

    def __init__(self, model: Embedder) -> None:
        self.model = model
        self._vectors: dict[str, np.ndarray] = {}

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def dim(self) -> int:
        return self.model.dim

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        keys = [_COPY_SUFFIX.sub("", text) for text in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self.model.encode(missing, is_query=is_query), strict=True))
        return np.stack([self._vectors[k] for k in keys]) if keys else np.zeros((0, self.dim), np.float32)
