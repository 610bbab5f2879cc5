"""Quality figures: LoCoMo evidence recall@k by category on the dev conversations."""

import tempfile
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.corpus import dev_conversations
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.eval.harness import evaluate_conversation


def run_recall(config: MemoryConfig, model: Embedder) -> list[dict[str, Any]]:
    rows = []
    for conversation in tqdm(dev_conversations(), desc="recall", unit="conversation"):
        with tempfile.TemporaryDirectory() as scratch:
            result = evaluate_conversation(conversation, Path(scratch), config, embedder=model)
        rows.append(result.model_dump())
        tqdm.write(
            f"{conversation.sample_id} { ({k: round(v, 3) for k, v in result.recall.overall.items()}) }"
        )
    return rows
