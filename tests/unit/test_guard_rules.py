"""The guards on long-term memory proposals (`memoryos/planning/guards.py`), measured both ways on the
labelled set `tests/data/llm_proposals.json`: replies of the local model (Qwen2.5-Coder-1.5B-Instruct
Q4_K_M, `bench/llm/collect_proposals.py`) over LoCoMo turns and the issue's bad examples, each labelled
good or bad by hand with a reason, and each bad one naming the rule that must refuse it.

Per rule (`bench/llm/guard_confusion.py` counts them): every bad proposal of that rule is refused by it,
and at least `MIN_GOOD_KEPT` of the good proposals pass it, so a rule that refuses everything fails as
surely as a rule that is missing."""

from typing import Any

import pytest

from bench.llm.guard_confusion import FACT_RULES, PROFILE_RULES, LabelledSet
from memoryos.config import MemoryConfig
from memoryos.llm.chat_tasks import KNOWLEDGE_SCHEMA, TOPIC_SCHEMA
from memoryos.llm.reply_schema import schema_violations
from memoryos.planning.guards import GuardSettings, Rule, fact_refusal, guards_enabled, source_stems
from memoryos.types import Page

LABELLED = LabelledSet()
SETTINGS = GuardSettings.of(MemoryConfig())
MIN_GOOD_KEPT = 0.9
"""Good proposals each rule must let through; the measured counts are in docs/evaluation.md."""


@pytest.mark.parametrize("rule", [*FACT_RULES, *PROFILE_RULES])
def test_each_rule_refuses_its_bad_proposals_and_keeps_the_good(rule: Rule) -> None:
    counts = LABELLED.confusion(rule)
    assert counts["bad_refused"] >= 1, f"no bad proposal labelled for {rule}: the rule would go unmeasured"
    assert counts["bad_missed"] == 0, f"{rule} let through proposals labelled bad for it: {counts}"
    good = counts["good_kept"] + counts["good_refused"]
    assert counts["good_kept"] >= MIN_GOOD_KEPT * good, f"{rule} refuses good proposals: {counts}"


def test_the_set_holds_real_model_replies_and_the_issues_examples() -> None:
    cases = [*LABELLED.facts, *LABELLED.profiles]
    assert {"issue", "qwen2.5-coder-1.5b-instruct-q4_k_m"} <= {c["source"] for c in cases}
    assert all(c["label"] in ("good", "bad") and c["reason"].strip() for c in cases)
    issue = {c["text"]: LABELLED.fact_verdict(c) for c in LABELLED.facts if c["source"] == "issue"}
    assert issue["Maya"] == "fact_not_sentence"
    assert issue["The user is a puppy who likes shoes."] == "fact_ungrounded"


def test_stems_meet_across_inflections_and_dates_count_as_grounded() -> None:
    page = Page(
        page_id=1, user_input="I like hiking; new shoes!", agent_response="", timestamp="2023-05-08 13:56:00"
    )
    sources = source_stems([page])
    assert fact_refusal("The user likes to hike in new shoes.", sources, SETTINGS) is None
    assert fact_refusal("The user went hiking on Monday 8 May 2023.", sources, SETTINGS) is None
    assert fact_refusal("The user owns a sailing boat.", sources, SETTINGS) == "fact_ungrounded"


def test_the_guards_follow_the_endpoint_unless_set() -> None:
    assert not guards_enabled(MemoryConfig(openai_api_key=None, openai_base_url=None))
    assert guards_enabled(MemoryConfig(openai_api_key=None, openai_base_url="http://127.0.0.1:1/v1"))
    assert guards_enabled(MemoryConfig(openai_api_key=None, llm_guards="on"))
    assert not guards_enabled(MemoryConfig(openai_base_url="http://127.0.0.1:1/v1", llm_guards="off"))


@pytest.mark.parametrize(
    ("reply", "schema", "violations"),
    [
        ({"user_facts": ["a"], "assistant_facts": []}, KNOWLEDGE_SCHEMA, []),
        ({"user_facts": "- a\n- b"}, KNOWLEDGE_SCHEMA, []),  # a list written as lines: read, not refused
        ({"user_facts": ["a"], "extra": 1}, KNOWLEDGE_SCHEMA, []),  # free-text fallback tolerance
        (
            {"user_facts": [{"fact": "a"}, "b", None]},
            KNOWLEDGE_SCHEMA,
            ["user_facts[0]: object, not string", "user_facts[2]: null, not string"],
        ),
        ({"assistant_facts": {"a": 1}}, KNOWLEDGE_SCHEMA, ["assistant_facts: object, not array"]),
        ({"summary": ["x"], "keywords": ["a"]}, TOPIC_SCHEMA, ["summary: array, not string"]),
        (
            {"summary": "x", "keywords": [1, True]},
            TOPIC_SCHEMA,
            ["keywords[0]: number, not string", "keywords[1]: boolean, not string"],
        ),
    ],
)
def test_a_reply_is_checked_against_its_schema(
    reply: dict[str, Any], schema: dict[str, Any], violations: list[str]
) -> None:
    assert schema_violations(reply, schema) == violations
