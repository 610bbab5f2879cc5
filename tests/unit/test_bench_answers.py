"""The answer-quality bench (`bench/quality/answers.py`): the sample, the paired interval and the report,
on hand-written part logs."""

import json
from pathlib import Path

import pytest

from bench.quality.answers import gold_recall, paired_interval, report, sample
from memoryos.eval.locomo import LocomoConversation, LocomoPair, LocomoQuestion


def _pair(session: int, index: int) -> LocomoPair:
    return LocomoPair(
        index=index,
        session=session,
        user_input=f"u{session}.{index}",
        agent_response=f"a{session}.{index}",
        timestamp="2023-05-07 10:00:00",
        timestamp_raw="10:00 am on 7 May, 2023",
        dia_ids=[f"D{session}:{index + 1}"],
    )


def _question(text: str, answer: str | None, evidence: list[str], category: int) -> LocomoQuestion:
    return LocomoQuestion(
        question=text, answer=answer, evidence=evidence, evidence_norm=evidence, category=category
    )


def conversation() -> LocomoConversation:
    return LocomoConversation(
        sample_id="conv-x",
        speaker_a="Ana",
        speaker_b="Ben",
        pairs=[_pair(session, index) for session in (1, 2, 3) for index in range(2)],
        qa=[
            _question("inside", "Lisbon", ["D1:1", "D2:2"], 4),
            _question("partly after", "Porto", ["D2:1", "D3:1"], 1),
            _question("no answer", None, ["D1:1"], 5),
            _question("adversarial with answer", "x", ["D1:1"], 5),
            _question("no evidence", "y", [], 2),
            _question("temporal", "May 2023", ["D2:2"], 2),
        ],
    )


def test_the_sample_keeps_questions_answerable_from_the_kept_sessions_only() -> None:
    kept = sample(conversation(), sessions=2)

    assert {pair.session for pair in kept.pairs} == {1, 2}
    # Evidence partly in session 3, no gold answer, category 5 and no evidence are all left out.
    assert [question.question for question in kept.qa] == ["inside", "temporal"]


def test_equal_differences_give_a_point_interval_and_noise_an_interval_around_zero() -> None:
    assert paired_interval([0.25] * 30) == (0.25, 0.25)
    low, high = paired_interval([1.0, -1.0] * 40)
    assert -1.0 < low < 0.0 < high < 1.0
    assert paired_interval([0.0] * 59 + [1.0])[0] == 0.0  # one win in 60 does not clear zero
    with pytest.raises(ValueError, match="differences"):
        paired_interval([])


def _log(path: Path, events: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")


def _usage(calls: int, prompt: int, completion: int) -> dict[str, int]:
    return {"calls": calls, "prompt_tokens": prompt, "completion_tokens": completion}


def test_the_report_compares_the_questions_both_systems_answered(tmp_path: Path) -> None:
    kept = sample(conversation(), sessions=2)
    _log(
        tmp_path / "memoryos" / "conv-x" / "log.jsonl",
        [
            {"kind": "session", "session": 1, "pairs": 2, "llm": _usage(0, 0, 0)},
            {"kind": "session", "session": 2, "pairs": 2, "llm": _usage(6, 4000, 100)},
            {"kind": "answered", "question": 0, "prediction": "Lisbon", "llm": _usage(1, 1200, 3)},
            {"kind": "answered", "question": 1, "prediction": "in May 2023", "llm": _usage(1, 1000, 4)},
        ],
    )
    _log(
        tmp_path / "reference" / "conv-x" / "log.jsonl",
        [
            *({"kind": "added", "pair": n, "llm": _usage(4, 2000, 50)} for n in range(4)),
            {"kind": "answered", "question": 0, "result": {"prediction": "Porto"}, "llm": _usage(2, 900, 20)},
        ],
    )

    result = report(tmp_path, [kept])

    # Question 1 has no reference answer yet: only question 0 is compared.
    assert result["questions"] == 1
    overall = result["table"]["overall"]["f1"]
    assert (overall["memoryos"], overall["reference"], overall["difference"]) == (1.0, 0.0, 1.0)
    assert "2 temporal" not in result["table"]
    ours, theirs = result["cost"]["memoryos"], result["cost"]["reference"]
    assert (ours["turns"], ours["calls_per_turn"], ours["prompt_tokens_per_turn"]) == (4, 1.5, 1000.0)
    assert (ours["answers"], ours["calls_per_answer"], ours["prompt_tokens_per_answer"]) == (2, 1.0, 1100.0)
    assert (theirs["turns"], theirs["calls_per_turn"], theirs["calls_per_answer"]) == (4, 4.0, 2.0)
    assert result["misses"] == []
    assert result["reference_prompt_echoes"] == 0
    assert result["table"]["overall, reference replies that answer"]["questions"] == 1
    assert "| overall | 1 | 1.000 | 0.000 | +1.000 [+1.000, +1.000]" in (tmp_path / "report.md").read_text()


def test_gold_recall_counts_the_gold_tokens_a_long_answer_holds() -> None:
    assert gold_recall("She moved from Sweden four years ago.", "Sweden") == 1.0
    assert gold_recall("Counseling", "Psychology, counseling certification") == 1 / 3
    assert gold_recall("Porto", "Lisbon") == 0.0
