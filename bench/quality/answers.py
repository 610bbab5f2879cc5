"""Answer quality side by side: ours and the reference MemoryOS answering the same LoCoMo questions.

Both systems ingest the same sessions and answer the same questions through the same OpenAI-compatible
endpoint (the local model of docs/evaluation.md, "Real-model tier") at temperature 0, each with its own
prompts and its own consolidation: ours through `Memoryos` (`retrieve`, then the answer request
`get_response` builds), the reference through its own `get_response` in its own interpreter
(`memoryos/eval/reference_runner.py`). Neither stores the questions back. Answers are scored with token F1
and BLEU-1 per category; ours minus the reference is given with a paired bootstrap interval over the
questions, and the cost (LLM calls and tokens the server reported) per turn ingested and per answer.

The sample is fixed (`SAMPLE_SESSIONS`): the first sessions of each dev conversation and every question
with a gold answer whose evidence lies entirely inside them. A run is split into parts, one per system and
conversation; each part logs every session, pair and answer as it finishes and a rerun resumes from the
log, so a stopped run loses at most the step in flight. `run` does the parts not yet done; `report` scores
whatever is done.

    python -m bench.quality.answers run --llm-url http://127.0.0.1:8088/v1 --systems memoryos &
    python -m bench.quality.answers run --llm-url http://127.0.0.1:8088/v1 --systems reference \
        --reference-python /work/refvenv/bin/python &
    python -m bench.quality.answers report
"""

import argparse
import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.corpus import dev_conversations
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.errors import LLMError
from memoryos.eval.baselines import (
    REFERENCE_SHORT_TERM_CAPACITY,
    bundled_minilm,
    reference_pair,
    run_reference_job,
)
from memoryos.eval.cli import CATEGORY_NAMES
from memoryos.eval.harness import ANSWER_STYLE_HINT, SCORED_CATEGORIES
from memoryos.eval.locomo import LocomoConversation
from memoryos.eval.metrics import answer_tokens, bleu1, token_f1
from memoryos.eval.results import UsageTotals
from memoryos.facade.memoryos import Memoryos
from memoryos.planning.generation import answer_request

SAMPLE_SESSIONS: dict[str, int] = {"conv-26": 4, "conv-30": 2}
"""Sessions ingested per conversation: 39 + 24 pairs and 35 + 17 = 52 questions (categories 1-4; category 5
has no gold answer). A whole conversation takes ~1.7 h per system with this model on 2 cores, and the
reference makes ~6 calls per pair once its short-term memory is full: the first sessions keep each part
well under 90 minutes and the run inside an afternoon."""

SYSTEMS = ("memoryos", "reference")
TOP_K = 10
"""Pages retrieved per question by both systems (the reference paper's LoCoMo setting)."""

MAX_TOKENS_CAP = 1024
"""Every call of either system at most this many tokens (the reference asks for up to 2,000, ours for up to
2,048 for the profile and facts): a looping reply at a few tokens/s would otherwise hold a part for many
minutes. Replies cut at it are counted."""

REFERENCE_PROMPT_TAIL = "be sure to check whether the timestamp of the referenced information"
"""The last line of the reference's answer prompt, which ends in a colon with the format it names missing:
a small model often answers with that line instead of an answer. Such replies are counted, and the
comparison is also given without them."""

RELATIONSHIP = "friend"
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20261128
DEFAULT_OUT = Path("bench/out/answers")
"""Ignored by git: a run's parts are working files; the report goes into docs by hand."""
PART_TIMEOUT_S = 90 * 60


def sample(conversation: LocomoConversation, sessions: int) -> LocomoConversation:
    """The first `sessions` sessions and the questions with a gold answer all of whose evidence they hold."""
    kept_sessions = sorted({pair.session for pair in conversation.pairs})[:sessions]
    pairs = [pair for pair in conversation.pairs if pair.session in kept_sessions]
    known = {dia_id for pair in pairs for dia_id in pair.dia_ids}
    questions = [
        question
        for question in conversation.qa
        if question.answer is not None
        and question.category in SCORED_CATEGORIES
        and question.evidence_norm
        and all(dia_id in known for dia_id in question.evidence_norm)
    ]
    return conversation.model_copy(update={"pairs": pairs, "qa": questions})


def sampled_conversations(ids: Sequence[str] | None = None) -> list[LocomoConversation]:
    return [
        sample(conversation, SAMPLE_SESSIONS[conversation.sample_id])
        for conversation in dev_conversations()
        if conversation.sample_id in SAMPLE_SESSIONS and (not ids or conversation.sample_id in ids)
    ]


def _speakers(conversation: LocomoConversation) -> dict[str, str]:
    """Questions name the speakers, pages say "User" and "Assistant": both systems get the names."""
    return {"user_name": conversation.speaker_a, "assistant_name": conversation.speaker_b}


class _Log:
    """A part's JSON-lines log: each finished step, appended and flushed, read back on resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def events(self, kind: str) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                event = json.loads(line)
                if event["kind"] == kind:
                    yield event

    def write(self, event: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(event) + "\n")


def run_ours(
    conversation: LocomoConversation,
    part: Path,
    llm_url: str,
    llm_model: str,
    embedder: Embedder | None = None,
) -> None:
    """Ingest session by session (each flushed: embedded and consolidated) and answer every question;
    a session's write id makes a rerun after a stop store it once. `embedder`: the configured one
    (all-MiniLM-L6-v2, as the reference's) unless given."""
    config = MemoryConfig(
        data_dir=part / "data",
        openai_base_url=llm_url,
        llm_model=llm_model,
        llm_temperature_answer=0.0,
        llm_max_concurrency=1,
        llm_timeout_s=600.0,
        llm_max_tokens_profile=MAX_TOKENS_CAP,
        llm_max_tokens_knowledge=MAX_TOKENS_CAP,
        llm_max_tokens_answer=MAX_TOKENS_CAP,
        retrieval_queue_capacity=TOP_K,
    )
    log = _Log(part / "log.jsonl")
    ingested = {event["session"] for event in log.events("session")}
    answered = {event["question"] for event in log.events("answered")}
    sessions: dict[int, list[dict[str, str]]] = {}
    for pair in conversation.pairs:
        sessions.setdefault(pair.session, []).append(reference_pair(pair))
    with Memoryos.from_config(conversation.sample_id, config, embedder=embedder) as memory:
        for session, turns in sessions.items():
            if session in ingested:
                continue
            before, started = memory.llm.usage, time.perf_counter()
            memory.add_memories(turns, write_id=f"session-{session}")
            memory.flush()
            log.write(
                {
                    "kind": "session",
                    "session": session,
                    "pairs": len(turns),
                    "s": round(time.perf_counter() - started, 3),
                    "llm": UsageTotals.between(before, memory.llm.usage).model_dump(),
                }
            )
        for number, question in enumerate(conversation.qa):
            if number in answered:
                continue
            before, started = memory.llm.usage, time.perf_counter()
            context = memory.retrieve(question.question, top_k=TOP_K)
            request = answer_request(
                context, RELATIONSHIP, style_hint=ANSWER_STYLE_HINT, meta_data=_speakers(conversation)
            )
            try:
                prediction = memory.llm.answer(request)
            except LLMError:
                prediction = ""
            log.write(
                {
                    "kind": "answered",
                    "question": number,
                    "prediction": prediction,
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                    "llm": UsageTotals.between(before, memory.llm.usage).model_dump(),
                }
            )


def run_reference(
    conversation: LocomoConversation, part: Path, llm_url: str, llm_model: str, python: Path
) -> None:
    """The reference's own ingest and `get_response`, in its interpreter; its runner logs and resumes."""
    part.mkdir(parents=True, exist_ok=True)
    job = {
        "user_id": conversation.sample_id,
        "pairs": [reference_pair(pair) for pair in conversation.pairs],
        "questions": [question.question for question in conversation.qa],
        "llm_base_url": llm_url,
        "llm_model": llm_model,
        "embedding_model_path": str(bundled_minilm()),
        "top_k": TOP_K,
        "short_term_capacity": REFERENCE_SHORT_TERM_CAPACITY,
        "data_dir": str(part / "data"),
        "log_path": str(part / "log.jsonl"),
        "temperature": 0.0,
        "max_tokens_cap": MAX_TOKENS_CAP,
        "answer": {
            "relationship": RELATIONSHIP,
            "style_hint": ANSWER_STYLE_HINT,
            "meta_data": _speakers(conversation),
        },
    }
    try:
        run_reference_job(python, job, part, PART_TIMEOUT_S)
    except RuntimeError as error:
        raise SystemExit(f"{conversation.sample_id}: {error}") from error


def _part(out: Path, system: str, conversation: LocomoConversation) -> Path:
    return out / system / conversation.sample_id


def _predictions(part: Path) -> dict[int, str]:
    log = _Log(part / "log.jsonl")
    return {
        event["question"]: event.get("prediction", event.get("result", {}).get("prediction", ""))
        for event in log.events("answered")
    }


def _cost(system: str, part: Path) -> dict[str, int]:
    """Calls and tokens (as the server reported them) while ingesting and while answering."""
    log = _Log(part / "log.jsonl")
    totals = {"ingest_calls": 0, "ingest_prompt_tokens": 0, "ingest_completion_tokens": 0, "turns": 0}
    totals |= {"answer_calls": 0, "answer_prompt_tokens": 0, "answer_completion_tokens": 0, "answers": 0}
    ingest_events = log.events("session" if system == "memoryos" else "added")
    for event in ingest_events:
        totals["turns"] += event.get("pairs", 1)
        totals["ingest_calls"] += event["llm"]["calls"]
        totals["ingest_prompt_tokens"] += event["llm"]["prompt_tokens"]
        totals["ingest_completion_tokens"] += event["llm"]["completion_tokens"]
    for event in log.events("answered"):
        totals["answers"] += 1
        totals["answer_calls"] += event["llm"]["calls"]
        totals["answer_prompt_tokens"] += event["llm"]["prompt_tokens"]
        totals["answer_completion_tokens"] += event["llm"]["completion_tokens"]
    return totals


def gold_recall(prediction: str, answer: str) -> float:
    """Share of the gold answer's tokens the prediction holds: F1 and BLEU-1 also charge for every extra
    word, so a system asked for "at most 30 words" (the reference's prompt) is shown here whether its
    answers hold the fact at all."""
    gold = answer_tokens(answer)
    if not gold:
        return 1.0
    return sum((Counter(answer_tokens(prediction)) & Counter(gold)).values()) / len(gold)


def paired_interval(
    differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95% percentile interval of the mean of paired differences, resampling questions with replacement:
    both systems answered the same questions, so their scores are compared question by question."""
    if not differences:
        raise ValueError("differences: no paired questions to resample")
    generator = random.Random(seed)
    count = len(differences)
    means = sorted(
        statistics.fmean(differences[generator.randrange(count)] for _ in range(count))
        for _ in range(resamples)
    )
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def report(out: Path, conversations: Sequence[LocomoConversation]) -> dict[str, Any]:
    """Score every question both systems answered; per category, overall (categories 1-4), and the cost.
    Writes `report.json` (every answer too) and `report.md` to `out`."""
    rows: list[dict[str, Any]] = []
    costs: dict[str, dict[str, int]] = {system: {} for system in SYSTEMS}
    for conversation in conversations:
        predictions = {system: _predictions(_part(out, system, conversation)) for system in SYSTEMS}
        for system in SYSTEMS:
            for key, value in _cost(system, _part(out, system, conversation)).items():
                costs[system][key] = costs[system].get(key, 0) + value
        for number, question in enumerate(conversation.qa):
            if not all(number in predictions[system] for system in SYSTEMS):
                continue
            gold = str(question.answer)
            row: dict[str, Any] = {
                "conversation": conversation.sample_id,
                "question": question.question,
                "category": question.category,
                "gold": gold,
            }
            for system in SYSTEMS:
                prediction = predictions[system][number]
                row[system] = {
                    "prediction": prediction,
                    "f1": token_f1(prediction, gold),
                    "bleu1": bleu1(prediction, gold),
                    "recall": gold_recall(prediction, gold),
                    "words": len(prediction.split()),
                }
            rows.append(row)
    answered = [row for row in rows if REFERENCE_PROMPT_TAIL not in row["reference"]["prediction"]]
    groups = {"overall": rows, "overall, reference replies that answer": answered} | {
        f"{category} {CATEGORY_NAMES[category]}": [row for row in rows if row["category"] == category]
        for category in SCORED_CATEGORIES
    }
    table = {name: _compare(group) for name, group in groups.items() if group}
    result = {
        "sample": SAMPLE_SESSIONS,
        "questions": len(rows),
        "reference_prompt_echoes": len(rows) - len(answered),
        "table": table,
        "cost": {system: _per_unit(totals) for system, totals in costs.items()},
        "misses": [row for row in rows if row["memoryos"]["f1"] < 0.5],
        "rows": rows,
    }
    (out / "report.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "report.md").write_text(_markdown(result), encoding="utf-8")
    return result


def _compare(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {"questions": len(rows)}
    for metric in ("f1", "bleu1", "recall"):
        ours = [row["memoryos"][metric] for row in rows]
        theirs = [row["reference"][metric] for row in rows]
        differences = [a - b for a, b in zip(ours, theirs, strict=True)]
        low, high = paired_interval(differences)
        figures[metric] = {
            "memoryos": round(statistics.fmean(ours), 4),
            "reference": round(statistics.fmean(theirs), 4),
            "difference": round(statistics.fmean(differences), 4),
            "interval_95": [round(low, 4), round(high, 4)],
        }
    return figures


def _per_unit(totals: dict[str, int]) -> dict[str, float]:
    turns, answers = max(1, totals.get("turns", 0)), max(1, totals.get("answers", 0))
    return totals | {
        "calls_per_turn": round(totals.get("ingest_calls", 0) / turns, 3),
        "prompt_tokens_per_turn": round(totals.get("ingest_prompt_tokens", 0) / turns, 1),
        "completion_tokens_per_turn": round(totals.get("ingest_completion_tokens", 0) / turns, 1),
        "calls_per_answer": round(totals.get("answer_calls", 0) / answers, 3),
        "prompt_tokens_per_answer": round(totals.get("answer_prompt_tokens", 0) / answers, 1),
        "completion_tokens_per_answer": round(totals.get("answer_completion_tokens", 0) / answers, 1),
    }


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['questions']} questions answered by both systems (sample: {result['sample']}); "
        f"{result['reference_prompt_echoes']} reference replies repeat its prompt's last line.",
        "",
        "| questions | n | F1 ours | F1 reference | F1 difference [95% CI] | BLEU-1 ours | BLEU-1 reference "
        "| BLEU-1 difference [95% CI] | gold tokens held, ours / reference |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in result["table"].items():
        f1, b1 = row["f1"], row["bleu1"]
        lines.append(
            f"| {name} | {row['questions']} | {f1['memoryos']:.3f} | {f1['reference']:.3f} | "
            f"{f1['difference']:+.3f} [{f1['interval_95'][0]:+.3f}, {f1['interval_95'][1]:+.3f}] | "
            f"{b1['memoryos']:.3f} | {b1['reference']:.3f} | "
            f"{b1['difference']:+.3f} [{b1['interval_95'][0]:+.3f}, {b1['interval_95'][1]:+.3f}] | "
            f"{row['recall']['memoryos']:.3f} / {row['recall']['reference']:.3f} |"
        )
    lines += [
        "",
        "| system | turns | LLM calls / turn | prompt tokens / turn | completion tokens / turn | answers "
        "| calls / answer | prompt tokens / answer | completion tokens / answer |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for system, cost in result["cost"].items():
        lines.append(
            f"| {system} | {cost['turns']} | {cost['calls_per_turn']} | {cost['prompt_tokens_per_turn']} | "
            f"{cost['completion_tokens_per_turn']} | {cost['answers']} | {cost['calls_per_answer']} | "
            f"{cost['prompt_tokens_per_answer']} | {cost['completion_tokens_per_answer']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("run", "report"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--llm-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8088/v1")
    parser.add_argument("--llm-model", default="local", help="model name sent to the endpoint")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--conversations", nargs="+", choices=sorted(SAMPLE_SESSIONS), default=None)
    parser.add_argument("--reference-python", type=Path, help="interpreter with memoryos-pro installed")
    args = parser.parse_args(argv)
    if args.action == "report":
        print(_markdown(report(args.out, sampled_conversations())))
        return
    if not args.llm_url:
        parser.error("--llm-url is required to run")
    if "reference" in args.systems and not args.reference_python:
        parser.error("--reference-python is required for the reference")
    for conversation in sampled_conversations(args.conversations):
        for system in args.systems:
            part = _part(args.out, system, conversation)
            started = time.perf_counter()
            if system == "memoryos":
                run_ours(conversation, part, args.llm_url, args.llm_model)
            else:
                run_reference(conversation, part, args.llm_url, args.llm_model, args.reference_python)
            print(f"{system} {conversation.sample_id}: {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
