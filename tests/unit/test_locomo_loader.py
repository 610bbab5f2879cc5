import json
from pathlib import Path
from typing import Any

import pytest

from memoryos.errors import InvalidInputError
from memoryos.eval.locomo import (
    NO_MESSAGE,
    NO_REPLY,
    LocomoConversation,
    conversation_from_raw,
    load_conversations,
)
from tests.support.locomo_data import locomo_source

LOCOMO_RAW = locomo_source()
LOCOMO_DIR = LOCOMO_RAW.parent if LOCOMO_RAW is not None else Path("no-locomo")
"""The folder of LoCoMo's raw `locomo_dev.json` and its `pairs/` conversion (the workplace keeps one beside
the repository; `$MEMORYOS_LOCOMO` may name another)."""
DEV_SAMPLE_IDS = ["conv-26", "conv-30", "conv-41"]

needs_locomo = pytest.mark.skipif(
    not ((LOCOMO_DIR / "locomo_dev.json").is_file() and (LOCOMO_DIR / "pairs").is_dir()),
    reason="set MEMORYOS_LOCOMO to a folder with LoCoMo's locomo_dev.json and pairs/ to check the "
    "raw-to-pairs conversion against both (LoCoMo is CC BY-NC, not in the repository); the converter's "
    "rules are tested above on a hand-made sample",
)


def _turn(dia_id: str, speaker: str, text: str, **extra: str) -> dict[str, str]:
    return {"dia_id": dia_id, "speaker": speaker, "text": text, **extra}


def _raw_sample() -> dict[str, Any]:
    """Two speakers, Ann (user) and Bob (assistant), with every irregular shape the converter handles."""
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "12:09 am on 13 September, 2023",
            "session_1": [
                _turn("D1:1", "Bob", "Hi Ann!", blip_caption="a photo of a dog", img_url="http://x"),
                _turn("D1:2", "Ann", "Cute dog."),
                _turn("D1:3", "Bob", "Thanks."),
                _turn("D1:4", "Ann", "Bye!"),
            ],
            "session_10_date_time": "1:56 pm on 8 May, 2024",
            "session_10": [
                _turn("D10:1", "Ann", "Back."),
                _turn("D10:2", "Ann", "Anyone there?"),
                _turn("D10:3", "Bob", "Yes."),
            ],
            "session_2_date_time": "9:05 am on 1 January, 2024",
            "session_2": [
                _turn("D2:1", "Ann", "Happy new year", blip_caption=""),
                _turn("D2:2", "Bob", "Same!"),
            ],
            "session_3_date_time": "9:05 am on 2 January, 2024",
            "session_3": [],
        },
        "qa": [
            {"question": "Year?", "answer": 2023, "evidence": ["D1:2; D2:1"], "category": 2},
            {"question": "Typo ids?", "answer": "x", "evidence": ["D:2:2", "D02:01", "D2:1"], "category": 1},
            {"question": "Gone?", "evidence": ["D9:9", "D"], "adversarial_answer": "y", "category": 5},
        ],
    }


def test_session_opened_by_assistant_and_closed_by_user_keeps_every_turn() -> None:
    conversation = conversation_from_raw(_raw_sample())
    session_1 = [pair for pair in conversation.pairs if pair.session == 1]

    assert [(p.user_input, p.agent_response, p.dia_ids) for p in session_1] == [
        (NO_MESSAGE, "Hi Ann! (image description: a photo of a dog)", ["D1:1"]),
        ("Cute dog.", "Thanks.", ["D1:2", "D1:3"]),
        ("Bye!", NO_REPLY, ["D1:4"]),
    ]
    assert {p.timestamp for p in session_1} == {"2023-09-13 00:09:00"}
    assert session_1[0].timestamp_raw == "12:09 am on 13 September, 2023"


def test_sessions_in_numeric_order_with_empty_ones_skipped_and_a_global_index() -> None:
    conversation = conversation_from_raw(_raw_sample())

    assert [p.session for p in conversation.pairs] == [1, 1, 1, 2, 10, 10]
    assert [p.index for p in conversation.pairs] == list(range(6))
    assert conversation.pairs[3].user_input == "Happy new year"  # an empty caption adds nothing
    assert conversation.pairs[4].timestamp == "2024-05-08 13:56:00"


def test_consecutive_user_turns_each_get_a_pair() -> None:
    session_10 = [p for p in conversation_from_raw(_raw_sample()).pairs if p.session == 10]

    assert [(p.user_input, p.agent_response, p.dia_ids) for p in session_10] == [
        ("Back.", NO_REPLY, ["D10:1"]),
        ("Anyone there?", "Yes.", ["D10:2", "D10:3"]),
    ]


def test_questions_normalize_evidence_and_answers() -> None:
    qa = conversation_from_raw(_raw_sample()).qa

    assert [q.evidence_norm for q in qa] == [["D1:2", "D2:1"], ["D2:2", "D2:1"], []]
    assert qa[0].evidence == ["D1:2; D2:1"]
    assert [q.answer for q in qa] == ["2023", "x", None]
    assert [q.category for q in qa] == [2, 1, 5]


def test_unknown_speaker_is_rejected() -> None:
    sample = _raw_sample()
    sample["conversation"]["session_2"][0]["speaker"] = "Eve"

    with pytest.raises(InvalidInputError, match="D2:1"):
        conversation_from_raw(sample)


def test_pairs_file_round_trips(tmp_path: Path) -> None:
    conversation = conversation_from_raw(_raw_sample())
    pairs_file = tmp_path / "conv-x.json"
    pairs_file.write_text(conversation.model_dump_json())

    assert load_conversations(pairs_file) == [conversation]
    assert load_conversations(tmp_path) == [conversation]


def test_unrecognised_document_is_rejected(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"sample_id": "conv-x"}))

    with pytest.raises(InvalidInputError, match="neither"):
        load_conversations(odd)


@pytest.mark.locomo
@needs_locomo
def test_raw_dev_file_reproduces_the_shipped_pairs_files_exactly() -> None:
    converted = load_conversations(LOCOMO_DIR / "locomo_dev.json")

    assert [c.sample_id for c in converted] == DEV_SAMPLE_IDS
    for conversation in converted:
        expected = json.loads((LOCOMO_DIR / "pairs" / f"{conversation.sample_id}.json").read_text())
        assert (conversation.speaker_a, conversation.speaker_b) == (
            expected["speaker_a"],
            expected["speaker_b"],
        )
        assert len(conversation.pairs) == len(expected["pairs"])
        for pair, expected_pair in zip(conversation.pairs, expected["pairs"], strict=True):
            for field, value in expected_pair.items():
                assert getattr(pair, field) == value, (conversation.sample_id, expected_pair["index"], field)
        assert len(conversation.qa) == len(expected["qa"])
        for number, (question, expected_question) in enumerate(
            zip(conversation.qa, expected["qa"], strict=True)
        ):
            answer = expected_question.get("answer")
            assert question.answer == (None if answer is None else str(answer)), (
                conversation.sample_id,
                number,
            )
            for field in ("question", "evidence", "evidence_norm", "category"):
                assert getattr(question, field) == expected_question[field], (
                    conversation.sample_id,
                    number,
                    field,
                )


@pytest.mark.locomo
@needs_locomo
def test_pairs_directory_and_raw_file_load_the_same_conversations() -> None:
    from_pairs = load_conversations(LOCOMO_DIR / "pairs")

    assert from_pairs == load_conversations(LOCOMO_DIR / "locomo_dev.json")
    assert all(isinstance(c, LocomoConversation) for c in from_pairs)


@pytest.mark.locomo
@needs_locomo
def test_sample_ids_select_conversations_and_missing_ones_fail() -> None:
    selected = load_conversations(LOCOMO_DIR / "pairs", sample_ids=["conv-30"])

    assert [c.sample_id for c in selected] == ["conv-30"]
    with pytest.raises(InvalidInputError, match="conv-99"):
        load_conversations(LOCOMO_DIR / "locomo_dev.json", sample_ids=["conv-26", "conv-99"])
