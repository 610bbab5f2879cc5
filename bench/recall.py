"""Quality figures: LoCoMo evidence recall@k by category on the dev conversations."""

import tempfile
from pathlib import Path
from typing import Any

from bench.corpus import dev_conversations
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.eval.harness import evaluate_conversation


def run_recall(config: MemoryConfig, model: Embedder) -> list[dict[str, Any]]:
    rows = []
    for conversation in dev_conversations():
        with tempfile.TemporaryDirectory() as scratch:
            result = evaluate_conversation(conversation, Path(scratch), config, embedder=model)
        rows.append(result.model_dump())
        print(conversation.sample_id, {k: round(v, 3) for k, v in result.recall.overall.items()}, flush=True)
    return rows
