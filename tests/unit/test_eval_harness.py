"""The LoCoMo harness and the plain-cosine baseline, with the hash embedder and the offline LLM."""

import sys
from pathlib import Path

import pytest

from memoryos.config import MemoryConfig
from memoryos.eval.baselines import REFERENCE, plain_cosine, run_reference
from memoryos.eval.harness import evaluate_conversation, pool_recall, slice_conversation
from memoryos.eval.locomo import LocomoConversation, LocomoPair, LocomoQuestion, load_conversations
from memoryos.eval.metrics import RECALL_KS, RecallReport, bleu1, token_f1
from memoryos.eval.results import ConversationResult
from memoryos.llm.offline.backend import OfflineLLM
from tests.support.fakes import HashEmbedder
from tests.support.locomo_data import SKIP_REASON, locomo_source

FILLER = [
    ("Morning! Coffee first.", "Always. Espresso or latte?"),
    ("Traffic downtown was terrible.", "Rush hour bottlenecks again?"),
    ("My printer jammed twice.", "Printers never cooperate."),
    ("Rain tomorrow, apparently.", "Umbrella weather then."),
]
VIOLIN = ("I started violin lessons with Marta on Tuesdays.", "Violin takes patience; Marta sounds kind.")
KAYAK = ("We bought a red kayak for the lake.", "A kayak on the lake sounds lovely.")
BAKERY = ("Pablo opened a bakery selling sourdough.", "Sourdough from Pablo's bakery, yum.")


def _pair(index: int, session: int, exchange: tuple[str, str]) -> LocomoPair:
    return LocomoPair(
        index=index,
        session=session,
        timestamp=f"2023-05-0{session} 10:{index:02d}:00",
        timestamp_raw=f"10:{index:02d} am on {session} May, 2023",
        user_input=exchange[0],
        agent_response=exchange[1],
        dia_ids=[f"D{session}:{2 * index + 1}", f"D{session}:{2 * index + 2}"],
    )


def hand_built() -> LocomoConversation:
    """Three topical pairs among fillers, each in its own session; the questions' answers are known."""
    exchanges = [[FILLER[0], VIOLIN, FILLER[1]], [FILLER[2], KAYAK, FILLER[3]], [BAKERY]]
    pairs = [
        _pair(index, session, exchange)
        for session, session_exchanges in enumerate(exchanges, start=1)
        for index, exchange in enumerate(session_exchanges)
    ]
    questions = [
        LocomoQuestion(
            question="Who teaches the violin lessons?",
            answer="Marta",
            evidence=["D1:3"],
            evidence_norm=["D1:3"],
            category=4,
        ),
        LocomoQuestion(
            question="What did they buy for the lake, and what does Pablo's bakery sell?",
            answer="a red kayak; sourdough",
            evidence=["D2:3", "D3:1"],
            evidence_norm=["D2:3", "D3:1"],
            category=1,
        ),
        LocomoQuestion(question="Unanswerable?", evidence=[], evidence_norm=[], category=5),
    ]
    return LocomoConversation(
        sample_id="hand-built", speaker_a="Ana", speaker_b="Ben", pairs=pairs, qa=questions
    )


def test_recall_on_a_hand_built_conversation(tmp_path: Path) -> None:
    result = evaluate_conversation(hand_built(), tmp_path, MemoryConfig(data_dir=tmp_path), HashEmbedder())

    assert result.questions == 2  # the question without evidence is not scored
    recall = result.recall
    assert recall.by_category[4] == {k: 1.0 for k in RECALL_KS}
    assert recall.by_category[1][1] == 0.5  # one of its two evidence pages can be first, not both
    assert recall.by_category[1][3] == 1.0
    assert recall.overall[1] == 0.75
    assert recall.category_counts == {1: 1, 4: 1}
    assert result.answers is None  # not asked to answer
    assert not any(tmp_path.rglob("*.sqlite")), "the scratch space is erased"


def test_plain_cosine_baseline_scores_the_same_way() -> None:
    result = plain_cosine(hand_built(), HashEmbedder())

    assert result.system == "plain_cosine" and result.skipped is None
    assert result.recall is not None
    assert result.recall.by_category[4][1] == 1.0
    assert result.recall.by_category[1][3] == 1.0
    assert result.questions == 2 and result.pairs == 7


def test_answers_are_scored_and_questions_are_not_stored(tmp_path: Path) -> None:
    llm = OfflineLLM()
    result = evaluate_conversation(
        hand_built(),
        tmp_path,
        MemoryConfig(data_dir=tmp_path),
        HashEmbedder(),
        llm_factory=lambda: llm,
        answer_questions=True,
        keep_details=True,
    )

    assert result.answered == 2  # the question without a gold answer is not asked
    assert result.details is not None and len(result.details) == 2
    for record in result.details:
        assert record.prediction is not None and record.answer is not None
        assert record.f1 == token_f1(record.prediction, record.answer)
        assert record.bleu1 == bleu1(record.prediction, record.answer)
        assert record.llm is not None and record.llm.calls == 1
        assert record.context_tokens > 0 and record.judge is None
    violin = result.details[0]
    assert violin.prediction is not None and "Marta" in violin.prediction
    assert result.answers is not None
    assert result.answers.by_category[4].f1 == violin.f1
    assert result.answers.overall.questions == 2 and result.answers.overall.judge is None
    assert result.llm is not None
    # One answer call per question and nothing else: a stored QA exchange would have been consolidated.
    assert result.llm.questions.calls == 2 and result.llm.calls_per_question == 1.0
    assert result.llm.ingest.calls + result.llm.questions.calls == sum(u.calls for u in llm.usage.values())
    assert result.llm.questions.calls == llm.usage["answer"].calls
    assert result.answer_ms is not None and result.answer_ms.count == 2


@pytest.mark.locomo
@pytest.mark.skipif(locomo_source() is None, reason=SKIP_REASON)
def test_a_slice_of_conv26_has_the_full_schema(tmp_path: Path) -> None:
    source = locomo_source()
    assert source is not None
    (conversation,) = load_conversations(source, ["conv-26"])
    sliced = slice_conversation(conversation, sessions=2, questions=10)
    assert {pair.session for pair in sliced.pairs} == {1, 2}
    known = {dia_id for pair in sliced.pairs for dia_id in pair.dia_ids}
    assert len(sliced.qa) == 10 and all(set(q.evidence_norm) <= known for q in sliced.qa)

    llm = OfflineLLM()
    result = evaluate_conversation(
        sliced, tmp_path, MemoryConfig(data_dir=tmp_path), HashEmbedder(), llm_factory=lambda: llm
    )

    dumped = ConversationResult.model_validate_json(result.model_dump_json())
    assert dumped == result
    assert result.sample_id == "conv-26" and result.pairs == len(sliced.pairs) and result.questions == 10
    assert result.recall.ks == RECALL_KS and result.recall.question_count == 10
    assert all(0.0 <= value <= 1.0 for value in result.recall.overall.values())
    assert list(result.recall.overall.values()) == sorted(result.recall.overall.values())
    assert result.retrieve_ms is not None and result.retrieve_ms.count == 10
    assert result.retrieve_ms.p50_ms <= result.retrieve_ms.p95_ms
    assert result.context_tokens is not None and result.context_tokens.mean > 0
    assert set(result.context_tokens.by_category) == set(result.recall.by_category)
    assert result.llm is not None
    assert result.llm.ingest.calls > 0, "more pairs than short-term capacity: consolidation ran"
    assert result.llm.calls_per_turn == round(result.llm.ingest.calls / result.pairs, 4)
    # No answers asked for: what questions cost is the consolidation their segment visits made due.
    assert llm.usage.get("answer") is None
    assert result.llm_calls == result.llm.ingest.calls + result.llm.questions.calls
    assert result.llm.calls_per_question == round(result.llm.questions.calls / 10, 4)
    assert result.ingest_s > 0 and result.details is None


def test_pooled_recall_equals_one_report_over_all_questions() -> None:
    questions = hand_built().qa[:2]
    rankings = [[["D1:3"]], [["D2:3"], ["x"], ["D3:1"]]]
    first = RecallReport.build(questions[:1], rankings[:1])
    second = RecallReport.build(questions[1:], rankings[1:])

    assert pool_recall([first, second]) == RecallReport.build(questions, rankings)


def test_the_reference_is_reported_skipped_with_the_reason(tmp_path: Path) -> None:
    conversations = [hand_built()]

    (not_requested,) = run_reference(conversations, None)
    (missing,) = run_reference(conversations, tmp_path / "no-python")
    (not_installed,) = run_reference(conversations, Path(sys.executable))

    assert not_requested.system == REFERENCE and not_requested.recall is None
    assert not_requested.skipped is not None and "--reference-python" in not_requested.skipped
    assert missing.skipped == f"no interpreter at {tmp_path / 'no-python'}"
    assert not_installed.skipped == f"memoryos-pro is not installed for {sys.executable}"
