"""What the offline backend (`backend.py`) keeps of pages: extractive summaries and first-person facts.

Both are taken verbatim from the pages, never written: a summary is the pages' most informative
sentences, a fact is a first-person statement of the user ("I work at ...") or of the assistant ("I
recommend ..."), prefixed with who said it.
"""

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from memoryos.llm.offline.replies import own_sentences
from memoryos.llm.offline.text import PHATIC, clip, content_words, dedupe, split_sentences
from memoryos.types import Page

MAX_SUMMARY_CHARS = 200
MAX_FACT_CHARS = 200

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


def extractive_summary(pages: Sequence[Page], *, max_sentences: int) -> str:
    """The pages' most informative sentences, in their original order, within `MAX_SUMMARY_CHARS`.

    A sentence scores the number of sentences sharing each of its content words, summed: words the chain
    keeps returning to mark its subject. Ties go to the earlier sentence.
    """
    sentences = [
        s for page in pages for text in (page.user_input, page.agent_response) for s in split_sentences(text)
    ]
    if not sentences:
        return ""
    words_of = [content_words(sentence) for sentence in sentences]
    spread = Counter(word for words in words_of for word in words)
    ranked = sorted(range(len(sentences)), key=lambda i: -sum(spread[word] for word in words_of[i]))
    chosen = [ranked[0]]
    length = len(sentences[ranked[0]])
    for index in ranked[1:max_sentences]:
        if length + 1 + len(sentences[index]) > MAX_SUMMARY_CHARS:
            break
        chosen.append(index)
        length += 1 + len(sentences[index])
    return clip(" ".join(sentences[i] for i in sorted(chosen)), MAX_SUMMARY_CHARS)


def user_facts(pages: Sequence[Page]) -> list[str]:
    """The user's first-person statements ("I work at ..."), verbatim, as "User: ..." lines."""
    sentences = (sentence for page in pages for sentence in split_sentences(page.user_input))
    return _facts(sentences, _USER_FACT, "User")


def assistant_facts(pages: Sequence[Page]) -> list[str]:
    """The assistant's first-person statements ("I recommend ..."), verbatim, as "Assistant: ..." lines;
    only sentences of its own (`own_sentences`), never the user's words handed back."""
    sentences = (sentence for page in pages for sentence in own_sentences(page))
    return _facts(sentences, _ASSISTANT_FACT, "Assistant")


def _facts(sentences: Iterable[str], pattern: re.Pattern[str], speaker: str) -> list[str]:
    return dedupe(
        f"{speaker}: {clip(sentence, MAX_FACT_CHARS)}"
        for sentence in sentences
        if _is_statement(sentence, pattern)
    )


def _is_statement(sentence: str, pattern: re.Pattern[str]) -> bool:
    """A first-person statement with substance: not a question, and not only phatic words ("I'm fine")."""
    if sentence.endswith("?") or not pattern.search(sentence.replace("’", "'")):
        return False
    return bool(content_words(sentence) - PHATIC)
