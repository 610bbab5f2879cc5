"""`OfflineLLM`: every memory task done extractively, with no model and no network.

It is the backend when no API key is configured, so the whole pipeline runs (and is tested) anywhere.
Everything is deterministic and built from the words of the pages themselves: summaries are the pages'
most informative sentences, facts are the user's own first-person sentences. It never invents. Tokens are
estimated from the text each task read and wrote, so usage reads like the OpenAI backend's.

As a chat partner (`answer`) it tells a statement from a question. A statement is acknowledged as
remembered ("Got it, I'll remember that you work as a nurse."). A question is answered from what the
user said — their statements in the retrieved and recent pages, their facts and profile — quoted back in
the second person ("You told me you work as a nurse."); it says "I don't have that in memory." only when
no statement matches. Its own earlier replies are never evidence, so answers never nest earlier answers,
and `extract_knowledge` keeps them out of the assistant's facts.

This module is the `MemoryLLM` face of the backend; the work is in its helpers, one concern each: words
and sentences (`memoryos/llm/offline/text.py`), word matching (`memoryos/llm/offline/stems.py`), summaries and facts
(`memoryos/llm/offline/extracts.py`), chat replies (`memoryos/llm/offline/answers.py`, `memoryos/llm/offline/person.py`) and telling the
assistant's own words from the user's handed back (`memoryos/llm/offline/replies.py`).
"""

from collections import Counter
from collections.abc import Iterable, Sequence

from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.offline.answers import acknowledge, answer_question, is_question
from memoryos.llm.offline.extracts import assistant_facts, extractive_summary, user_facts
from memoryos.llm.offline.replies import NOT_IN_MEMORY
from memoryos.llm.offline.text import PHATIC, STOPWORDS, content_words, dedupe, lower_words, split_sentences
from memoryos.llm.usage import Operation, UsageCounter, estimate_tokens
from memoryos.types import Page

MAX_KEYWORDS = 5
MAX_PROFILE_LINES = 40
"""Profile lines kept; beyond it the oldest lines give way to the newest."""
MAX_PHATIC_WORDS = 6


class OfflineLLM:
    """`MemoryLLM` without a model; safe to call from several threads at once."""

    def __init__(self) -> None:
        self._usage = UsageCounter()

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self._usage.snapshot()

    def is_continuation(self, previous: Page, current: Page) -> bool:
        """Yes when the user's new words share a content word with the previous exchange, or the new turn
        is phatic ("ok, thanks!"). The user's side decides: assistant replies share filler across topics."""
        user_words = lower_words(current.user_input)
        phatic = 0 < len(user_words) <= MAX_PHATIC_WORDS and all(
            w in PHATIC or w in STOPWORDS for w in user_words
        )
        current_words = content_words(current.user_input) or content_words(_spoken(current))
        continues = phatic or bool(current_words & content_words(_spoken(previous)))
        self._record("continuity", [_spoken(previous), _spoken(current)], "yes" if continues else "no")
        return continues

    def summarize_chain(self, pages: Sequence[Page]) -> str:
        summary = extractive_summary(pages, max_sentences=2)
        self._record("chain_summary", [_spoken(page) for page in pages], summary)
        return summary

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        """The most informative sentence, and the most frequent content words as keywords."""
        counts = Counter(
            word
            for page in pages
            for word in lower_words(_spoken(page))
            if word not in STOPWORDS and len(word) > 2 and not word.isdigit()
        )
        topic = TopicSummary(
            summary=extractive_summary(pages, max_sentences=1),
            keywords=[word for word, _ in counts.most_common(MAX_KEYWORDS)],
        )
        self._record(
            "topic", [_spoken(page) for page in pages], f"{topic.summary} {' '.join(topic.keywords)}"
        )
        return topic

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        """The current profile's lines plus one line per new user fact; unchanged when there is none."""
        new_lines = [f"- {fact}" for fact in user_facts(pages)]
        profile = current_profile
        if new_lines:
            merged = dedupe([line.strip() for line in current_profile.splitlines()] + new_lines, _profile_key)
            profile = "\n".join(merged[-MAX_PROFILE_LINES:])
        self._record("profile", [current_profile, *(_spoken(page) for page in pages)], profile)
        return profile

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        """The user's first-person statements ("I work at ...") as user facts, the assistant's ("I
        recommend ...") as assistant facts, each prefixed with who said it and kept verbatim.

        An assistant sentence that only hands the user's words back is not a fact about the assistant: a
        reply that quotes an exchange (a speaker label or a `[2024-05-01` timestamp) or is one of this
        backend's acknowledgements and answers, a sentence reporting what the user said ("you told me ...",
        "I'll remember that you ..."), or one whose words are mostly those of the message it replies to."""
        knowledge = ExtractedKnowledge(user_facts=user_facts(pages), assistant_facts=assistant_facts(pages))
        output = "\n".join(knowledge.user_facts + knowledge.assistant_facts)
        self._record("knowledge", [_spoken(page) for page in pages], output)
        return knowledge

    def answer(self, request: AnswerRequest) -> str:
        """A question is answered from what the user said (`answer_question`); anything else is a
        statement, acknowledged as remembered: "Got it, I'll remember that you work as a nurse." """
        sentences = split_sentences(request.query)
        questions = [s for s in sentences if is_question(s)]
        statements = [s for s in sentences if not is_question(s)]
        if not questions:
            reply = acknowledge(statements)
        else:
            answers = [answer_question(question, request, statements) for question in questions]
            found = dedupe(a for a in answers if a is not None)
            reply = " ".join(found) if found else NOT_IN_MEMORY
            if any(content_words(s) - PHATIC for s in statements):
                reply = f"{acknowledge(statements)} {reply}"
        self._record(
            "answer",
            [request.query, *(_spoken(page) for page in [*request.retrieved, *request.short_term])],
            reply,
        )
        return reply

    def _record(self, operation: Operation, inputs: Iterable[str], output: str) -> None:
        prompt_tokens = sum(estimate_tokens(text) for text in inputs)
        self._usage.record(operation, prompt_tokens, estimate_tokens(output))


def _spoken(page: Page) -> str:
    """Both sides of the exchange without speaker labels (`Page.text()` has them), which would otherwise
    count as words every page shares."""
    return f"{page.user_input}\n{page.agent_response}"


def _profile_key(line: str) -> str:
    return line.lstrip("-*• ").casefold()
