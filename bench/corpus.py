"""Benchmark inputs: LoCoMo exchanges, and a precomputing embedder to fill large stores quickly.

Filling a 100k-page space through the model would take ~12 minutes of encoding on 2 cores and measures
nothing of the engine, so fills reuse vectors of the real texts; every timed operation (add_memory,
retrieve, batch ingest) encodes with the real model.
"""

import re
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memoryos.embedding.base import Embedder
from memoryos.eval.locomo import (
    DEV_SAMPLE_IDS,
    LOCOMO_FETCH,
    LocomoConversation,
    find_locomo_raw,
    load_conversations,
)
from memoryos.types import exchange_text

_COPY_SUFFIX = re.compile(r" \(#(\d+)\)")


def locomo_raw() -> Path:
    """The raw LoCoMo file, or SystemExit with the line that fetches it."""
    found = find_locomo_raw()
    if found is None:
        raise SystemExit(f"LoCoMo data not found; fetch it with: {LOCOMO_FETCH}")
    return found


def dev_conversations() -> list[LocomoConversation]:
    return load_conversations(locomo_raw(), DEV_SAMPLE_IDS)


def exchanges(
    count: int, conversations: Sequence[LocomoConversation], start: int = 0
) -> list[dict[str, str]]:
    """`count` exchanges cycling through the conversations, from the `start`-th; repeats get a suffix so
    every text differs (`start` lets a long bench take its exchanges in slices)."""
    base = [pair for conversation in conversations for pair in conversation.pairs]
    turns = []
    for i in range(start, start + count):
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


def page_texts(turns: Sequence[dict[str, str]]) -> list[str]:
    """The texts the engine embeds for these exchanges (`exchange_text`): what a worker's batches hold."""
    return [exchange_text(turn["user_input"], turn["agent_response"]) for turn in turns]


COPY_NOISE = 0.015
"""Per-dimension noise added to a copy's vector (cosine to its original ≈ 0.95): copies must be distinct
points, or an ANN index calibrated on them sees ties instead of neighbours."""


class ReusingEmbedder:
    """Encodes each distinct base text once with the real model; a suffixed copy gets that vector plus a
    little noise seeded by the copy and its text. Queries always go to the real model."""

    def __init__(self, model: Embedder) -> None:
        self.model = model
        self._vectors: dict[str, np.ndarray] = {}

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def dim(self) -> int:
        return self.model.dim

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        self.model.forget_texts(texts)

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if is_query:
            return self.model.encode(texts, is_query=True)
        keys = [_COPY_SUFFIX.sub("", text) for text in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self.model.encode(missing), strict=True))
        rows = []
        for text, key in zip(texts, keys, strict=True):
            vector = self._vectors[key]
            copy = _COPY_SUFFIX.search(text)
            if copy:
                seed = [int(copy.group(1)), zlib.crc32(key.encode())]
                noise = np.random.default_rng(seed).normal(0, COPY_NOISE, vector.shape)
                vector = vector + noise.astype(np.float32)
                vector = vector / np.linalg.norm(vector)
            rows.append(vector)
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, self.dim), np.float32)
