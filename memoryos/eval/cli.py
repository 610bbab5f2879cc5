"""`memoryos eval locomo`: the LoCoMo harness from the command line, with baselines side by side.

Writes `locomo_results.json` (every number, and each question's outcome) and `locomo_results.md` (the
tables) to `--out`. The LLM comes from the configuration (`MEMORYOS_OPENAI_API_KEY`,
`MEMORYOS_OPENAI_BASE_URL`, `MEMORYOS_LLM_MODEL`): with a key or a base URL (a local server needs no
key), questions are answered and scored (F1, BLEU-1, LLM judge); with neither the run is offline and
scores retrieval only. Heavy modules load inside the command, so `memoryos --help` stays fast.
"""

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryos.config import MemoryConfig
    from memoryos.embedding.base import Embedder
    from memoryos.eval.baselines import BaselineResult
    from memoryos.eval.results import ConversationResult

RESULTS_JSON = "locomo_results.json"
RESULTS_MD = "locomo_results.md"
DEFAULT_OUT = Path("locomo_results")
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""Upstream's category numbers; names only as a reading aid, results are keyed by number."""


def register(subparsers: Any) -> None:
    """Add `eval locomo` to the `memoryos` command's subparsers."""
    evaluate = subparsers.add_parser("eval", help="benchmarks", description="Benchmarks.")
    benchmarks = evaluate.add_subparsers(dest="benchmark", required=True)
    locomo = benchmarks.add_parser(
        "locomo",
        help="LoCoMo: evidence recall, and answers scored when an LLM is configured",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    locomo.add_argument(
        "--data", type=Path, required=True, help="locomo10.json, a pairs file, or a directory of pairs files"
    )
    locomo.add_argument("--conversations", nargs="+", default=None, help="sample ids (default: all)")
    locomo.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    locomo.add_argument("--top-k", type=int, default=10, help="pages retrieved per question (default 10)")
    locomo.add_argument("--sessions", type=int, default=None, help="only the first N sessions (quick runs)")
    locomo.add_argument("--questions", type=int, default=None, help="only the first N questions (quick runs)")
    locomo.add_argument(
        "--reference-python",
        type=Path,
        default=None,
        help="interpreter with memoryos-pro installed, to run the reference baseline",
    )
    locomo.add_argument("--no-baselines", action="store_true", help="skip plain cosine and the reference")
    locomo.add_argument("--judge-model", default=None, help="LLM judge model (default: MEMORYOS_LLM_MODEL)")
    locomo.set_defaults(handler=cmd_locomo)


def cmd_locomo(args: argparse.Namespace) -> None:
    from memoryos.config import MemoryConfig
    from memoryos.errors import InvalidInputError
    from memoryos.eval.harness import slice_conversation
    from memoryos.eval.locomo import load_conversations
    from memoryos.eval.metrics import RECALL_KS

    if args.top_k < 1:
        raise InvalidInputError("top_k", f"must be at least 1, got {args.top_k}")
    ks = sorted({k for k in RECALL_KS if k <= args.top_k} | {args.top_k})
    config = MemoryConfig()
    conversations = [
        slice_conversation(c, args.sessions, args.questions)
        for c in load_conversations(args.data, args.conversations)
    ]
    results = run_locomo(conversations, config, ks, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / RESULTS_JSON).write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
    (args.out / RESULTS_MD).write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    print(f"wrote {args.out / RESULTS_JSON} and {args.out / RESULTS_MD}", file=sys.stderr)


def _embedder(config: "MemoryConfig") -> "Embedder":
    """The run's one embedder, shared by our engine and plain cosine, with its text cache turned off.

    Both systems embed the same questions, and plain cosine runs second: through a cache it would get a
    question's vector from our engine's encode and time a dictionary lookup against our real encode
    (docs/evaluation.md). Without the cache, every question's latency in both systems is one real query
    encode plus the search: the cost of a question a system has not seen, which is what the benchmark
    asks (the reference, in its own process, encodes each question itself). Off for both rather than
    bypassed in the baseline alone, so a question our engine has seen before (LoCoMo repeats a few) is not
    served from the cache either. The price is untimed: plain cosine encodes the pairs again, and a fact
    extracted twice is encoded twice.
    """
    from memoryos.embedding.shared import shared_embedder

    return shared_embedder(config.model_copy(update={"embedding_cache_size": 0}))


def run_locomo(
    conversations: list[Any], config: "MemoryConfig", ks: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """Our engine on every conversation, then the baselines; everything as one JSON-ready dict."""
    from memoryos.eval.baselines import PLAIN_COSINE, REFERENCE, plain_cosine, run_reference
    from memoryos.eval.harness import evaluate_conversation
    from memoryos.eval.judge import OpenAIJudge
    from memoryos.llm import create_llm, llm_endpoint_configured

    embedder = _embedder(config)
    answering = llm_endpoint_configured(config)
    judge = OpenAIJudge(config, args.judge_model) if answering else None
    ours: list[ConversationResult] = []
    for conversation in conversations:
        with tempfile.TemporaryDirectory(prefix="memoryos-locomo-") as scratch:
            scratch_config = config.model_copy(update={"data_dir": Path(scratch)})
            result = evaluate_conversation(
                conversation,
                Path(scratch),
                scratch_config,
                embedder=embedder,
                llm_factory=lambda: create_llm(config),
                ks=ks,
                answer_questions=answering,
                judge=judge,
                keep_details=True,
            )
        ours.append(result)
        print(
            f"{conversation.sample_id}: recall {_brief(result.recall.overall)}", file=sys.stderr, flush=True
        )
    baselines: dict[str, list[BaselineResult]] = {}
    if not args.no_baselines:
        baselines[PLAIN_COSINE] = [plain_cosine(c, embedder, ks) for c in conversations]
        baselines[REFERENCE] = run_reference(conversations, args.reference_python, ks)
    return {
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "data": str(args.data),
        "conversations": [c.sample_id for c in conversations],
        "sessions": args.sessions,
        "question_limit": args.questions,
        "ks": ks,
        "embedding_model": embedder.name,
        "llm": {
            "configured": answering,
            "model": config.llm_model if answering else None,
            "base_url": config.openai_base_url if answering else None,
            "judge_model": judge.model if judge else None,
        },
        "memoryos": [r.model_dump(mode="json") for r in ours],
        "baselines": {name: [r.model_dump(mode="json") for r in rows] for name, rows in baselines.items()},
    }


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def _brief(overall: dict[int, float]) -> str:
    return " ".join(f"@{k}={v:.3f}" for k, v in overall.items())


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def markdown(results: dict[str, Any]) -> str:
    """The tables: recall@k by category for each system; answers, context and LLM cost by category for
    ours; cost and latency by conversation for every system."""
    from memoryos.eval.harness import pool_recall
    from memoryos.eval.metrics import RecallReport

    ks = results["ks"]
    llm = results["llm"]
    lines = [
        f"LoCoMo on {', '.join(results['conversations'])} ({results['data']}); embeddings {results['embedding_model']}; "
        + (
            f"LLM {llm['model']}, judge {llm['judge_model']}."
            if llm["configured"]
            else "offline (no LLM answers)."
        ),
        f"Machine: {results['machine']}.",
        "",
        "Evidence recall@k (questions with evidence, pooled over conversations):",
        "",
        "| system | category | questions | " + " | ".join(f"recall@{k}" for k in ks) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in ks) + " |",
    ]
    systems = {"memoryos": results["memoryos"], **results["baselines"]}
    for name, rows in systems.items():
        reports = [RecallReport.model_validate(r["recall"]) for r in rows if r.get("recall")]
        if not reports:
            reason = next((r.get("skipped") for r in rows if r.get("skipped")), "no results")
            lines.append(f"| {name} | skipped: {reason} | | " + " | ".join("" for _ in ks) + " |")
            continue
        pooled = pool_recall(reports)
        lines.append(
            f"| {name} | all | {pooled.question_count} | "
            + " | ".join(_fmt(pooled.overall[k]) for k in ks)
            + " |"
        )
        for category, by_k in pooled.by_category.items():
            lines.append(
                f"| {name} | {category} {CATEGORY_NAMES.get(category, '')} | {pooled.category_counts[category]} | "
                + " | ".join(_fmt(by_k[k]) for k in ks)
                + " |"
            )
    lines += ["", *_category_table(results["memoryos"]), "", *_cost_table(systems)]
    return "\n".join(lines) + "\n"


def _category_table(rows: list[dict[str, Any]]) -> list[str]:
    """Ours by category, from each question's record: answer scores (questions with a gold answer),
    context tokens and LLM cost per question."""
    records = [record for row in rows for record in row.get("details") or []]
    by_category: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        by_category.setdefault(record["category"], []).append(record)
    lines = [
        "memoryos by category (F1, BLEU-1 and judge over answered questions; context tokens over all):",
        "",
        "| category | questions | answered | F1 | BLEU-1 | judge | context tokens | LLM calls/question | LLM tokens/question |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for category, group in sorted(by_category.items()):
        answered = [r for r in group if r.get("prediction") is not None]
        judged = [r["judge"] for r in answered if r.get("judge") is not None]
        usage = [r["llm"] for r in group if r.get("llm")]

        def mean(values: list[float]) -> float | None:
            return sum(values) / len(values) if values else None

        lines.append(
            f"| {category} {CATEGORY_NAMES.get(category, '')} | {len(group)} | {len(answered)} "
            f"| {_fmt(mean([r['f1'] for r in answered]))} | {_fmt(mean([r['bleu1'] for r in answered]))} "
            f"| {_fmt(mean([float(j) for j in judged]))} | {_fmt(mean([r['context_tokens'] for r in group]), 0)} "
            f"| {_fmt(mean([u['calls'] for u in usage]), 2)} "
            f"| {_fmt(mean([u['prompt_tokens'] + u['completion_tokens'] for u in usage]), 0)} |"
        )
    return lines


def _cost_table(systems: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = [
        "Cost and latency by conversation (ms; LLM calls and tokens of the system, judge excluded):",
        "",
        "| system | conversation | pairs | questions | add/ingest per turn | LLM calls/turn | LLM tokens/turn "
        "| LLM calls/question | LLM tokens/question | retrieve p50 / p95 | answer p50 / p95 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, rows in systems.items():
        for row in rows:
            if row.get("skipped"):
                continue
            llm = row.get("llm") or {}
            retrieve = row.get("retrieve_ms") or {}
            answer = row.get("answer_ms") or {}
            per_turn = row.get("ingest_ms_per_turn")
            if per_turn is None and row.get("add_ms"):
                per_turn = row["add_ms"]["mean_ms"]
            lines.append(
                f"| {name} | {row['sample_id']} | {row['pairs']} | {row['questions']} | {_fmt(per_turn, 1)} "
                f"| {_fmt(llm.get('calls_per_turn'), 2)} | {_fmt(llm.get('tokens_per_turn'), 0)} "
                f"| {_fmt(llm.get('calls_per_question'), 2)} | {_fmt(llm.get('tokens_per_question'), 0)} "
                f"| {_fmt(retrieve.get('p50_ms'), 1)} / {_fmt(retrieve.get('p95_ms'), 1)} "
                f"| {_fmt(answer.get('p50_ms'), 0)} / {_fmt(answer.get('p95_ms'), 0)} |"
            )
    return lines
