"""The user's words said back to them, for the offline backend's chat replies (`memoryos/llm/offline/answers.py`).

"I work as a nurse" is acknowledged as "you work as a nurse" and quoted in an answer the same way; the
pronoun swap and the casing of a quoted first word are one concern, apart from deciding what to say.
"""

import re

from memoryos.llm.offline.text import AUXILIARY, PHATIC, STOPWORDS, word_set

PERSON_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
"""A word with its apostrophe part ("I'm", "don't"), as written: the unit of the pronoun swap."""

_SWAP = {
    "i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself", "i'm": "you're",
    "i've": "you've", "i'll": "you'll", "i'd": "you'd", "we": "you", "us": "you", "our": "your",
    "ours": "yours", "ourselves": "yourselves", "we're": "you're", "we've": "you've", "we'll": "you'll",
    "we'd": "you'd", "your": "my", "yours": "mine", "yourself": "myself", "you're": "I'm",
    "you've": "I've", "you'll": "I'll", "you'd": "I'd",
}  # fmt: skip
_YOU_AS_SUBJECT_AFTER = word_set("and but that if when because so or")
_VERB_AFTER_SUBJECT = AUXILIARY | word_set("don't didn't can't won't wouldn't always never just really also")
""""you" before one of these is a subject ("I think you are right" → "you think I am right")."""
_OPENERS = word_set(
    """you your yours every each last next this yesterday today tonight tomorrow recently lately sometimes
    usually often always never since most many several one two three ever still also"""
)
"""Common first words of a statement, lowercased when it is quoted inside a reply; other capitalized first
words may be names ("Pico chewed my shoes") and keep their capital."""


def second_person(text: str) -> str:
    """The user's words as said back to them: "I am" → "you are", "my" → "your", "you" → "I"/"me"."""
    tokens = list(PERSON_TOKEN.finditer(text))
    out: list[str] = []
    position = 0
    previous = ""  # the previous word as written out
    for index, match in enumerate(tokens):
        word = match.group()
        lower = word.casefold()
        following = tokens[index + 1].group().casefold() if index + 1 < len(tokens) else ""
        if lower == "you":
            subject = not previous or previous in _YOU_AS_SUBJECT_AFTER or following in _VERB_AFTER_SUBJECT
            swapped = "I" if subject else "me"
        elif lower in ("am", "was") and previous == "you":
            swapped = "are" if lower == "am" else "were"
        elif lower in ("are", "were") and previous == "I":
            swapped = "am" if lower == "are" else "was"
        else:
            swapped = _SWAP.get(lower, word)
        if swapped != word and match.start() == 0 and word[0].isupper():
            swapped = swapped[0].upper() + swapped[1:]
        out.append(text[position : match.start()] + swapped)
        position = match.end()
        previous = swapped if swapped == "I" else swapped.casefold()
    return "".join(out) + text[position:]


def lower_first(text: str) -> str:
    """`text` to follow "You told me": its first word lowercased unless it is "I" or looks like a name."""
    words = PERSON_TOKEN.findall(text)
    if not words or words[0] == "I" or words[0].startswith("I'"):
        return text
    first = words[0].casefold()
    common = first in STOPWORDS or first in PHATIC or first in _SWAP or first in _OPENERS
    return text[0].lower() + text[1:] if common else text
