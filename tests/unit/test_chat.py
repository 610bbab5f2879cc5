"""`chat_loop` driven with scripted input: commands, acknowledgements, answers after a restart, and
answers that never nest earlier answers (hashed fake embedder, offline LLM, fixed clock)."""

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.cli.chat import HELP, NO_PROFILE, PROMPT, chat_loop
from memoryos.llm.offline.backend import NOT_IN_MEMORY, OfflineLLM
from tests.support.fakes import FakeClock, HashEmbedder

QUOTED_EXCHANGE = re.compile(r"\b(?:User|Assistant):|\[\d{4}-\d{2}-\d{2}")


class Terminal:
    """Scripted `read_line` (EOF after the last line) and `write`, recording prompts and output."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []
        self.output: list[str] = []

    def read_line(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)

    def write(self, text: str) -> None:
        self.output.append(text)

    @property
    def replies(self) -> list[str]:
        return [line.removeprefix("assistant: ") for line in self.output if line.startswith("assistant: ")]


def open_memory(
    root: Path, clock: FakeClock | None = None, short_term_capacity: int = 10, **settings: object
) -> Memoryos:
    config = MemoryConfig(faiss_use_gpu="never", ingest_mode="inline", **settings)  # type: ignore[arg-type]
    return Memoryos(
        "sam",
        None,
        root,
        short_term_capacity=short_term_capacity,
        config=config,
        embedder=HashEmbedder(),
        llm=OfflineLLM(),
        clock=clock or FakeClock(),
    )


def chat(
    root: Path, *lines: str, clock: FakeClock | None = None, short_term_capacity: int = 10, **settings: object
) -> Terminal:
    """One chat session on a freshly opened `Memoryos` (a restart when the directory holds a space)."""
    terminal = Terminal(lines)
    with open_memory(root, clock, short_term_capacity, **settings) as memory:
        chat_loop(memory, terminal.read_line, terminal.write)
    return terminal


def test_greets_with_the_user_and_where_memory_lives_then_prompts(tmp_path: Path) -> None:
    terminal = chat(tmp_path)
    assert "sam" in terminal.output[0]
    assert str(tmp_path / "default" / "sam") in terminal.output[0]
    assert terminal.prompts == [PROMPT]
    assert terminal.output[-1] == ""  # end of input: the prompt's line is ended


def test_quit_ends_without_reading_further(tmp_path: Path) -> None:
    terminal = chat(tmp_path, "/quit", "I am never read.")
    assert terminal.prompts == [PROMPT]
    assert terminal.lines == ["I am never read."]
    assert terminal.replies == []


def test_an_empty_line_prompts_again(tmp_path: Path) -> None:
    terminal = chat(tmp_path, "", "   ", "/exit")
    assert terminal.prompts == [PROMPT] * 3
    assert terminal.replies == []


def test_profile_help_and_unknown_commands(tmp_path: Path) -> None:
    terminal = chat(tmp_path, "/profile", "/help", "/nope")
    assert terminal.output[1:4] == [NO_PROFILE, HELP, "unknown command /nope; /help lists the commands"]
    assert terminal.replies == []


def test_profile_shows_what_consolidation_learned(tmp_path: Path) -> None:
    with open_memory(tmp_path, short_term_capacity=1) as memory:
        memory.add_memories([{"user_input": "I work as a nurse in Lyon.", "agent_response": "Nice."}] * 2)
        memory.force_mid_term_analysis()
    assert chat(tmp_path, "/profile").output[1] == "- User: I work as a nurse in Lyon."


def test_a_statement_is_acknowledged_as_remembered(tmp_path: Path) -> None:
    terminal = chat(tmp_path, "I work as a data scientist.")
    assert terminal.output[1] == "assistant: Got it, I'll remember that you work as a data scientist."


def test_a_question_is_answered_after_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    said = ["My cat is called Miso.", "I work as a nurse in Lyon.", "The weather was awful.", "/quit"]
    chat(tmp_path, *said, clock=clock, short_term_capacity=1)  # the first two leave short-term memory
    clock.advance(hours=30)
    (reply,) = chat(tmp_path, "Do I have a pet?", clock=clock, short_term_capacity=1).replies
    assert reply == "You told me your cat is called Miso."
    (reply,) = chat(tmp_path, "What do I do for a living?", clock=clock, short_term_capacity=1).replies
    assert reply == "You told me you work as a nurse in Lyon."


def test_answers_never_nest_earlier_answers(tmp_path: Path) -> None:
    clock = FakeClock()
    first = chat(tmp_path, "Hi, my name is Rui and I am a nurse in Lyon.", "What is my name?", clock=clock)
    clock.advance(60)
    second = chat(tmp_path, "What is my job?", "What did I tell you about my name?", clock=clock)
    replies = first.replies + second.replies
    assert len(replies) == 4 and NOT_IN_MEMORY not in replies
    with open_memory(tmp_path, clock) as memory:
        stored = memory.space.pages(list(range(1, memory.space.max_page_id() + 1)))
    assert [page.agent_response for page in stored] == replies
    assert replies[1:] == ["You told me your name is Rui and you are a nurse in Lyon."] * 3
    for index, reply in enumerate(replies):
        assert not QUOTED_EXCHANGE.search(reply)
        assert all(earlier not in reply for earlier in replies[:index] if earlier != reply)


def test_no_assistant_fact_echoes_the_conversation(tmp_path: Path) -> None:
    lines = ["I am a nurse in Lyon.", "What is my job?", "My cat is called Miso.", "Do I have a pet?"]
    chat(tmp_path, *lines, short_term_capacity=1)
    with open_memory(tmp_path, short_term_capacity=1) as memory:
        memory.add_memory("Any museum in Lyon?", "I recommend the Musée des Confluences.")
        memory.add_memory("Thanks!", "You're welcome.")
        memory.force_mid_term_analysis()
        facts = [fact["knowledge"] for fact in memory.get_assistant_knowledge_summary()]
        user_facts = [fact["knowledge"] for fact in memory.get_user_knowledge()]
    assert facts == ["Assistant: I recommend the Musée des Confluences."]
    assert "User: I am a nurse in Lyon." in user_facts


@pytest.mark.parametrize("line", ["x" * 300])
def test_a_refused_message_is_an_error_line_and_the_chat_goes_on(tmp_path: Path, line: str) -> None:
    terminal = chat(tmp_path, line, "I like tea.", max_text_chars=200)
    assert terminal.output[1].startswith("error: query")
    assert terminal.replies == ["Got it, I'll remember that you like tea."]
