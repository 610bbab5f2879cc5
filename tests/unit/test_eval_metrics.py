import math

import pytest

from memoryos.errors import InvalidInputError
from memoryos.eval.locomo import LocomoPair, LocomoQuestion
from memoryos.eval.metrics import (
    RecallReport,
    bleu1,
    evidence_recall_at_k,
    page_dia_ids,
    ranked_dia_ids,
    token_f1,
)

RANKED = [["D1:1", "D1:2"], ["D1:3", "D1:4"], ["D3:1"], ["D2:4", "D2:5"]]


def _pair(index: int, user: str, assistant: str, dia_ids: list[str]) -> LocomoPair:
    return LocomoPair(
        index=index,
        session=1,
        timestamp="2023-05-08 13:56:00",
        timestamp_raw="1:56 pm on 8 May, 2023",
        user_input=user,
        agent_response=assistant,
        dia_ids=dia_ids,
    )


def _question(category: int, evidence_norm: list[str]) -> LocomoQuestion:
    return LocomoQuestion(
        question="q", answer="a", evidence=evidence_norm, evidence_norm=evidence_norm, category=category
    )


@pytest.mark.parametrize(("k", "expected"), [(1, 0.0), (3, 0.5), (4, 1.0), (10, 1.0)])
def test_recall_counts_evidence_found_in_the_top_k_pages(k: int, expected: float) -> None:
    assert evidence_recall_at_k(["D1:3", "D2:5"], RANKED, k) == expected


def test_recall_counts_a_repeated_evidence_id_once() -> None:
    assert evidence_recall_at_k(["D1:3", "D1:3", "D2:5"], RANKED, 3) == 0.5


def test_recall_rejects_questions_without_evidence_and_nonpositive_k() -> None:
    with pytest.raises(InvalidInputError, match="evidence_ids"):
        evidence_recall_at_k([], RANKED, 3)
    with pytest.raises(InvalidInputError, match="k"):
        evidence_recall_at_k(["D1:3"], RANKED, 0)


def test_pages_map_back_to_dia_ids_by_exact_stripped_text() -> None:
    """The engine stores texts stripped; LoCoMo has a leading space in conv-41."""
    pairs = [
        _pair(0, "hi", "hello", ["D1:1", "D1:2"]),
        _pair(1, "(no message)", "hey", ["D2:1"]),
        _pair(2, "hi", "hello", ["D3:1", "D3:2"]),
    ]
    index = page_dia_ids(pairs)

    assert index[("hi", "hello")] == ["D1:1", "D1:2", "D3:1", "D3:2"]
    retrieved = [pairs[1], _pair(9, " hi ", "hello", ["D9:9"]), _pair(10, "bye", "hello", ["D9:10"])]
    assert ranked_dia_ids(retrieved, index) == [["D2:1"], ["D1:1", "D1:2", "D3:1", "D3:2"], []]


def test_report_averages_per_category_and_overall_over_questions_with_evidence() -> None:
    questions = [
        _question(1, ["D1:3", "D2:5"]),  # 0 at k=1, 0.5 at k=3, 1 from k=4
        _question(1, ["D1:1"]),  # 1 everywhere
        _question(4, ["D3:1"]),  # 0 until k=3
        _question(5, []),  # left out
    ]
    report = RecallReport.build(questions, [RANKED] * len(questions), ks=(1, 3, 5))

    assert report.by_category == {1: {1: 0.5, 3: 0.75, 5: 1.0}, 4: {1: 0.0, 3: 1.0, 5: 1.0}}
    assert report.overall == pytest.approx({1: 1 / 3, 3: 2.5 / 3, 5: 1.0})
    assert report.category_counts == {1: 2, 4: 1}
    assert (report.question_count, report.without_evidence) == (3, 1)


def test_report_defaults_to_the_standard_cutoffs_and_checks_lengths() -> None:
    assert RecallReport.build([_question(2, ["D1:1"])], [RANKED]).ks == (1, 3, 5, 7, 10)
    with pytest.raises(InvalidInputError, match="rankings"):
        RecallReport.build([_question(2, ["D1:1"])], [])


@pytest.mark.parametrize(
    ("prediction", "answer", "expected"),
    [
        ("The cat sat", "cat sat on mat", 2 / 3),  # precision 1, recall 1/2
        ("Paris!", "paris", 1.0),
        ("a dog, a dog", "the dog", 2 / 3),  # multiset: one shared "dog"
        ("blue", "red", 0.0),
        ("The", "an", 1.0),  # both normalize to nothing
        ("", "red", 0.0),
    ],
)
def test_token_f1(prediction: str, answer: str, expected: float) -> None:
    assert token_f1(prediction, answer) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("prediction", "answer", "expected"),
    [
        ("cat sat", "cat sat on the mat", math.exp(-1)),  # precision 1, brevity penalty e^(1-4/2)
        ("cat cat cat dog", "cat", 0.25),  # clipped: one "cat" counts
        ("7 May 2023.", "7 may 2023", 1.0),
        ("blue", "red", 0.0),
        ("a", "the", 1.0),
        ("red", "", 0.0),
    ],
)
def test_bleu1(prediction: str, answer: str, expected: float) -> None:
    assert bleu1(prediction, answer) == pytest.approx(expected)
