"""`OfflineLLM`: every memory task done extractively, with no model and no network.

It is the backend when no API key is configured, so the whole pipeline runs (and is tested) anywhere.
Everything is deterministic and built from the words of the pages themselves: summaries are the pages'
most informative sentences, facts are the user's own first-person sentences, answers quote memory. It
never invents, and it says so when memory holds nothing on the question. Tokens are estimated from the
text each task read and wrote, so usage reads like the OpenAI backend's.
"""

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.usage import Operation, UsageCounter, estimate_tokens
from memoryos.types import Page

MAX_SUMMARY_CHARS = 200
MAX_KEYWORDS = 5
MAX_FACT_CHARS = 200
MAX_PROFILE_LINES = 40
"""Profile lines kept; beyond it the oldest lines give way to the newest."""
MAX_ANSWER_SENTENCES = 3
MAX_PHATIC_WORDS = 6
NOT_IN_MEMORY = "I don't have that in memory."

_STOPWORD_LIST = """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did didn do does doesn doing don down during each else even ever
few for from further get gets had has have having he her here hers herself him himself his how i if
in into is isn it its itself just ll let me might more most much must my myself no nor not now of
off on once only or other our ours ourselves out over own re really same she should so some such
than that the their theirs them themselves then there these they this those through to too under
until up us ve very was wasn we were what when where which while who whom why will with would you
your yours yourself yourselves
"""
STOPWORDS = frozenset(_STOPWORD_LIST.split())
"""Function words that say nothing about a topic (English; other languages keep all their words)."""

_PHATIC_LIST = """
ok okay thanks thank thx ty yes yeah yep yup no nope sure cool great nice lol haha hmm right alright
wow awesome good fine bye hi hello hey got see agreed exactly indeed true oh ah cheers welcome glad
happy sorry pleasure help
"""
PHATIC = frozenset(_PHATIC_LIST.split())
"""Words of turns that keep a conversation going without a subject of their own ("ok thanks!")."""

_WORD = re.compile(r"\w+")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\n+")
_USER_FACT = re.compile(
    r"\b(?:i am|i'm|i was|i have|i've|i had|i work|i worked|i live|i lived|i like|i love|i enjoy|i hate|"
    r"i prefer|i want|i plan|i went|i visited|i moved|i bought|i got|i started|i study|i studied|"
    r"my name is|my \w+(?: \w+)? (?:is|are|was|were))\b",
    re.IGNORECASE,
)
_ASSISTANT_FACT = re.compile(
    r"\b(?:i am|i'm|i have|i've|i can|i'll|i will|i recommend|i recommended|i suggest|i suggested|"
    r"i found|i created|i wrote|my name is)\b",
    re.IGNORECASE,
)


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
        user_words = _words(current.user_input)
        phatic = 0 < len(user_words) <= MAX_PHATIC_WORDS and all(
            w in PHATIC or w in STOPWORDS for w in user_words
        )
        current_words = _content_words(current.user_input) or _content_words(_spoken(current))
        continues = phatic or bool(current_words & _content_words(_spoken(previous)))
        self._record("continuity", [_spoken(previous), _spoken(current)], "yes" if continues else "no")
        return continues

    def summarize_chain(self, pages: Sequence[Page]) -> str:
        summary = _extractive_summary(pages, max_sentences=2)
        self._record("chain_summary", [_spoken(page) for page in pages], summary)
        return summary

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        """The most informative sentence, and the most frequent content words as keywords."""
        counts = Counter(
            word
            for page in pages
            for word in _words(_spoken(page))
            if word not in STOPWORDS and len(word) > 2 and not word.isdigit()
        )
        topic = TopicSummary(
            summary=_extractive_summary(pages, max_sentences=1),
            keywords=[word for word, _ in counts.most_common(MAX_KEYWORDS)],
        )
        self._record(
            "topic", [_spoken(page) for page in pages], f"{topic.summary} {' '.join(topic.keywords)}"
        )
        return topic

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        """The current profile's lines plus one line per new user fact; unchanged when there is none."""
        new_lines = [f"- {fact}" for fact in _user_facts(pages)]
        profile = current_profile
        if new_lines:
            merged = _dedupe(
                [line.strip() for line in current_profile.splitlines()] + new_lines, _profile_key
            )
            profile = "\n".join(merged[-MAX_PROFILE_LINES:])
        self._record("profile", [current_profile, *(_spoken(page) for page in pages)], profile)
        return profile

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        """The user's first-person statements ("I work at ...") as user facts, the assistant's ("I
        recommend ...") as assistant facts, each prefixed with who said it and kept verbatim."""
        assistant_sentences = (
            sentence
            for page in pages
            for sentence in _sentences(page.agent_response)
            if _is_statement(sentence, _ASSISTANT_FACT)
        )
        knowledge = ExtractedKnowledge(
            user_facts=_user_facts(pages),
            assistant_facts=_dedupe(f"Assistant: {_clip(s, MAX_FACT_CHARS)}" for s in assistant_sentences),
        )
        output = "\n".join(knowledge.user_facts + knowledge.assistant_facts)
        self._record("knowledge", [_spoken(page) for page in pages], output)
        return knowledge

    def answer(self, request: AnswerRequest) -> str:
        """The memory sentences sharing the most words with the query, each with its page's timestamp;
        retrieved pages rank before short-term ones on ties, being the retriever's pick for the query."""
        query_words = _content_words(request.query)
        pages = list({page.page_id: page for page in [*request.retrieved, *request.short_term]}.values())
        scored: list[tuple[int, str]] = []
        for page in pages:
            for speaker, text in (("User", page.user_input), ("Assistant", page.agent_response)):
                for sentence in _sentences(text):
                    overlap = len(query_words & _content_words(sentence))
                    if overlap:
                        scored.append((overlap, f"[{page.timestamp}] {speaker}: {sentence}"))
        scored.sort(key=lambda item: -item[0])
        reply = "\n".join(line for _, line in scored[:MAX_ANSWER_SENTENCES]) or NOT_IN_MEMORY
        self._record("answer", [request.query, *(_spoken(page) for page in pages)], reply)
        return reply

    def _record(self, operation: Operation, inputs: Iterable[str], output: str) -> None:
        prompt_tokens = sum(estimate_tokens(text) for text in inputs)
        self._usage.record(operation, prompt_tokens, estimate_tokens(output))


def _spoken(page: Page) -> str:
    """Both sides of the exchange without speaker labels (`Page.text()` has them), which would otherwise
    count as words every page shares."""
    return f"{page.user_input}\n{page.agent_response}"


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _content_words(text: str) -> set[str]:
    """Lowercased words that carry meaning: no stopwords, no single letters (digits count)."""
    return {word for word in _words(text) if word not in STOPWORDS and (len(word) > 1 or word.isdigit())}


def _sentences(text: str) -> list[str]:
    return [sentence.strip() for sentence in _SENTENCE_BREAK.split(text) if sentence.strip()]


def _extractive_summary(pages: Sequence[Page], *, max_sentences: int) -> str:
    """The pages' most informative sentences, in their original order, within `MAX_SUMMARY_CHARS`.

    A sentence scores the number of sentences sharing each of its content words, summed: words the chain
    keeps returning to mark its subject. Ties go to the earlier sentence.
    """
    sentences = [
        s for page in pages for text in (page.user_input, page.agent_response) for s in _sentences(text)
    ]
    if not sentences:
        return ""
    words_of = [_content_words(sentence) for sentence in sentences]
    spread = Counter(word for words in words_of for word in words)
    ranked = sorted(range(len(sentences)), key=lambda i: -sum(spread[word] for word in words_of[i]))
    chosen = [ranked[0]]
    length = len(sentences[ranked[0]])
    for index in ranked[1:max_sentences]:
        if length + 1 + len(sentences[index]) > MAX_SUMMARY_CHARS:
            break
        chosen.append(index)
        length += 1 + len(sentences[index])
    return _clip(" ".join(sentences[i] for i in sorted(chosen)), MAX_SUMMARY_CHARS)


def _user_facts(pages: Sequence[Page]) -> list[str]:
    sentences = (
        sentence
        for page in pages
        for sentence in _sentences(page.user_input)
        if _is_statement(sentence, _USER_FACT)
    )
    return _dedupe(f"User: {_clip(sentence, MAX_FACT_CHARS)}" for sentence in sentences)


def _is_statement(sentence: str, pattern: re.Pattern[str]) -> bool:
    """A first-person statement with substance: not a question, and not only phatic words ("I'm fine")."""
    if sentence.endswith("?") or not pattern.search(sentence.replace("’", "'")):
        return False
    return bool(_content_words(sentence) - PHATIC)


def _clip(text: str, max_chars: int) -> str:
    """`text` cut at a word boundary to at most `max_chars`, with an ellipsis when cut."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"


def _profile_key(line: str) -> str:
    return line.lstrip("-*• ").casefold()


def _dedupe(items: Iterable[str], key: Callable[[str], str] = str.casefold) -> list[str]:
    seen: set[str] = set()
    kept: list[str] = []
    for item in items:
        if item and key(item) not in seen:
            seen.add(key(item))
            kept.append(item)
    return kept
