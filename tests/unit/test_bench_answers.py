"""The answer-quality bench (`bench/quality/answers.py`, `answer_report.py`): the held-out sample, the
paired interval and the report, on hand-written part logs."""

import json
from pathlib import Path

import pytest

from bench.quality.answer_report import duplicated_pairs, gold_recall, paired_interval, report
from bench.quality.answers import SAMPLE_SESSIONS, sample, sampled_conversations
from memoryos.eval.locomo import DEV_SAMPLE_IDS, LocomoConversation, LocomoPair, LocomoQuestion


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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")


def _call(prompt: int, finish: str = "stop") -> dict[str, object]:
    return {"prompt_tokens": prompt, "completion_tokens": 3, "finish_reason": finish}


def _ours(question: int, arm: str, prediction: str, shown: list[list[str]]) -> dict[str, object]:
    return {
        "kind": "answered",
        "question": question,
        "arm": arm,
        "prediction": prediction,
        "calls": [_call(1200)],
        "shown": shown,
    }


def _theirs(question: int, arm: str, prediction: str, retrieved: list[str]) -> dict[str, object]:
    pages = [{"user_input": f"u{page}", "agent_response": f"a{page}"} for page in retrieved]
    return {
        "kind": "answered",
        "question": question,
        "arm": arm,
        "calls": [_call(300), _call(3800, "length" if arm == "published" else "stop")],
        "result": {"prediction": prediction, "error": None, "retrieved": pages, "short_term": []},
    }


def test_the_report_scores_recall_first_and_pairs_the_four_arms_by_question(tmp_path: Path) -> None:
    kept = sample(conversation(), sessions=2)
    echo = "When answering questions, be sure to check whether the timestamp of the referenced information"
    _log(
        tmp_path / "memoryos" / "conv-x" / "log.jsonl",
        [
            {"kind": "session", "session": 1, "pairs": 2, "llm": {"calls": 1}},
            _ours(0, "ours", "Lisbon", [["u1.0", "a1.0"], ["u2.1", "a2.1"]]),
            _ours(0, "ours_reference_prompt", "It was Lisbon, I think", [["u1.0", "a1.0"], ["u2.1", "a2.1"]]),
            _ours(1, "ours", "May 2023", [["u2.1", "a2.1"]]),
            _ours(1, "ours_reference_prompt", "May 2023", [["u2.1", "a2.1"]]),
        ],
    )
    _log(
        tmp_path / "reference" / "conv-x" / "log.jsonl",
        [
            *({"kind": "added", "pair": n} for n in range(4)),
            _theirs(0, "published", echo, ["1.0"]),
            _theirs(0, "fixed", "Porto", ["1.0"]),
            _theirs(1, "published", echo, ["1.1"]),
            # Question 1's repaired arm is not done: question 1 is left out of every table.
        ],
    )
    _log(
        tmp_path / "judge.jsonl",
        [
            {
                "kind": "judged",
                "conversation": "conv-x",
                "question": 0,
                "arm": arm,
                "correct": arm != "reference_fixed",
            }
            for arm in ("ours", "ours_reference_prompt", "reference_fixed", "reference_published")
        ],
    )

    result = report(tmp_path, [kept])

    assert result["questions"] == 1
    assert result["duplicated_reference_pairs"] == {"conv-x": 0}
    recall = result["recall"]["overall"]
    assert recall["memoryos"]["1"] == 0.5 and recall["memoryos"]["3"] == 1.0  # D1:1 first, D2:2 second
    assert recall["reference"]["10"] == 0.5 and recall["reference"]["pages_shown"] == 1
    arms = result["arms"]["overall"]
    assert (arms["ours"]["f1"], arms["reference_fixed"]["f1"], arms["reference_published"]["f1"]) == (
        1.0,
        0.0,
        0.0,
    )
    assert arms["ours_reference_prompt"]["judge"] == 1.0 and arms["reference_fixed"]["judge"] == 0.0
    assert arms["reference_published"]["echoes"] == 1 and arms["reference_published"]["cut_at_cap"] == 1
    assert arms["reference_fixed"]["prompt_tokens"] == 3800  # the answer call, not the keyword call
    memories = result["comparisons"]["overall"]["memories, one prompt (the reference's, repaired)"]
    assert memories["arms"] == ["ours_reference_prompt", "reference_fixed"]
    assert memories["judge"]["difference"] == 1.0
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert text.index("recall@1") < text.index("| F1 |")
    row = result["rows"][0]
    assert row["reference_published"]["finish_reason"] == "length"


def test_a_resumed_ingest_that_added_a_pair_twice_is_reported(tmp_path: Path) -> None:
    _log(tmp_path / "part" / "log.jsonl", [{"kind": "added", "pair": n} for n in (0, 1, 1, 2)])
    assert duplicated_pairs(tmp_path / "part") == 1


def test_the_sample_is_held_out_from_the_conversations_prompts_were_tuned_on() -> None:
    assert SAMPLE_SESSIONS and not set(SAMPLE_SESSIONS) & set(DEV_SAMPLE_IDS)


def test_a_data_file_without_the_held_out_conversations_is_one_line_naming_the_fetch(tmp_path: Path) -> None:
    raw = tmp_path / "dev.json"
    raw.write_text("[]", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"conv-48.*curl"):
        sampled_conversations(raw)


def test_gold_recall_counts_the_gold_tokens_a_long_answer_holds() -> None:
    assert gold_recall("She moved from Sweden four years ago.", "Sweden") == 1.0
    assert gold_recall("Counseling", "Psychology, counseling certification") == 1 / 3
    assert gold_recall("Porto", "Lisbon") == 0.0
