"""The LoCoMo harness: ingest a conversation into a fresh space, ask every question, score it.

Each conversation goes into its own space (user id = sample id) under a scratch directory, session by
session as one `add_memories` batch each, as an agent would store a day's conversation; each session is
flushed (embedded and consolidated, also in the background ingest mode) before the next, so a run does
not depend on how the scheduler happened to batch, and ingest time includes that work. Each question is
retrieved once (top `max(ks)` pages); that one retrieval is scored for evidence recall and, when
`answer_questions` is set, handed to the LLM as `Memoryos.get_response` would, except that the question
and answer are not stored: questions asked later must not find earlier questions instead of the
conversation. Answers are scored with token F1, BLEU-1 and, given a judge, the mem0 LLM-judge label.

LLM cost is read from the LLM's usage counters: the growth during ingestion is the cost of memory
(per turn), the growth while asking is the cost of a question: the answer, and the consolidation that
retrieval's segment visits make due. Judge calls are counted apart.

Each answer prompt is also measured for a provider prefix cache: its stable part's tokens, and the tokens
it shares at its start with the previous question's prompt (`PromptPrefix`).
"""

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.errors import LLMError
from memoryos.eval.judge import AnswerJudge
from memoryos.eval.locomo import LocomoConversation, LocomoQuestion
from memoryos.eval.metrics import RECALL_KS, RecallReport, bleu1, page_dia_ids, ranked_dia_ids, token_f1
from memoryos.eval.results import (
    AnswerReport,
    CategoryAnswers,
    ContextTokens,
    ConversationResult,
    LatencySummary,
    LLMCost,
    PrefixShare,
    PromptPrefix,
    QuestionRecord,
    UsageTotals,
)
from memoryos.facade.memoryos import Memoryos
from memoryos.llm import prompts
from memoryos.llm.base import AnswerRequest, MemoryLLM, OperationUsage
from memoryos.llm.usage import estimate_tokens
from memoryos.planning.generation import answer_request
from memoryos.types import RetrievedContext

ANSWER_STYLE_HINT = (
    "answer the question in a short phrase, a few words taken from the memories, with no explanation; "
    "for a time or date, give the one the memories' timestamps imply"
)
"""LoCoMo gold answers are short phrases; token F1 and BLEU-1 punish every extra word."""

SCORED_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)
"""Categories in the overall answer scores, as in the MemoryOS and mem0 papers: category 5 (adversarial)
is reported on its own row only, its gold answer being mostly absent."""


def slice_conversation(
    conversation: LocomoConversation, sessions: int | None = None, questions: int | None = None
) -> LocomoConversation:
    """The first `sessions` sessions and the first `questions` questions answerable from them.

    A question is kept when some of its evidence lies in the kept pairs; its `evidence_norm` is cut to
    those, so recall on the slice is recall on what the slice holds. For quick runs and tests.
    """
    kept_sessions = sorted({pair.session for pair in conversation.pairs})[:sessions]
    pairs = [pair for pair in conversation.pairs if pair.session in kept_sessions]
    known = {dia_id for pair in pairs for dia_id in pair.dia_ids}
    kept: list[LocomoQuestion] = []
    for question in conversation.qa:
        evidence = [dia_id for dia_id in question.evidence_norm if dia_id in known]
        if evidence:
            kept.append(question.model_copy(update={"evidence_norm": evidence}))
    return conversation.model_copy(update={"pairs": pairs, "qa": kept[:questions]})


def ingest_conversation(memory: Memoryos, conversation: LocomoConversation) -> None:
    """Store the conversation session by session, each embedded and consolidated before the next, so what
    is stored does not depend on how the scheduler happened to batch."""
    sessions: dict[int, list[dict[str, str]]] = {}
    for pair in conversation.pairs:
        sessions.setdefault(pair.session, []).append(
            {
                "user_input": pair.user_input,
                "agent_response": pair.agent_response,
                "timestamp": pair.timestamp,
            }
        )
    for turns in sessions.values():
        memory.add_memories(turns)
        memory.flush()


def evaluate_conversation(
    conversation: LocomoConversation,
    data_dir: Path,
    config: MemoryConfig,
    embedder: Embedder | None = None,
    llm_factory: Callable[[], MemoryLLM] | None = None,
    ks: Sequence[int] = RECALL_KS,
    *,
    answer_questions: bool = False,
    judge: AnswerJudge | None = None,
    keep_details: bool = False,
) -> ConversationResult:
    """Evidence recall@k of our retrieval on one conversation (questions without evidence are skipped
    for recall) and, with `answer_questions`, answers scored per category. The space is erased after."""
    memory = Memoryos.from_config(
        conversation.sample_id,
        config.model_copy(update={"data_dir": data_dir}),
        embedder=embedder,
        llm=llm_factory() if llm_factory else None,
    )
    with memory:
        usage_start = memory.llm.usage
        started = time.perf_counter()
        ingest_conversation(memory, conversation)
        ingest_s = time.perf_counter() - started
        usage_ingested = memory.llm.usage
        judge_before = judge.usage if judge else OperationUsage()
        asker = _Asker(memory, conversation, max(ks), judge)
        records = [
            asker.ask(question, answer_questions and question.answer is not None)
            for question in conversation.qa
            if question.evidence_norm or (answer_questions and question.answer is not None)
        ]
        usage_end = memory.llm.usage
        judge_after = judge.usage if judge else OperationUsage()
        memory.forget_user()

    with_evidence = [record for record in records if record.evidence]
    answered = [record for record in records if record.prediction is not None]
    ingest = UsageTotals.between(usage_start, usage_ingested)
    asking = UsageTotals.between(usage_ingested, usage_end)
    judging = UsageTotals(
        calls=judge_after.calls - judge_before.calls,
        prompt_tokens=judge_after.prompt_tokens - judge_before.prompt_tokens,
        completion_tokens=judge_after.completion_tokens - judge_before.completion_tokens,
    )
    pairs = max(1, len(conversation.pairs))
    asked = max(1, len(records))
    retrieve = LatencySummary.of([record.retrieve_ms for record in with_evidence])
    return ConversationResult(
        sample_id=conversation.sample_id,
        pairs=len(conversation.pairs),
        questions=len(with_evidence),
        ingest_s=ingest_s,
        retrieve_ms_mean=retrieve.mean_ms,
        recall=RecallReport.build(
            [_as_question(record) for record in with_evidence],
            [record.retrieved_dia_ids for record in with_evidence],
            ks=ks,
        ),
        llm_calls=ingest.calls + asking.calls,
        answered=len(answered),
        ingest_ms_per_turn=round(ingest_s * 1000 / pairs, 3),
        retrieve_ms=retrieve,
        answer_ms=LatencySummary.of([r.answer_ms for r in answered if r.answer_ms is not None])
        if answered
        else None,
        context_tokens=_context_tokens(records),
        prompt_prefix=_prompt_prefix(records),
        llm=LLMCost(
            ingest=ingest,
            questions=asking,
            judge=judging,
            calls_per_turn=round(ingest.calls / pairs, 4),
            tokens_per_turn=round(ingest.tokens / pairs, 2),
            calls_per_question=round(asking.calls / asked, 4),
            tokens_per_question=round(asking.tokens / asked, 2),
        ),
        answers=_answer_report(answered, asker) if answered else None,
        details=records if keep_details else None,
    )


class _Asker:
    """Retrieves, and optionally answers and judges, one question at a time against one memory."""

    def __init__(
        self, memory: Memoryos, conversation: LocomoConversation, top_k: int, judge: AnswerJudge | None
    ) -> None:
        self.memory = memory
        self.top_k = top_k
        self.judge = judge
        self.index = page_dia_ids(conversation.pairs)
        self.speakers = {"user_name": conversation.speaker_a, "assistant_name": conversation.speaker_b}
        self.answer_failures = 0
        self.judge_failures = 0
        self.previous_prompt: list[prompts.ChatMessage] | None = None

    def ask(self, question: LocomoQuestion, answer: bool) -> QuestionRecord:
        """Retrieve (and answer); `llm` is what the system spent meanwhile: the answer, and any
        consolidation the retrieval's segment visits made due (the engine runs it on its next read)."""
        usage_before = self.memory.llm.usage
        started = time.perf_counter()
        context = self.memory.retrieve(question.question, top_k=self.top_k)
        retrieve_ms = (time.perf_counter() - started) * 1000
        request = self._request(context)
        prompt = prompts.answer_prompt(request)
        messages = prompt.messages()
        record = QuestionRecord(
            question=question.question,
            category=question.category,
            answer=question.answer,
            evidence=question.evidence_norm,
            retrieved_dia_ids=ranked_dia_ids(context.retrieved_pages, self.index),
            context_tokens=sum(estimate_tokens(m["content"]) for m in messages),
            stable_prefix_tokens=estimate_tokens(prompt.stable),
            shared_prefix_tokens=None
            if self.previous_prompt is None
            else shared_prefix_tokens(self.previous_prompt, messages),
            retrieve_ms=round(retrieve_ms, 3),
        )
        if answer and question.answer is not None:
            self._answer(record, request, question.answer)
        self.previous_prompt = messages
        record.llm = UsageTotals.between(usage_before, self.memory.llm.usage)
        return record

    def _request(self, context: RetrievedContext) -> AnswerRequest:
        """The request `Memoryos.get_response` builds, with the speakers' names as conversation metadata:
        LoCoMo questions name them, while stored pages say only "User" and "Assistant"."""
        return answer_request(context, style_hint=ANSWER_STYLE_HINT, meta_data=self.speakers)

    def _answer(self, record: QuestionRecord, request: AnswerRequest, gold: str) -> None:
        started = time.perf_counter()
        try:
            prediction = self.memory.llm.answer(request)
        except LLMError:
            self.answer_failures += 1
            prediction = ""
        record.answer_ms = round((time.perf_counter() - started) * 1000, 3)
        record.prediction = prediction
        record.f1 = token_f1(prediction, gold)
        record.bleu1 = bleu1(prediction, gold)
        if self.judge is not None:
            try:
                record.judge = self.judge.is_correct(record.question, gold, prediction)
            except LLMError:
                self.judge_failures += 1


def _as_question(record: QuestionRecord) -> LocomoQuestion:
    return LocomoQuestion(
        question=record.question,
        answer=record.answer,
        evidence=record.evidence,
        evidence_norm=record.evidence,
        category=record.category,
    )


def _context_tokens(records: Sequence[QuestionRecord]) -> ContextTokens:
    by_category: dict[int, list[int]] = {}
    for record in records:
        by_category.setdefault(record.category, []).append(record.context_tokens)
    every = [tokens for values in by_category.values() for tokens in values]
    return ContextTokens(
        mean=round(statistics.fmean(every), 1) if every else 0.0,
        by_category={c: round(statistics.fmean(v), 1) for c, v in sorted(by_category.items())},
    )


def shared_prefix_tokens(
    previous: Sequence[prompts.ChatMessage], current: Sequence[prompts.ChatMessage]
) -> int:
    """Estimated tokens at the start of `current` identical to `previous`: what a prefix cache holding
    `previous` reuses. Messages are compared in order, and the first difference ends the prefix, since
    a cache matches the one token sequence the chat template makes of them."""
    tokens = 0
    for before, now in zip(previous, current, strict=False):
        if before["role"] != now["role"]:
            break
        common = _common_prefix(before["content"], now["content"])
        tokens += estimate_tokens(common)
        if common != before["content"] or common != now["content"]:
            break
    return tokens


def _common_prefix(first: str, second: str) -> str:
    pairs = enumerate(zip(first, second, strict=False))
    length = next((i for i, (a, b) in pairs if a != b), min(len(first), len(second)))
    return first[:length]


def _prompt_prefix(records: Sequence[QuestionRecord]) -> PromptPrefix:
    followers = [record for record in records if record.shared_prefix_tokens is not None]
    return PromptPrefix(
        stable=PrefixShare.of(
            [record.stable_prefix_tokens for record in records], [record.context_tokens for record in records]
        ),
        shared=PrefixShare.of(
            [record.shared_prefix_tokens or 0 for record in followers],
            [record.context_tokens for record in followers],
        ),
    )


def _category_answers(records: Sequence[QuestionRecord]) -> CategoryAnswers:
    judged = [record.judge for record in records if record.judge is not None]
    return CategoryAnswers(
        questions=len(records),
        f1=statistics.fmean(r.f1 or 0.0 for r in records) if records else 0.0,
        bleu1=statistics.fmean(r.bleu1 or 0.0 for r in records) if records else 0.0,
        judge=sum(judged) / len(judged) if judged else None,
        judged=len(judged),
    )


def _answer_report(answered: Sequence[QuestionRecord], asker: _Asker) -> AnswerReport:
    by_category: dict[int, list[QuestionRecord]] = {}
    for record in answered:
        by_category.setdefault(record.category, []).append(record)
    return AnswerReport(
        overall=_category_answers([r for r in answered if r.category in SCORED_CATEGORIES]),
        by_category={c: _category_answers(rs) for c, rs in sorted(by_category.items())},
        answer_failures=asker.answer_failures,
        judge_failures=asker.judge_failures,
    )


def pool_recall(reports: Sequence[RecallReport]) -> RecallReport:
    """Recall over the questions of several conversations together: each conversation's means weighted
    by its question counts, overall and per category (the same as building one report from all)."""
    ks = reports[0].ks if reports else tuple(RECALL_KS)
    total = sum(report.question_count for report in reports)
    counts: dict[int, int] = {}
    for report in reports:
        for category, count in report.category_counts.items():
            counts[category] = counts.get(category, 0) + count
    return RecallReport(
        ks=ks,
        overall={
            k: sum(r.overall[k] * r.question_count for r in reports) / total if total else 0.0 for k in ks
        },
        by_category={
            category: {
                k: sum(
                    r.by_category[category][k] * r.category_counts[category]
                    for r in reports
                    if category in r.by_category
                )
                / counts[category]
                for k in ks
            }
            for category in sorted(counts)
        },
        question_count=total,
        category_counts=dict(sorted(counts.items())),
        without_evidence=sum(report.without_evidence for report in reports),
    )
