"""Answer quality side by side: ours and the reference MemoryOS answering the same held-out LoCoMo questions.

Both systems ingest the same sessions and answer the same questions through the same OpenAI-compatible
endpoint (the local model of docs/evaluation.md, "Real-model tier") at temperature 0, each with its own
consolidation and retrieval: ours through `Memoryos`, the reference through its own `get_response` in its
own interpreter (`memoryos/eval/reference_runner.py`). Each system answers twice, once per prompt
(`answer_arms.ARMS`: ours and the reference's repaired prompt over our memory; the reference's repaired and
published prompts over its memory), so what the memory holds and how the prompt asks separate. Neither
stores the questions back.

The sample is fixed (`SAMPLE_SESSIONS`): the first sessions of conversations our prompts and thresholds
were not tuned on (never conv-26, 30 or 41), and every question with a gold answer whose evidence lies
inside them; it needs the full `locomo10.json` (`--data`). A run is split into parts, one per system and
conversation; each logs every session, pair and answer as it finishes, with each answer call's tokens and
finish reason. A rerun resumes a part from its log, except a reference part stopped while ingesting, which
starts again from nothing (its memory lives in JSON files a pair in flight may have half-written, and a
resumed pair could be stored twice). `run` does the parts not yet done, `judge` grades every answer with the
LLM judge (`memoryos/eval/judge.py`, resumable too), `report` scores what is done
(`bench/quality/answer_report.py`).

    python -m bench.quality.answers run --llm-url http://127.0.0.1:8088/v1 --systems reference \
        --reference-python /work/refvenv/bin/python --data data/locomo10.json &
    python -m bench.quality.answers run --llm-url http://127.0.0.1:8088/v1 --systems memoryos \
        --reference-python /work/refvenv/bin/python --data data/locomo10.json &
    python -m bench.quality.answers judge --llm-url http://127.0.0.1:8088/v1 --data data/locomo10.json
    python -m bench.quality.answers report --data data/locomo10.json
"""

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.quality.answer_arms import (
    ARMS,
    OURS,
    REFERENCE_RUNNER_ARMS,
    SYSTEMS,
    fixed_prompt,
    page_key,
    part_path,
    reference_layout_messages,
    send_recorded,
)
from bench.quality.answer_report import conversation_answers, events, markdown, report
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.errors import InvalidInputError, LLMError
from memoryos.eval.baselines import (
    REFERENCE_SHORT_TERM_CAPACITY,
    bundled_minilm,
    reference_pair,
    run_reference_job,
)
from memoryos.eval.harness import ANSWER_STYLE_HINT, SCORED_CATEGORIES
from memoryos.eval.judge import OpenAIJudge
from memoryos.eval.locomo import LOCOMO_FETCH, LocomoConversation, load_conversations
from memoryos.eval.results import UsageTotals
from memoryos.facade.memoryos import Memoryos
from memoryos.llm.chat_tasks import answer_task
from memoryos.llm.openai_client import CompletionCodec, openai_client
from memoryos.planning.generation import answer_request

SAMPLE_SESSIONS: dict[str, int] = {"conv-48": 2, "conv-49": 2}
"""Sessions ingested per conversation: 25 + 21 pairs and 20 + 13 = 33 questions (categories 1-4; category 5
has no gold answer). Held out: our answer prompt, style hint and guards were tuned on conv-26, 30 and 41
(`DEV_SAMPLE_IDS`), never on these. The reference makes ~6 calls per pair once its short-term memory is
full, and one answer costs ~1 minute of this machine's two cores: two sessions keep each part under 90
minutes."""

OUR_ARMS = tuple(arm for arm, system in ARMS.items() if system == "memoryos")
TOP_K = 10
"""Pages retrieved per question by both systems (the reference paper's LoCoMo setting)."""

MAX_TOKENS_CAP = 1024
"""Every call of either system at most this many tokens (the reference asks for up to 2,000, ours for up to
2,048 for the profile and facts): a looping reply at a few tokens/s would otherwise hold a part for many
minutes. Replies cut at it are counted."""

RELATIONSHIP = "friend"
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


def sampled_conversations(data: Path, ids: Sequence[str] | None = None) -> list[LocomoConversation]:
    """The held-out sample from the upstream file at `data`; one line saying how to fetch it when the
    file lacks them (the workplace's `locomo_dev.json` holds the three tuning conversations only)."""
    wanted = [sample_id for sample_id in SAMPLE_SESSIONS if not ids or sample_id in ids]
    try:
        conversations = load_conversations(data, wanted)
    except (InvalidInputError, OSError, ValueError) as error:
        raise SystemExit(f"--data {data}: {error}; the held-out sample needs: {LOCOMO_FETCH}") from error
    return [sample(conversation, SAMPLE_SESSIONS[conversation.sample_id]) for conversation in conversations]


def _speakers(conversation: LocomoConversation) -> dict[str, str]:
    """Questions name the speakers, pages say "User" and "Assistant": both systems get the names."""
    return {"user_name": conversation.speaker_a, "assistant_name": conversation.speaker_b}


class _Log:
    """A part's JSON-lines log: each finished step, appended and flushed, read back on resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def events(self, kind: str) -> Iterator[dict[str, Any]]:
        return events(self.path, kind)

    def write(self, event: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(event) + "\n")


def run_ours(
    conversation: LocomoConversation,
    part: Path,
    llm_url: str,
    llm_model: str,
    reference_templates: dict[str, str],
    embedder: Embedder | None = None,
) -> None:
    """Ingest session by session (each flushed: embedded and consolidated), then for every question
    retrieve once and answer with both our arms; a session's write id makes a rerun after a stop store it
    once. `reference_templates`: the reference's system and repaired user prompts (`reference_prompts`).
    `embedder`: the configured one (all-MiniLM-L6-v2, as the reference's) unless given."""
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
    answered = {(event["question"], event["arm"]) for event in log.events("answered")}
    sessions: dict[int, list[dict[str, str]]] = {}
    for pair in conversation.pairs:
        sessions.setdefault(pair.session, []).append(reference_pair(pair))
    client, codec = openai_client(config, "the answer bench"), CompletionCodec(config)
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
            arms = [arm for arm in OUR_ARMS if (number, arm) not in answered]
            if not arms:
                continue
            context = memory.retrieve(question.question, top_k=TOP_K)
            request = answer_request(
                context, RELATIONSHIP, style_hint=ANSWER_STYLE_HINT, meta_data=_speakers(conversation)
            )
            # What the model is shown, in rank order: retrieved pages, then the recent ones, newest first.
            shown = [page_key(page) for page in [*request.retrieved, *reversed(request.short_term)]]
            for arm in arms:
                task = answer_task(request)
                if arm != OURS:
                    task = replace(task, messages=reference_layout_messages(request, reference_templates))
                started = time.perf_counter()
                prediction, calls = send_recorded(client, codec, task)
                log.write(
                    {
                        "kind": "answered",
                        "question": number,
                        "arm": arm,
                        "prediction": prediction,
                        "ms": round((time.perf_counter() - started) * 1000, 1),
                        "calls": calls,
                        "shown": shown,
                    }
                )


def reference_prompts(python: Path, out: Path) -> dict[str, str]:
    """The reference's answer prompts (system, published, repaired) from its installed release, kept in
    `out` so our part renders the same words the reference's part answers with."""
    cached = out / "reference_prompts.json"
    if not cached.exists():
        out.mkdir(parents=True, exist_ok=True)
        job = {"prompts_only": True, "answer": {"fixed_prompt": fixed_prompt(ANSWER_STYLE_HINT)}}
        with tempfile.TemporaryDirectory(prefix="answers-prompts-") as scratch:
            try:
                prompts = run_reference_job(python, job, Path(scratch), 300)["prompts"]
            except RuntimeError as error:
                raise SystemExit(f"the reference's prompts: {error}") from error
        cached.write_text(json.dumps(prompts, indent=2), encoding="utf-8")
    return dict(json.loads(cached.read_text(encoding="utf-8")))


def run_reference(
    conversation: LocomoConversation, part: Path, llm_url: str, llm_model: str, python: Path
) -> None:
    """The reference's own ingest and `get_response` with both its prompts, in its interpreter; a part
    stopped before its ingest finished is started again from nothing, one stopped while answering resumes."""
    log = _Log(part / "log.jsonl")
    added = [event["pair"] for event in log.events("added")]
    if added and len(added) < len(conversation.pairs):
        shutil.rmtree(part)
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
            "arms": list(REFERENCE_RUNNER_ARMS),
            "fixed_prompt": fixed_prompt(ANSWER_STYLE_HINT),
        },
    }
    try:
        run_reference_job(python, job, part, PART_TIMEOUT_S)
    except RuntimeError as error:
        raise SystemExit(f"{conversation.sample_id}: {error}") from error


def judge(out: Path, conversations: Sequence[LocomoConversation], llm_url: str, llm_model: str) -> int:
    """Grade every answer not yet graded with the LLM judge (bounded: `eval/judge.py`), appending each
    verdict to `judge.jsonl`; a reply it cannot read is logged as no verdict and left out of the scores.
    Returns how many answers were graded now."""
    log = _Log(out / "judge.jsonl")
    done = {(event["conversation"], event["question"], event["arm"]) for event in log.events("judged")}
    config = MemoryConfig(openai_base_url=llm_url, llm_model=llm_model, llm_timeout_s=600.0)
    grader = OpenAIJudge(config)
    graded = 0
    for conversation in conversations:
        answers = conversation_answers(out, conversation.sample_id)
        for (number, arm), answer in sorted(answers.items()):
            if (conversation.sample_id, number, arm) in done:
                continue
            question = conversation.qa[number]
            try:
                correct: bool | None = grader.is_correct(
                    question.question, str(question.answer), answer["prediction"]
                )
            except LLMError:
                correct = None
            log.write(
                {
                    "kind": "judged",
                    "conversation": conversation.sample_id,
                    "question": number,
                    "arm": arm,
                    "correct": correct,
                }
            )
            graded += 1
    return graded


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("run", "judge", "report"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("MEMORYOS_LOCOMO", "data/locomo10.json")),
        help="the upstream locomo10.json (default: $MEMORYOS_LOCOMO, else data/locomo10.json)",
    )
    parser.add_argument("--llm-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8088/v1")
    parser.add_argument("--llm-model", default="local", help="model name sent to the endpoint")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--conversations", nargs="+", choices=sorted(SAMPLE_SESSIONS), default=None)
    parser.add_argument(
        "--reference-python",
        type=Path,
        help="interpreter with memoryos-pro installed (both systems: ours renders the reference's prompt)",
    )
    args = parser.parse_args(argv)
    conversations = sampled_conversations(args.data, args.conversations)
    if args.action == "report":
        print(markdown(report(args.out, conversations)))
        return
    if not args.llm_url:
        parser.error(f"--llm-url is required to {args.action}")
    if args.action == "judge":
        print(f"judged {judge(args.out, conversations, args.llm_url, args.llm_model)} answers", flush=True)
        return
    if not args.reference_python:
        parser.error("--reference-python is required: ours answers with the reference's prompt too")
    templates = reference_prompts(args.reference_python, args.out)
    for conversation in conversations:
        for system in args.systems:
            part = part_path(args.out, system, conversation.sample_id)
            started = time.perf_counter()
            if system == "memoryos":
                run_ours(conversation, part, args.llm_url, args.llm_model, templates)
            else:
                run_reference(conversation, part, args.llm_url, args.llm_model, args.reference_python)
            print(f"{system} {conversation.sample_id}: {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
