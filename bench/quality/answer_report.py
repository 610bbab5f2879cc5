"""The answer bench's report: evidence recall first, then every arm's scores, then the paired comparisons
that separate memory from prompt, and the cost.

Only questions every arm answered are scored, so each comparison is paired question by question. Evidence
recall@k is read from the pages each system showed the model (`shown`, rank order), mapped back to LoCoMo
turns by their text: how much of the evidence an answer could have used, before any prompt. The judge's
verdicts (`judge.jsonl`, written by `answers judge`) stand beside token F1: F1 charges a right answer for
its wording, the judge does not.
"""

import json
import random
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from bench.quality.answer_arms import (
    ARMS,
    OURS,
    OURS_REFERENCE_PROMPT,
    REFERENCE_FIXED,
    REFERENCE_PUBLISHED,
    REFERENCE_RUNNER_ARMS,
    SYSTEMS,
    page_key,
    part_path,
)
from memoryos.eval.cli import CATEGORY_NAMES
from memoryos.eval.harness import SCORED_CATEGORIES
from memoryos.eval.locomo import LocomoConversation
from memoryos.eval.metrics import (
    answer_tokens,
    bleu1,
    evidence_recall_at_k,
    page_dia_ids,
    ranked_dia_ids,
    token_f1,
)
from memoryos.eval.reference_runner import REFERENCE_LLM_ERROR

RECALL_KS = (1, 3, 5, 10)
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20261128

REFERENCE_PROMPT_TAIL = "be sure to check whether the timestamp of the referenced information"
"""The last line of the reference's answer prompt: its published prompt announces a format and gives none,
and a small model often answers with this line instead. Such replies are counted per arm."""

COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("memories, one prompt (the reference's, repaired)", OURS_REFERENCE_PROMPT, REFERENCE_FIXED),
    ("prompts, our memory", OURS, OURS_REFERENCE_PROMPT),
    ("the repair, the reference's memory", REFERENCE_FIXED, REFERENCE_PUBLISHED),
    ("systems, each with its own repaired prompt", OURS, REFERENCE_FIXED),
    ("systems as shipped", OURS, REFERENCE_PUBLISHED),
)
"""(what differs, arm a, arm b): a minus b, paired by question."""


class _Shown(NamedTuple):
    """A logged page shown to the model, as `metrics.ranked_dia_ids` reads a page."""

    user_input: str
    agent_response: str


def events(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    """A JSON-lines log's events of one kind; nothing when the log does not exist yet."""
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            event = json.loads(line)
            if event["kind"] == kind:
                yield event


def part_answers(part: Path, system: str) -> dict[tuple[int, str], dict[str, Any]]:
    """(question, arm) -> {prediction, calls, shown}, from either system's part log."""
    answers: dict[tuple[int, str], dict[str, Any]] = {}
    for event in events(part / "log.jsonl", "answered"):
        if system == "memoryos":
            answers[(event["question"], event["arm"])] = event
        else:
            result = event["result"]
            answers[(event["question"], REFERENCE_RUNNER_ARMS[event["arm"]])] = {
                "prediction": result.get("prediction", ""),
                "calls": event.get("calls", []),
                # Ranked as ours is (`answers.run_ours`): retrieved pages, then the recent ones, newest first.
                "shown": [
                    page_key(page)
                    for page in [*result.get("retrieved", []), *reversed(result.get("short_term", []))]
                ],
                "error": result.get("error"),
            }
    return answers


def conversation_answers(out: Path, sample_id: str) -> dict[tuple[int, str], dict[str, Any]]:
    """(question, arm) -> answer, over both systems' parts on one conversation."""
    answers: dict[tuple[int, str], dict[str, Any]] = {}
    for system in SYSTEMS:
        answers |= part_answers(part_path(out, system, sample_id), system)
    return answers


def duplicated_pairs(part: Path) -> int:
    """Pairs a reference part's log shows added more than once (a resumed ingest): must be 0."""
    added = Counter(event["pair"] for event in events(part / "log.jsonl", "added"))
    return sum(count - 1 for count in added.values())


def gold_recall(prediction: str, answer: str) -> float:
    """Share of the gold answer's tokens the prediction holds: F1 and BLEU-1 also charge for every extra
    word, so a system asked for "at most 30 words" is shown here whether its answers hold the fact at all."""
    gold = answer_tokens(answer)
    if not gold:
        return 1.0
    return sum((Counter(answer_tokens(prediction)) & Counter(gold)).values()) / len(gold)


def paired_interval(
    differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95% percentile interval of the mean of paired differences, resampling questions with replacement:
    both arms answered the same questions, so their scores are compared question by question."""
    if not differences:
        raise ValueError("differences: no paired questions to resample")
    generator = random.Random(seed)
    count = len(differences)
    means = sorted(
        statistics.fmean(differences[generator.randrange(count)] for _ in range(count))
        for _ in range(resamples)
    )
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def _answer_call(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The call that produced the answer: the last one (the reference asks for keywords first)."""
    return calls[-1] if calls else {"prompt_tokens": None, "completion_tokens": None, "finish_reason": None}


def _scored(answer: dict[str, Any], gold: str, verdict: bool | None) -> dict[str, Any]:
    prediction = answer["prediction"]
    call = _answer_call(answer.get("calls", []))
    return {
        "prediction": prediction,
        "f1": token_f1(prediction, gold),
        "bleu1": bleu1(prediction, gold),
        "gold_held": gold_recall(prediction, gold),
        "judge": None if verdict is None else float(verdict),
        "words": len(prediction.split()),
        "echo": REFERENCE_PROMPT_TAIL in prediction,
        "failed": not prediction.strip() or prediction == REFERENCE_LLM_ERROR or bool(answer.get("error")),
        "prompt_tokens": call["prompt_tokens"],
        "completion_tokens": call["completion_tokens"],
        "finish_reason": call["finish_reason"],
        "calls": len(answer.get("calls", [])),
    }


def report(out: Path, conversations: Sequence[LocomoConversation]) -> dict[str, Any]:
    """Score every question all four arms answered. Writes `report.json` (every answer, its tokens and
    finish reason, and the judge's verdict) and `report.md` to `out`."""
    verdicts = {
        (event["conversation"], event["question"], event["arm"]): event["correct"]
        for event in events(out / "judge.jsonl", "judged")
    }
    rows: list[dict[str, Any]] = []
    duplicates = {}
    for conversation in conversations:
        answers = conversation_answers(out, conversation.sample_id)
        duplicates[conversation.sample_id] = duplicated_pairs(
            part_path(out, "reference", conversation.sample_id)
        )
        index = page_dia_ids(conversation.pairs)
        for number, question in enumerate(conversation.qa):
            if not all((number, arm) in answers for arm in ARMS):
                continue
            gold = str(question.answer)
            row: dict[str, Any] = {
                "conversation": conversation.sample_id,
                "question_number": number,
                "question": question.question,
                "category": question.category,
                "gold": gold,
                "recall": {},
            }
            for system, arm in zip(SYSTEMS, (OURS, REFERENCE_FIXED), strict=True):
                shown = [_Shown(*page) for page in answers[(number, arm)]["shown"]]
                ranking = ranked_dia_ids(shown, index)
                row["recall"][system] = {
                    **{str(k): evidence_recall_at_k(question.evidence_norm, ranking, k) for k in RECALL_KS},
                    "shown": evidence_recall_at_k(question.evidence_norm, ranking, max(1, len(ranking))),
                    "pages_shown": len(ranking),
                }
            for arm in ARMS:
                verdict = verdicts.get((conversation.sample_id, number, arm))
                row[arm] = _scored(answers[(number, arm)], gold, verdict)
            rows.append(row)
    groups = {"overall": rows} | {
        f"{category} {CATEGORY_NAMES[category]}": [row for row in rows if row["category"] == category]
        for category in SCORED_CATEGORIES
    }
    result = {
        "questions": len(rows),
        "conversations": [conversation.sample_id for conversation in conversations],
        "duplicated_reference_pairs": duplicates,
        "judged": sum(row[arm]["judge"] is not None for row in rows for arm in ARMS),
        "recall": {name: _recall(group) for name, group in groups.items() if group},
        "arms": {name: _arms(group) for name, group in groups.items() if group},
        "comparisons": {name: _comparisons(group) for name, group in groups.items() if group},
        "ingest_cost": ingest_cost(out, conversations),
        "rows": rows,
    }
    (out / "report.json").write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "report.md").write_text(markdown(result), encoding="utf-8")
    return result


def ingest_cost(out: Path, conversations: Sequence[LocomoConversation]) -> dict[str, dict[str, float]]:
    """Per system: pairs ingested, and the LLM calls and tokens the server reported per pair (ours per
    session flushed, the reference per pair added)."""
    costs: dict[str, dict[str, float]] = {}
    for system, kind in zip(SYSTEMS, ("session", "added"), strict=True):
        totals = Counter[str]()
        for conversation in conversations:
            for event in events(part_path(out, system, conversation.sample_id) / "log.jsonl", kind):
                totals["pairs"] += event.get("pairs", 1)
                for key in ("calls", "prompt_tokens", "completion_tokens"):
                    totals[key] += event.get("llm", {}).get(key, 0)
        pairs = max(1, totals["pairs"])
        costs[system] = {"pairs": totals["pairs"]} | {
            f"{key}_per_pair": round(totals[key] / pairs, 1)
            for key in ("calls", "prompt_tokens", "completion_tokens")
        }
    return costs


def _recall(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {
        system: {
            key: round(statistics.fmean(row["recall"][system][key] for row in rows), 4)
            for key in [*map(str, RECALL_KS), "shown", "pages_shown"]
        }
        for system in SYSTEMS
    }


def _mean(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.fmean(present), 4) if present else None


def _arms(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        arm: {
            "questions": len(rows),
            "f1": _mean([row[arm]["f1"] for row in rows]),
            "bleu1": _mean([row[arm]["bleu1"] for row in rows]),
            "judge": _mean([row[arm]["judge"] for row in rows]),
            "gold_held": _mean([row[arm]["gold_held"] for row in rows]),
            "median_words": statistics.median(row[arm]["words"] for row in rows),
            "prompt_tokens": _mean([row[arm]["prompt_tokens"] for row in rows]),
            "echoes": sum(row[arm]["echo"] for row in rows),
            "cut_at_cap": sum(row[arm]["finish_reason"] == "length" for row in rows),
            "failed": sum(row[arm]["failed"] for row in rows),
        }
        for arm in ARMS
    }


def _comparisons(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {}
    for name, first, second in COMPARISONS:
        figures[name] = {"arms": [first, second]}
        for metric in ("f1", "judge"):
            pairs = [
                (row[first][metric], row[second][metric])
                for row in rows
                if row[first][metric] is not None and row[second][metric] is not None
            ]
            if not pairs:
                continue
            differences = [a - b for a, b in pairs]
            low, high = paired_interval(differences)
            figures[name][metric] = {
                "questions": len(pairs),
                "difference": round(statistics.fmean(differences), 4),
                "interval_95": [round(low, 4), round(high, 4)],
            }
    return figures


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(result: dict[str, Any]) -> str:
    """The report's tables, recall first."""
    lines = [
        f"{result['questions']} questions answered by all four arms ({', '.join(result['conversations'])}); "
        f"{result['judged']} answers judged; reference pairs added twice: {result['duplicated_reference_pairs']}.",
        "",
        "Evidence recall of the pages each system showed the model:",
        "",
        "| questions | system | "
        + " | ".join(f"recall@{k}" for k in RECALL_KS)
        + " | recall, all shown | pages shown |",
        "| --- | --- | " + " | ".join("---" for _ in RECALL_KS) + " | --- | --- |",
    ]
    for name, systems in result["recall"].items():
        for system, recall in systems.items():
            lines.append(
                f"| {name} | {system} | "
                + " | ".join(f"{recall[str(k)]:.3f}" for k in RECALL_KS)
                + f" | {recall['shown']:.3f} | {recall['pages_shown']:.1f} |"
            )
    lines += [
        "",
        "| questions | arm | n | F1 | judge | BLEU-1 | gold tokens held | median words | prompt tokens | echoes "
        "| cut at cap | failed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, arms in result["arms"].items():
        for arm, row in arms.items():
            lines.append(
                f"| {name} | {arm} | {row['questions']} | {_figure(row['f1'])} | {_figure(row['judge'])} | "
                f"{_figure(row['bleu1'])} | {_figure(row['gold_held'])} | {row['median_words']:g} | "
                f"{row['prompt_tokens'] or 0:.0f} | {row['echoes']} | {row['cut_at_cap']} | {row['failed']} |"
            )
    lines += [
        "",
        "| questions | what differs | a − b | F1 difference [95% CI] | judge difference [95% CI] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, comparisons in result["comparisons"].items():
        if name != "overall":
            continue  # per category in report.json: a handful of questions each
        for what, figures in comparisons.items():
            cells = []
            for metric in ("f1", "judge"):
                figure = figures.get(metric)
                cells.append(
                    "-"
                    if figure is None
                    else f"{figure['difference']:+.3f} [{figure['interval_95'][0]:+.3f}, "
                    f"{figure['interval_95'][1]:+.3f}]"
                )
            lines.append(f"| {name} | {what} | {' − '.join(figures['arms'])} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "| system | pairs ingested | LLM calls / pair | prompt tokens / pair | completion tokens / pair |",
        "| --- | --- | --- | --- | --- |",
    ]
    for system, cost in result["ingest_cost"].items():
        lines.append(
            f"| {system} | {cost['pairs']:.0f} | {cost['calls_per_pair']} | {cost['prompt_tokens_per_pair']} | "
            f"{cost['completion_tokens_per_pair']} |"
        )
    return "\n".join(lines) + "\n"
