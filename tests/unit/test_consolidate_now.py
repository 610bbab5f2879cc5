"""An explicit "consolidate now" (`force_mid_term_analysis`, the API's POST /consolidate) while the LLM
fails says so instead of reporting success, and tries postponed work at once rather than after its
backoff, so it succeeds as soon as the LLM does."""

from pathlib import Path

import pytest

from memoryos import LLMError
from tests.support.fakes import ScriptedLLM
from tests.unit.test_facade import TOPICS, add_all, make


def test_consolidate_now_reports_an_llm_failure_and_succeeds_at_once_after_recovery(tmp_path: Path) -> None:
    llm = ScriptedLLM(fail_on={"topic"})
    memory = make(tmp_path, llm=llm, short_term_capacity=1)
    add_all(memory, TOPICS[:3])  # two pages overflow; filing them fails
    with pytest.raises(LLMError):
        memory.force_mid_term_analysis()
    stats = memory.get_memory_stats()
    assert (stats["short_term_pages"], stats["mid_term_pages"], stats["segments"]) == (3, 0, [])

    llm.fail_on = set()
    attempts = llm.calls["topic"]
    memory.force_mid_term_analysis()  # the space is backing off: "now" must not wait for it
    assert llm.calls["topic"] > attempts
    stats = memory.get_memory_stats()
    assert (stats["short_term_pages"], stats["mid_term_pages"]) == (1, 2)
    assert memory.get_user_profile_summary()
    memory.close()
