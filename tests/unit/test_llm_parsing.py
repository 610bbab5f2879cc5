import pytest

from memoryos.errors import LLMError
from memoryos.llm.parsing import coerce_facts, coerce_keywords, parse_json_object, parse_yes_no, strip_think


class TestStripThink:
    def test_removes_closed_blocks_anywhere(self) -> None:
        text = "<think>plan</think>Answer one.<THINK>\nmore\n</THINK> Answer two."
        assert strip_think(text) == "Answer one. Answer two."

    def test_drops_everything_before_an_orphan_closing_tag(self) -> None:
        assert (
            strip_think("reasoning whose opening tag was in the prompt</think>\n\nThe answer") == "The answer"
        )

    def test_an_unclosed_leading_block_leaves_no_answer(self) -> None:
        assert strip_think("  <think>reasoning cut off by the token lim") == ""

    def test_text_without_reasoning_is_only_trimmed(self) -> None:
        assert strip_think("  plain reply \n") == "plain reply"


class TestParseJsonObject:
    def test_plain_object(self) -> None:
        assert parse_json_object('{"summary": "s", "keywords": ["a"]}') == {"summary": "s", "keywords": ["a"]}

    def test_inside_code_fences(self) -> None:
        reply = (
            'Here it is:\n```json\n{"summary": "Hiking plans", "keywords": ["hiking"]}\n```\nHope it helps!'
        )
        assert parse_json_object(reply) == {"summary": "Hiking plans", "keywords": ["hiking"]}

    def test_surrounded_by_prose_with_stray_braces(self) -> None:
        reply = 'Sure {not json} the result is {"user_facts": ["The user {likes} braces"]} done.'
        assert parse_json_object(reply) == {"user_facts": ["The user {likes} braces"]}

    def test_a_draft_inside_think_is_not_taken(self) -> None:
        reply = '<think>maybe {"summary": "draft"}</think>{"summary": "final"}'
        assert parse_json_object(reply) == {"summary": "final"}

    def test_an_array_of_objects_yields_the_first(self) -> None:
        assert parse_json_object('[{"theme": "a"}, {"theme": "b"}]') == {"theme": "a"}

    @pytest.mark.parametrize(
        "reply", ["", "no json here", '{"unterminated": ', "[1, 2, 3]", "<think>{}</think>"]
    )
    def test_no_object_raises(self, reply: str) -> None:
        with pytest.raises(LLMError):
            parse_json_object(reply)


class TestParseYesNo:
    @pytest.mark.parametrize("reply", ["yes", "Yes.", "**YES**", "true", "<think>no?</think> yes, it does"])
    def test_yes(self, reply: str) -> None:
        assert parse_yes_no(reply) is True

    @pytest.mark.parametrize("reply", ["no", "No, a new subject.", "False", "'no'"])
    def test_no(self, reply: str) -> None:
        assert parse_yes_no(reply) is False

    @pytest.mark.parametrize("reply", ["", "maybe", "It continues: yes"])
    def test_anything_else_raises(self, reply: str) -> None:
        with pytest.raises(LLMError):
            parse_yes_no(reply)


class TestCoerceKeywords:
    def test_strips_dedupes_ignoring_case_and_drops_empties(self) -> None:
        assert coerce_keywords([" Hiking ", "hiking", "", "#alps", "None", "trip"]) == [
            "Hiking",
            "alps",
            "trip",
        ]

    def test_a_comma_separated_string(self) -> None:
        assert coerce_keywords("food, travel ,, food") == ["food", "travel"]

    def test_bounded(self) -> None:
        assert coerce_keywords([str(n) for n in range(10)], limit=3) == ["0", "1", "2"]

    @pytest.mark.parametrize("value", [None, 3, {"a": 1}, [None, True, {"k": "v"}]])
    def test_values_without_text_give_nothing(self, value: object) -> None:
        assert coerce_keywords(value) == []


class TestCoerceFacts:
    def test_strips_bullets_and_drops_none_markers(self) -> None:
        facts = ["- The user is a teacher.", "2) The user lives in Lyon.", "None.", "  ", "N/A"]
        assert coerce_facts(facts) == ["The user is a teacher.", "The user lives in Lyon."]

    def test_dedupes_ignoring_case(self) -> None:
        assert coerce_facts(["The user has a dog.", "the user has a dog."]) == ["The user has a dog."]

    def test_a_string_holds_one_fact_per_line(self) -> None:
        assert coerce_facts("- The user runs.\n- The user swims.\nNone") == [
            "The user runs.",
            "The user swims.",
        ]

    def test_non_string_items_are_skipped(self) -> None:
        assert coerce_facts([{"fact": "x"}, None, "The user sings."]) == ["The user sings."]
