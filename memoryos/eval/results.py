"""What a LoCoMo run reports: latency, LLM cost, answer scores and one result per conversation.

Pydantic models, so the harness's JSON output, the baselines and the CLI's tables share one schema that a
test can round-trip.
"""

import statistics
from collections.abc import Sequence

from pydantic import BaseModel

from memoryos.eval.metrics import RecallReport
from memoryos.llm.base import OperationUsage


class LatencySummary(BaseModel):
    """Milliseconds of one kind of call: mean, median and 95th percentile (nearest rank)."""

    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> "LatencySummary":
        if not samples_ms:
            return cls(count=0, mean_ms=0.0, p50_ms=0.0, p95_ms=0.0)
        ordered = sorted(samples_ms)
        return cls(
            count=len(ordered),
            mean_ms=round(statistics.fmean(ordered), 3),
            p50_ms=round(statistics.median(ordered), 3),
            p95_ms=round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        )


class UsageTotals(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def between(cls, before: dict[str, OperationUsage], after: dict[str, OperationUsage]) -> "UsageTotals":
        """What the LLM spent between two `usage` snapshots, all operations together."""
        zero = OperationUsage()
        return cls(
            calls=sum(after[op].calls - before.get(op, zero).calls for op in after),
            prompt_tokens=sum(after[op].prompt_tokens - before.get(op, zero).prompt_tokens for op in after),
            completion_tokens=sum(
                after[op].completion_tokens - before.get(op, zero).completion_tokens for op in after
            ),
        )


class LLMCost(BaseModel):
    """The system's LLM calls and tokens while ingesting and while answering; the judge's on their own."""

    ingest: UsageTotals
    questions: UsageTotals
    judge: UsageTotals
    calls_per_turn: float
    tokens_per_turn: float
    calls_per_question: float
    tokens_per_question: float


class CategoryAnswers(BaseModel):
    """Mean answer scores over questions with a gold answer; `judge` is None without a judge."""

    questions: int
    f1: float
    bleu1: float
    judge: float | None = None
    judged: int = 0


class AnswerReport(BaseModel):
    overall: CategoryAnswers
    """Over `SCORED_CATEGORIES`."""
    by_category: dict[int, CategoryAnswers]
    answer_failures: int = 0
    """Answers the LLM failed to give (after its retries); they score 0."""
    judge_failures: int = 0
    """Judge calls that failed; those answers are left out of the judge mean only."""


class ContextTokens(BaseModel):
    """Estimated tokens of the rendered answer prompt (`estimate_tokens`), mean per question."""

    mean: float
    by_category: dict[int, float]


class PrefixShare(BaseModel):
    """One kind of prompt prefix, in estimated tokens: its mean, its share of the prompt averaged over
    prompts, and its share of all prompt tokens together (the token-weighted share, what a cache saves)."""

    tokens_mean: float
    share_mean: float
    share_weighted: float

    @classmethod
    def of(cls, prefix_tokens: Sequence[int], prompt_tokens: Sequence[int]) -> "PrefixShare":
        """From parallel lists of prefix and whole-prompt tokens, one entry per prompt."""
        if not prefix_tokens:
            return cls(tokens_mean=0.0, share_mean=0.0, share_weighted=0.0)
        pairs = list(zip(prefix_tokens, prompt_tokens, strict=True))
        return cls(
            tokens_mean=round(statistics.fmean(prefix_tokens), 1),
            share_mean=round(statistics.fmean(p / t if t else 0.0 for p, t in pairs), 4),
            share_weighted=round(sum(prefix_tokens) / max(1, sum(prompt_tokens)), 4),
        )


class PromptPrefix(BaseModel):
    """How much of the answer prompt a provider prefix cache (vLLM, OpenAI) can reuse.

    `stable` is the prompt's stable part (`prompts.AnswerPrompt.stable`: instructions and profile), the
    part the layout keeps identical across a user's requests, over every question. `shared` is what two
    consecutive questions' prompts really have in common at their start, over every question but the
    first: the stable part plus however far the volatile part happens to agree."""

    stable: PrefixShare
    shared: PrefixShare


class QuestionRecord(BaseModel):
    """One question's outcome, kept when `keep_details` is set."""

    question: str
    category: int
    answer: str | None
    evidence: list[str]
    retrieved_dia_ids: list[list[str]]
    context_tokens: int
    stable_prefix_tokens: int
    """Estimated tokens of the answer prompt's stable part (its system message)."""
    shared_prefix_tokens: int | None
    """Estimated tokens the answer prompt shares at its start with the previous question's; None for the
    conversation's first question."""
    retrieve_ms: float
    prediction: str | None = None
    f1: float | None = None
    bleu1: float | None = None
    judge: bool | None = None
    answer_ms: float | None = None
    llm: UsageTotals | None = None


class ConversationResult(BaseModel):
    sample_id: str
    pairs: int
    questions: int
    """Questions with evidence: the ones recall is computed over."""
    ingest_s: float
    retrieve_ms_mean: float
    recall: RecallReport
    llm_calls: int
    """All LLM calls of the system while ingesting and while asking, judge excluded."""
    system: str = "memoryos"
    answered: int = 0
    """Questions answered by the LLM (those with a gold answer, when answering)."""
    ingest_ms_per_turn: float = 0.0
    retrieve_ms: LatencySummary | None = None
    answer_ms: LatencySummary | None = None
    context_tokens: ContextTokens | None = None
    prompt_prefix: PromptPrefix | None = None
    llm: LLMCost | None = None
    answers: AnswerReport | None = None
    details: list[QuestionRecord] | None = None
