"""Words and sentences as the offline backend (`backend.py`) reads them.

Every task of that backend — summaries, facts, chat replies — starts from the same tokenizing, the same
word lists and the same sentence breaks; they live here once so that a summary and an answer agree on
what a word is. English only: other languages keep all their words (none is a stopword).
"""

import re
from collections.abc import Callable, Iterable

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


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of a word list written as one string."""
    return frozenset(text.split())


AUXILIARY = word_set(
    "am is are was were do does did have has had can could will would should shall may might"
)
"""Verbs that open a question before their subject ("do I", "is my") and follow a subject ("you are")."""


def lower_words(text: str) -> list[str]:
    """The words of `text`, casefolded, in order."""
    return _WORD.findall(text.casefold())


def content_words(text: str) -> set[str]:
    """Lowercased words that carry meaning: no stopwords, no single letters (digits count)."""
    return {word for word in lower_words(text) if word not in STOPWORDS and (len(word) > 1 or word.isdigit())}


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped: a break after end punctuation or at a line break."""
    return [sentence.strip() for sentence in _SENTENCE_BREAK.split(text) if sentence.strip()]


def normalize_quotes(text: str) -> str:
    """Curly apostrophes straightened, so "I’m" reads as "I'm"."""
    return text.replace("’", "'").replace("‘", "'")


def clip(text: str, max_chars: int) -> str:
    """`text` cut at a word boundary to at most `max_chars`, with an ellipsis when cut."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"


def dedupe(items: Iterable[str], key: Callable[[str], str] = str.casefold) -> list[str]:
    """`items` without empty ones and without repeats by `key`, first occurrence kept, order kept."""
    seen: set[str] = set()
    kept: list[str] = []
    for item in items:
        if not item:
            continue
        marker = key(item)
        if marker not in seen:
            seen.add(marker)
            kept.append(item)
    return kept
