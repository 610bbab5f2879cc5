"""Quality figures: LoCoMo evidence recall@k by category on the dev conversations, and leave-one-out.

A retrieval weight measured on the conversations it was chosen on flatters itself. So each weight in
`HELD_OUT_GRID` is also chosen on two dev conversations and measured on the third, in turn; the held-out
figures are printed beside the all-three figures (docs/retrieval.md keeps both).
"""

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.corpus import dev_conversations
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.eval.harness import evaluate_conversation
from memoryos.eval.locomo import LocomoConversation
from memoryos.eval.metrics import RecallReport

LEAVE_ONE_OUT_K = 7
"""The cut-off weights are chosen and reported at: the engine's default `retrieval_queue_capacity`."""

HELD_OUT_GRID: dict[str, tuple[float, ...]] = {"lexical_other_side_weight": (0.0, 0.1, 0.25, 0.5, 1.0)}
"""Per setting, the values leave-one-out chooses among (the default among them)."""


def _recall(conversation: LocomoConversation, config: MemoryConfig, model: Embedder) -> RecallReport:
    with tempfile.TemporaryDirectory() as scratch:
        return evaluate_conversation(conversation, Path(scratch), config, embedder=model).recall


def run_recall(config: MemoryConfig, model: Embedder) -> list[dict[str, Any]]:
    conversations = dev_conversations()
    rows = []
    default_reports = []
    for conversation in tqdm(conversations, desc="recall", unit="conversation"):
        with tempfile.TemporaryDirectory() as scratch:
            result = evaluate_conversation(conversation, Path(scratch), config, embedder=model)
        rows.append(result.model_dump())
        default_reports.append(result.recall)
        tqdm.write(
            f"{conversation.sample_id} { ({k: round(v, 3) for k, v in result.recall.overall.items()}) }"
        )
    for setting, values in HELD_OUT_GRID.items():
        reports = {
            value: default_reports
            if value == getattr(config, setting)
            else [_recall(c, config.model_copy(update={setting: value}), model) for c in conversations]
            for value in tqdm(values, desc=f"leave-one-out: {setting}", unit="value")
        }
        held_out = leave_one_out(reports)
        for row, (chosen, report) in zip(rows, held_out, strict=True):
            row.setdefault("held_out", {})[setting] = {"chosen": chosen, "recall": report.model_dump()}
        print(held_out_markdown(setting, [c.sample_id for c in conversations], reports, held_out))
    return rows


def leave_one_out(reports: dict[float, list[RecallReport]]) -> list[tuple[float, RecallReport]]:
    """Per conversation: the value with the best mean recall@`LEAVE_ONE_OUT_K` on the others (the smaller
    value on a tie), and that value's report on this conversation."""
    folds = len(next(iter(reports.values())))
    chosen = []
    for held in range(folds):

        def on_the_others(value: float, held: int = held) -> tuple[float, float]:
            others = [r.overall[LEAVE_ONE_OUT_K] for i, r in enumerate(reports[value]) if i != held]
            return sum(others) / len(others), -value

        best = max(reports, key=on_the_others)
        chosen.append((best, reports[best][held]))
    return chosen


def pooled(reports: Sequence[RecallReport], k: int = LEAVE_ONE_OUT_K) -> dict[int, float]:
    """Recall@k per category over the questions of all the reports together (category -> recall)."""
    totals: dict[int, tuple[float, int]] = {}
    for report in reports:
        for category, count in report.category_counts.items():
            summed, counted = totals.get(category, (0.0, 0))
            totals[category] = (summed + report.by_category[category][k] * count, counted + count)
    return {category: summed / counted for category, (summed, counted) in sorted(totals.items())}


def held_out_markdown(
    setting: str,
    sample_ids: list[str],
    reports: dict[float, list[RecallReport]],
    held_out: list[tuple[float, RecallReport]],
) -> str:
    """One row per value on all three conversations, then the held-out row: per category (pooled) and
    per conversation, recall@`LEAVE_ONE_OUT_K`."""
    categories = sorted(pooled(next(iter(reports.values()))))
    header = ["`" + setting + "`", *(f"cat {c}" for c in categories), *sample_ids, "mean"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += [markdown_row(f"{value:g}, all three", runs) for value, runs in reports.items()]
    chosen = ", ".join(
        f"{sample_id}: {value:g}" for sample_id, (value, _) in zip(sample_ids, held_out, strict=True)
    )
    lines.append(markdown_row(f"held out (chosen {chosen})", [report for _, report in held_out]))
    return "\n".join(lines)


def markdown_row(label: str, reports: Sequence[RecallReport]) -> str:
    """One table row: recall@`LEAVE_ONE_OUT_K` per category (pooled, by category), per conversation, and
    their mean."""
    overall = [r.overall[LEAVE_ONE_OUT_K] for r in reports]
    cells = [*pooled(reports).values(), *overall, sum(overall) / len(overall)]
    return f"| {label} | " + " | ".join(f"{cell:.3f}" for cell in cells) + " |"
