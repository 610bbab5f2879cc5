import threading

import pytest
from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.llm import create_llm
from memoryos.llm.base import AnswerRequest
from memoryos.llm.offline.backend import MAX_PROFILE_LINES, OfflineLLM
from memoryos.llm.offline.extracts import MAX_SUMMARY_CHARS
from memoryos.llm.offline.replies import ACKNOWLEDGED, NOT_IN_MEMORY, TOLD_ME
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

    def test_replies_that_hand_back_the_users_words_are_not_assistant_facts(self) -> None:
        pages = [
            page(1, "I'm vegetarian.", "Got it, I'll remember that you're vegetarian."),
            page(2, "What is my job?", "You told me you are a nurse in Lyon."),
            page(3, "Where do I work?", "[2024-05-01 10:00:00] User: I am a nurse in Lyon."),
            page(4, "I love hiking in the Alps.", "I love hiking in the Alps too!"),
            page(5, "Hi", "[2026-11-23 05:07:05] User: Hi, my name is Rui. I'm a nurse in Lyon."),
            page(6, "Hello", "Hello! Noted: the train was late. I'll be glad to help."),
        ]
        assert OfflineLLM().extract_knowledge(pages).assistant_facts == []

    def test_the_assistants_own_first_person_statements_stay_facts(self) -> None:
        pages = [
            page(1, "I'm vegetarian.", "Got it, I'll remember that you're vegetarian."),
            page(2, "Any museum tips for Lyon?", "I recommend the Musée des Confluences in Lyon."),
        ]
        knowledge = OfflineLLM().extract_knowledge(pages)
        assert knowledge.assistant_facts == ["Assistant: I recommend the Musée des Confluences in Lyon."]

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


def ask(query: str, *user_lines: str, agent: str = "OK.", **fields: object) -> str:
    """The offline answer to `query` with one retrieved page per user line (each with `agent` as reply)."""
    pages = [page(i + 1, line, agent, f"2024-05-01 10:{i:02d}:00") for i, line in enumerate(user_lines)]
    return OfflineLLM().answer(request(query, pages).model_copy(update=fields))


class TestStatementOrQuestion:
    @pytest.mark.parametrize(
        "text",
        [
            "Where do I live?",
            "where do i live",
            "What's my dog called",
            "Do I have a pet",
            "Is my sister older than me",
            "Tell me what I do for work",
            "Remind me where my mother lives",
            "What do you remember about my job",
            "Hi! Who is my best friend?",
        ],
    )
    def test_questions_are_answered_from_memory(self, text: str) -> None:
        assert not ask(text).startswith(ACKNOWLEDGED)

    @pytest.mark.parametrize(
        "text",
        [
            "I work as a data scientist.",
            "When I was young I lived in Rome.",
            "What I love most is sailing.",
            "Remind me to buy milk.",
            "My sister is older than me",
        ],
    )
    def test_statements_are_acknowledged(self, text: str) -> None:
        assert ask(text).startswith(ACKNOWLEDGED)


class TestAcknowledgement:
    def test_says_it_remembers_in_the_second_person(self) -> None:
        assert ask("I work as a data scientist.") == (
            "Got it, I'll remember that you work as a data scientist."
        )
        assert ask("We're moving to Grenoble in September!") == (
            "Got it, I'll remember that you're moving to Grenoble in September."
        )
        assert ask("I am sure you are right about my plans.") == (
            "Got it, I'll remember that you are sure I am right about your plans."
        )

    def test_greetings_and_store_requests_are_trimmed(self) -> None:
        assert ask("Hi, I'm Tom.") == "Hello! Got it, I'll remember that you're Tom."
        assert ask("Remember that my locker code is 4512.") == (
            "Got it, I'll remember that your locker code is 4512."
        )

    def test_a_statement_not_about_the_user_is_noted(self) -> None:
        assert ask("The train was late again this morning.") == (
            "Noted: the train was late again this morning."
        )

    def test_pleasantries_get_a_reply_in_kind(self) -> None:
        assert ask("thanks!") == "You're welcome!"
        assert ask("ok") == "OK."
        assert ask("bye") == "Bye! I'll remember what you told me."

    def test_never_says_it_has_nothing_in_memory(self) -> None:
        for text in ["I'm vegetarian.", "My cat is called Miso.", "Nice weather today.", "hello"]:
            assert NOT_IN_MEMORY not in ask(text)


class TestAnswer:
    def test_quotes_the_best_matching_statement_in_the_second_person(self) -> None:
        reply = ask("Which subject do you teach to teenagers?", MATH.user_input, TEACHER.user_input)
        assert reply == "You told me you teach math to teenagers in Lyon."

    @pytest.mark.parametrize(
        ("question", "said", "expected"),
        [
            ("What do I do for a living?", "I work as a data scientist.", "data scientist"),
            ("What's my profession?", "I am a nurse at the children's hospital.", "nurse"),
            ("Do I have a pet?", "My cat is called Miso.", "Miso"),
            ("Where do I live?", "I live in Manchester with my partner Sam.", "Manchester"),
            ("Where am I from?", "I grew up in Pune.", "Pune"),
            ("What's my favorite food?", "My favourite food is ramen.", "ramen"),
            ("What language am I studying?", "I'm learning German at an evening class.", "German"),
            ("When is my wedding?", "I'm getting married on 12 October.", "12 October"),
            ("What are my plans for December?", "I'm going to visit Osaka in December.", "Osaka"),
            ("Do I have a boat?", "I own a small sailboat.", "sailboat"),
            ("What did I buy?", "I bought a green gravel bike.", "bike"),
            ("What's my name?", "Hi, I'm Tom.", "Tom"),
        ],
    )
    def test_paraphrased_questions_find_the_statement(self, question: str, said: str, expected: str) -> None:
        distractors = ["I drive an old blue Volvo.", "The weather was awful.", "My birthday is in March."]
        reply = ask(question, *distractors, said)
        assert reply.startswith(TOLD_ME) and expected in reply

    def test_a_person_asked_about_must_be_named(self) -> None:
        said = ("My name is Ann.", "My husband works at the bank.", "I live in Lyon.")
        assert ask("What is my sister's name?", *said) == NOT_IN_MEMORY
        assert ask("Where does my mother live?", *said) == NOT_IN_MEMORY
        assert "bank" in ask("What does my husband do?", *said)

    def test_a_name_asked_about_must_be_said(self) -> None:
        assert ask("Where does Maria live?", "My sister Ann lives in Porto.") == NOT_IN_MEMORY
        assert "Porto" in ask("Where does Ann live?", "My sister Ann lives in Porto.")

    def test_padding_words_alone_do_not_answer(self) -> None:
        assert ask("Where did I go to university?", "I'm going to visit my aunt.") == NOT_IN_MEMORY

    def test_says_so_when_memory_holds_nothing(self) -> None:
        assert OfflineLLM().answer(request("Who won the chess tournament?", [TEACHER, MATH])) == NOT_IN_MEMORY

    def test_facts_and_profile_lines_of_this_backend_are_evidence(self) -> None:
        reply = ask("Am I allergic to anything?", user_knowledge=["User: I'm allergic to peanuts."])
        assert reply == "You told me you're allergic to peanuts."
        reply = ask("Where do I work?", user_profile="- User: I work at the aquarium.\n- Likes tea")
        assert reply == "You told me you work at the aquarium."

    def test_statements_in_the_same_message_count(self) -> None:
        reply = ask("I have a dog called Rex. What's my dog called?")
        assert reply == (
            "Got it, I'll remember that you have a dog called Rex. You told me you have a dog called Rex."
        )

    def test_earlier_answers_are_never_quoted(self) -> None:
        earlier = [
            page(1, "I am a nurse in Lyon.", "Got it, I'll remember that you are a nurse in Lyon."),
            page(2, "What is my job?", "You told me you are a nurse in Lyon."),
            page(3, "Where do I work?", "[2024-05-01 10:00:00] User: I am a nurse in Lyon."),
        ]
        reply = OfflineLLM().answer(request("What is my job?", earlier))
        assert reply == "You told me you are a nurse in Lyon."

    def test_the_assistants_own_words_when_no_statement_matches(self) -> None:
        reply = OfflineLLM().answer(request("Tell me that carbonara recipe again", [TEACHER], [PASTA]))
        assert reply == "Earlier I said: Try carbonara: eggs, pecorino, guanciale."

    def test_short_term_pages_are_searched_too(self) -> None:
        reply = OfflineLLM().answer(request("Where do I teach math?", [TEACHER], [PASTA, MATH]))
        assert "math to teenagers" in reply

    def test_the_same_request_gives_the_same_answer(self) -> None:
        question = request("Where do I live?", [TEACHER, MATH, PASTA])
        assert OfflineLLM().answer(question) == OfflineLLM().answer(question)


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
