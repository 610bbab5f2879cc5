"""Model directories marked as random weights: speed stand-ins that must never embed a real memory.

`python -m bench.gpu.models save` builds bge-m3- and Qwen3-Embedding-0.6B-sized models from their
published configurations with random weights, so the worker's real path can be timed with models of the
design's size where their weights cannot be downloaded. Their vectors mean nothing: a space embedded with
one would answer every retrieval with noise, and its model name would look like a real model's. The
builder writes `RANDOM_WEIGHTS_MARKER` into the directory, and the embedder refuses to load a marked
directory unless `embedding_speed_only` is set.
"""

from pathlib import Path

from memoryos.errors import MemoryOSError

RANDOM_WEIGHTS_MARKER = "memoryos_random_weights.json"
"""The file in a model directory that says its weights are random (its JSON says which architecture)."""


def refuse_random_weights(location: str, speed_only: bool) -> None:
    """MemoryOSError, naming the setting, when `location` is a marked directory and speed_only is off."""
    if not speed_only and (Path(location).expanduser() / RANDOM_WEIGHTS_MARKER).is_file():
        raise MemoryOSError(
            f"embedding_model_name: {location!r} holds random weights (a speed stand-in built by "
            "bench.gpu.models): its vectors mean nothing and it never stores memories; set "
            "embedding_speed_only (MEMORYOS_EMBEDDING_SPEED_ONLY=true) only to measure speed"
        )
