"""Bad replies of a model never become long-term memory (issue 37): the engine's consolidation against the
stub server answering MemoryOS's own prompts as a weak model did — a one-word fact, an invented fact, a
profile that invents a family, a facts reply that ignores its schema — through the real `openai` client.

Grounded proposals are stored with their source pages; refused ones leave the previous state, are counted
per rule, and are logged at INFO with ids and counts only (the refused text only at DEBUG); a slice with a
refusal is analysed again by later passes, `guard_analysis_attempts` times in all."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.errors import LLMError
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES, StubLLMServer
from memoryos.planning.guards import REFUSALS
from tests.support.fakes import FakeClock, HashEmbedder

pytestmark = pytest.mark.integration

FIRST = [
    ("My friend Sam and I went hiking.", "Sounds fun!"),
    ("Sam is moving to Porto next month.", "You will miss him."),
    ("We plan to visit him in June.", "Porto is lovely in June, pack light."),
    ("I bought the train tickets already.", "Great planning."),
    ("Sam says the weather there is mild.", "Pack light then."),
]
SECOND = [
    ("I started a pottery class on Tuesdays.", "What a nice hobby."),
    ("My first bowl cracked in the kiln.", "That happens to everyone."),
    ("The teacher says to dry it slower.", "Good advice."),
    ("I will try again next week.", "Good luck!"),
]
FIRST_PROFILE = "- Has a friend named Sam who is moving to Porto\n- Plans to visit Porto in June"
INVENTED = f"{FIRST_PROFILE}\n- Age: 25, has a partner, two children"
FACTS = (
    '{"user_facts": ["Maya", "The user is a puppy who likes shoes.", '
    '"The user plans to visit Sam in Porto in June."], '
    '"assistant_facts": ["The assistant advised the user to pack light."]}'
)
GOOD_FACTS = {
    "The user plans to visit Sam in Porto in June.",
    "The assistant advised the user to pack light.",
}
RULES = (
    ("nothing is known about the user yet", FIRST_PROFILE),  # the first profile update: grounded
    ("Update the user profile", INVENTED),  # every later one invents a family
    ("Extract the facts worth remembering", FACTS),
    *MEMORY_TASK_RULES,
)


@pytest.fixture(scope="module")
def llm_server() -> Iterator[StubLLMServer]:
    with StubLLMServer(rules=RULES) as server:
        yield server


def open_memory(data_dir: Path, base_url: str) -> Memoryos:
    config = MemoryConfig(
        data_dir=data_dir,
        openai_api_key=None,
        openai_base_url=base_url,  # guards: "auto", on for an endpoint
        llm_max_retries=0,
        faiss_use_gpu="never",
        short_term_capacity=1,
    )
    return Memoryos.from_config("ana", config, embedder=HashEmbedder(), clock=FakeClock())


def test_refused_facts_and_profile_leave_memory_as_it_was_counted_and_logged_without_text(
    tmp_path: Path, llm_server: StubLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    memory = open_memory(tmp_path, llm_server.base_url)
    before = REFUSALS.snapshot()
    caplog.set_level(logging.INFO, logger="memoryos.planning.guards")
    for user_input, agent_response in FIRST:
        memory.add_memory(user_input, agent_response)
    memory.force_mid_term_analysis()
    facts = memory.space.knowledge("user") + memory.space.knowledge("assistant")
    assert {f.knowledge for f in facts} == GOOD_FACTS
    assert all(f.source_page_ids for f in facts)
    assert memory.space.profile() == FIRST_PROFILE

    for user_input, agent_response in SECOND:
        memory.add_memory(user_input, agent_response)
    memory.force_mid_term_analysis()
    assert memory.space.profile() == FIRST_PROFILE  # the invented family was refused
    for _ in range(memory.config.guard_analysis_attempts):  # refused slices are analysed again, bounded
        memory.force_mid_term_analysis()
    assert all(not memory.space.unanalyzed_pages(s.segment_id) for s in memory.space.segments())
    assert memory.space.profile() == FIRST_PROFILE
    assert {
        f.knowledge for f in memory.space.knowledge("user") + memory.space.knowledge("assistant")
    } == GOOD_FACTS
    memory.close()

    after = REFUSALS.snapshot()
    grew = {rule: after.get(rule, 0) - before.get(rule, 0) for rule in after}
    assert grew["fact_not_sentence"] >= 1 and grew["fact_ungrounded"] >= 1
    assert grew["profile_unsupported"] >= 1 and grew.get("profile_dropped", 0) == 0
    assert grew["analysis_deferred"] >= 1 and grew["analysis_given_up"] >= 1
    info = [r for r in caplog.records if r.levelno == logging.INFO and r.name == "memoryos.planning.guards"]
    assert {r.getMessage() for r in info} == {"LLM facts refused", "LLM profile update refused"}
    logged = " ".join(str(vars(r)) for r in info)
    assert not [word for word in ("Maya", "puppy", "shoes", "partner", "children") if word in logged]


def test_a_facts_reply_that_ignores_its_schema_is_asked_again_then_left_unanalyzed(tmp_path: Path) -> None:
    objects = '{"user_facts": [{"fact": "The user went hiking with Sam."}], "assistant_facts": []}'
    rules = (("Extract the facts worth remembering", objects), *MEMORY_TASK_RULES)
    with StubLLMServer(rules=rules) as server:
        memory = open_memory(tmp_path, server.base_url)
        for user_input, agent_response in FIRST:
            memory.add_memory(user_input, agent_response)
        with pytest.raises(LLMError, match="does not match its schema: user_facts\\[0\\]: object"):
            memory.force_mid_term_analysis()
        asked = [r for r in server.requests if "Extract the facts" in str(r["messages"])]
        temperatures = [r["temperature"] for r in asked]  # a background pass may have tried first
        assert temperatures and temperatures == [0.0, 0.5] * (len(temperatures) // 2)  # each asked again
        assert memory.space.knowledge("user") == [] and memory.space.profile() == ""
        assert any(memory.space.unanalyzed_pages(s.segment_id) for s in memory.space.segments())
        memory.close()
