import threading

from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.llm import create_llm
from memoryos.llm.base import AnswerRequest
from memoryos.llm.offline import MAX_PROFILE_LINES, MAX_SUMMARY_CHARS, NOT_IN_MEMORY, OfflineLLM
from memoryos.llm.openai_backend import OpenAILLM
from memoryos.llm.usage import UsageCounter, estimate_tokens
from memoryos.types import Page


def page(page_id: int, user: str, agent: str, timestamp: str = "2024-05-01 10:00:00") -> Page:
    return Page(page_id=page_id, user_input=user, agent_response=agent, timestamp=timestamp)


TEACHER = page(
    1,
    "I'm a teacher in Lyon. My name is Ann.",
    "Nice to meet you, Ann! I recommend the Musée des Confluences in Lyon.",
    "2024-05-01 10:00:00",
)
MATH = page(
    2, "Yes, I teach math to teenagers in Lyon.", "Math is a great subject to teach.", "2024-05-01 10:05:00"
)
PASTA = page(
    3, "What's a good pasta recipe?", "Try carbonara: eggs, pecorino, guanciale.", "2024-05-02 19:00:00"
)
THANKS = page(4, "ok thanks!", "You're welcome.", "2024-05-02 19:01:00")


def request(query: str, retrieved: list[Page], short_term: list[Page] | None = None) -> AnswerRequest:
    return AnswerRequest(
        query=query,
        short_term=short_term or [],
        retrieved=retrieved,
        user_profile="",
        user_knowledge=[],
        assistant_knowledge=[],
    )


class TestContinuity:
    def test_a_shared_content_word_continues(self) -> None:
        assert OfflineLLM().is_continuation(TEACHER, MATH)

    def test_a_new_subject_does_not(self) -> None:
        assert not OfflineLLM().is_continuation(MATH, PASTA)

    def test_a_phatic_turn_continues(self) -> None:
        assert OfflineLLM().is_continuation(PASTA, THANKS)

    def test_an_assistant_only_turn_on_a_new_subject_does_not(self) -> None:
        assert not OfflineLLM().is_continuation(
            MATH, page(5, "", "Reminder: your dentist appointment is at 3pm.")
        )

    def test_shared_stopwords_are_not_enough(self) -> None:
        previous = page(1, "What is the weather like?", "It is sunny.")
        current = page(2, "What is the capital of Peru?", "Lima.")
        assert not OfflineLLM().is_continuation(previous, current)


class TestSummaries:
    def test_chain_summary_is_extracted_and_bounded(self) -> None:
        summary = OfflineLLM().summarize_chain([TEACHER, MATH])
        assert 0 < len(summary) <= MAX_SUMMARY_CHARS
        source = TEACHER.text() + " " + MATH.text()
        assert all(sentence.rstrip(".") in source for sentence in summary.split(". "))
        assert "Lyon" in summary

    def test_a_long_sentence_is_cut_at_a_word(self) -> None:
        long_page = page(1, "I like " + " ".join(f"word{n}" for n in range(200)) + ".", "")
        summary = OfflineLLM().summarize_chain([long_page])
        assert len(summary) <= MAX_SUMMARY_CHARS
        assert summary.endswith("…")
        assert summary[:-1].split()[-1].startswith("word")

    def test_the_same_pages_give_the_same_summary(self) -> None:
        assert OfflineLLM().summarize_chain([TEACHER, MATH]) == OfflineLLM().summarize_chain([TEACHER, MATH])

    def test_topic_keywords_are_the_most_frequent_content_words(self) -> None:
        topic = OfflineLLM().summarize_topic([TEACHER, MATH])
        assert topic.keywords[0] == "lyon"
        assert len(topic.keywords) <= 5
        assert not {"the", "and", "yes", "user", "assistant"} & set(topic.keywords)
        assert topic.summary


class TestKnowledge:
    def test_first_person_statements_become_facts(self) -> None:
        knowledge = OfflineLLM().extract_knowledge([TEACHER, MATH, PASTA, THANKS])
        assert knowledge.user_facts == ["User: I'm a teacher in Lyon.", "User: My name is Ann."]
        assert knowledge.assistant_facts == ["Assistant: I recommend the Musée des Confluences in Lyon."]

    def test_questions_and_pleasantries_are_not_facts(self) -> None:
        pages = [page(1, "Am I right? I'm fine. I'm not sure.", "I'm glad!"), page(2, "Do I like tea?", "")]
        knowledge = OfflineLLM().extract_knowledge(pages)
        assert knowledge.user_facts == []
        assert knowledge.assistant_facts == []

    def test_repeated_facts_are_kept_once(self) -> None:
        knowledge = OfflineLLM().extract_knowledge([TEACHER, TEACHER])
        assert len(knowledge.user_facts) == 2


class TestProfile:
    def test_merges_new_facts_and_keeps_existing_lines(self) -> None:
        profile = OfflineLLM().update_profile("- Likes hiking\n- Has a cat", [TEACHER])
        assert profile.splitlines() == [
            "- Likes hiking",
            "- Has a cat",
            "- User: I'm a teacher in Lyon.",
            "- User: My name is Ann.",
        ]

    def test_facts_already_in_the_profile_are_not_repeated(self) -> None:
        llm = OfflineLLM()
        once = llm.update_profile("", [TEACHER])
        assert llm.update_profile(once, [TEACHER]) == once

    def test_unchanged_when_pages_reveal_nothing(self) -> None:
        assert OfflineLLM().update_profile("- Likes hiking", [PASTA, THANKS]) == "- Likes hiking"

    def test_bounded_with_the_newest_lines_kept(self) -> None:
        current = "\n".join(f"- trait {n}" for n in range(MAX_PROFILE_LINES))
        lines = OfflineLLM().update_profile(current, [TEACHER]).splitlines()
        assert len(lines) == MAX_PROFILE_LINES
        assert lines[-1] == "- User: My name is Ann."
        assert "- trait 0" not in lines


class TestAnswer:
    def test_quotes_the_best_overlapping_sentences_with_timestamps(self) -> None:
        reply = OfflineLLM().answer(request("Which subject do you teach to teenagers?", [MATH, TEACHER]))
        first_line = reply.splitlines()[0]
        assert first_line == "[2024-05-01 10:05:00] User: Yes, I teach math to teenagers in Lyon."

    def test_short_term_pages_are_searched_too(self) -> None:
        reply = OfflineLLM().answer(request("Tell me that carbonara recipe again", [TEACHER], [PASTA]))
        assert "carbonara" in reply
        assert "[2024-05-02 19:00:00]" in reply

    def test_says_so_when_memory_holds_nothing(self) -> None:
        assert OfflineLLM().answer(request("Who won the chess tournament?", [TEACHER, MATH])) == NOT_IN_MEMORY


class TestUsage:
    def test_counted_per_operation_with_estimated_tokens(self) -> None:
        llm = OfflineLLM()
        llm.is_continuation(TEACHER, MATH)
        llm.is_continuation(MATH, PASTA)
        llm.extract_knowledge([TEACHER])
        usage = llm.usage
        assert set(usage) == {"continuity", "knowledge"}
        assert usage["continuity"].calls == 2
        assert usage["continuity"].prompt_tokens > 0
        assert usage["knowledge"].completion_tokens > 0

    def test_snapshots_are_copies(self) -> None:
        counter = UsageCounter()
        counter.record("answer", 10, 2)
        counter.snapshot()["answer"].calls = 99
        assert counter.snapshot()["answer"].calls == 1

    def test_concurrent_records_are_all_counted(self) -> None:
        counter = UsageCounter()

        def record_many() -> None:
            for _ in range(1000):
                counter.record("topic", 3, 1)

        threads = [threading.Thread(target=record_many) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        usage = counter.snapshot()["topic"]
        assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (8000, 24000, 8000)

    def test_token_estimate(self) -> None:
        assert estimate_tokens("") == 0
        assert estimate_tokens("a" * 40) == 10
        assert estimate_tokens("我是老师") == 4


class TestCreateLLM:
    def test_offline_without_an_api_key(self) -> None:
        assert isinstance(create_llm(MemoryConfig()), OfflineLLM)
        assert isinstance(create_llm(MemoryConfig(openai_api_key=SecretStr(""))), OfflineLLM)

    def test_openai_with_an_api_key(self) -> None:
        config = MemoryConfig(openai_api_key=SecretStr("sk-test"), openai_base_url="http://127.0.0.1:9/v1")
        assert isinstance(create_llm(config), OpenAILLM)
