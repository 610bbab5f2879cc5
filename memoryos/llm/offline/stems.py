"""When two words are the same word, for the offline backend (`backend.py`): stemming and related words.

A question and the statement that answers it rarely use the same form of a word ("where do I live?",
"I'm living in Lyon"), and often not the same word ("what do I do for a living?", "I work as a nurse").
So words are compared after a light English stemming, common phrasings of a relation are rewritten to
one word first, and a small map of very common relations lets a question's word find a statement's
("living" → "work", "pet" → "dog"). The rules are general English, not phrases of any test set.
"""

import functools
import re

from memoryos.llm.offline.text import content_words, normalize_quotes, word_set

_PHRASES = [
    (re.compile(r"\bfor a living\b"), " job "),
    (re.compile(r"\b(?:can't|cannot|can not|couldn't) stand\b"), " dislike "),
    (
        re.compile(
            r"\b(?:don't|do not|doesn't|does not|didn't|did not|never)(?:\s+(?:i|you|we|he|she|they))?\s+"
            r"(?:like|liked|enjoy|enjoyed)\b"
        ),
        " dislike ",
    ),
    (re.compile(r"\b(?:grew|grow|growing|raised|brought) up\b|\bwas born\b"), " hometown "),
    (re.compile(r"\b(?:originally|come|comes|came|am|i'm|is|are)\s+from\b"), " hometown "),
    (
        re.compile(
            r"\b(?:going|planning|plan|plans|hoping|hope|hopes|want|wants|would like|intend|intending)\s+to\b"
        ),
        " plan ",
    ),
    (re.compile(r"\b(?:i'm|i am|we're|we are)\s+(?:really\s+|very\s+|big\s+)?into\b"), " i like "),
]
"""Common phrasings of a relation, rewritten to one word before words are compared (both sides)."""

_SYNONYM_GROUPS = """
job work career profession occupation employed employer workplace
live home reside resident based address
hometown origin native born
name named called call
like love enjoy prefer fan adore favourite favorite
dislike hate detest loathe
learn study class course lesson
film movie cinema
travel trip vacation holiday journey
wedding married marry marriage engaged
kid child children kids
mother mom mum
father dad
plan goal want intend hope aim
buy purchase
car vehicle
"""
_BROADER = {
    "pet": "cat dog kitten puppy bird parrot fish hamster rabbit",
    "kid": "son daughter",
    "child": "son daughter",
    "parent": "mother father mom mum dad",
    "sibling": "sister brother",
    "grandparent": "grandmother grandfather grandma grandpa",
    "partner": "husband wife spouse boyfriend girlfriend",
    "spouse": "husband wife partner",
    "husband": "partner spouse",
    "wife": "partner spouse",
    "hobby": "like love enjoy play pastime",
}
"""A question's general word → the specific words that answer it ("a pet?" → "my dog"), one way only."""
_KIN = word_set(
    """mother mom mum father dad parent parents sister brother sibling wife husband partner spouse boyfriend
    girlfriend son daughter kid kids child children baby grandmother grandfather grandma grandpa grandparent
    grandparents aunt uncle cousin niece nephew friend boss colleague coworker neighbour neighbor roommate
    flatmate"""
)
"""People: a question about one is answered only by a statement naming them (or a word for them)."""
_MODIFIERS = word_set(
    "favourite favorite best new old first last current next little big older younger eldest oldest "
    "youngest previous main usual dream own"
)
"""Words before the noun in "my favourite film", "my best friend": the noun is what the question is about."""
_WEAK = word_set(
    """go get make take come know think feel kind sort type thing anything something stuff lot tell remind
    remember recall say mention show still usually currently right please"""
)
"""Question padding: a match on these alone says nothing; they count half beside a real match."""
_DERIVED = frozenset({"er", "or", "ist", "i", "ion", "ation"})
"""Suffixes, after stemming, that make a word of another: "teach" / "teacher", "design" / "designer"."""
_IRREGULAR = {
    "bought": "buy", "went": "go", "gone": "go", "grew": "grow", "grown": "grow", "ate": "eat",
    "eaten": "eat", "drove": "drive", "driven": "drive", "taught": "teach", "flew": "fly", "flown": "fly",
    "saw": "see", "seen": "see", "met": "meet", "made": "make", "got": "get", "gotten": "get", "had": "have",
    "has": "have", "children": "child", "wrote": "write", "written": "write", "spoke": "speak",
    "spoken": "speak", "ran": "run", "swam": "swim", "sang": "sing", "began": "begin", "begun": "begin",
    "left": "leave", "lost": "lose", "won": "win", "paid": "pay", "sold": "sell", "told": "tell",
    "thought": "think", "brought": "bring", "caught": "catch", "felt": "feel", "kept": "keep",
    "slept": "sleep", "found": "find", "held": "hold", "stood": "stand", "chose": "choose",
    "chosen": "choose", "fell": "fall", "gave": "give", "given": "give", "took": "take", "taken": "take",
    "knew": "know", "known": "know", "wore": "wear", "worn": "wear", "said": "say", "built": "build",
    "sent": "send", "spent": "spend", "lent": "lend", "broke": "break", "broken": "break", "woke": "wake",
    "drank": "drink", "drunk": "drink", "rode": "ride", "ridden": "ride", "women": "woman", "men": "man",
    "people": "person", "feet": "foot", "teeth": "tooth", "mice": "mouse", "wives": "wife",
    "lives": "live", "knives": "knife", "leaves": "leaf",
}  # fmt: skip


@functools.lru_cache(maxsize=65536)
def stem_of(word: str) -> str:
    """A light English stemmer: plurals, -ed, -ing and a final e go and a final y becomes i, so "lives",
    "living" and "lived" meet, and so do "movie" and "movies". Cached: every answer stems the same
    vocabulary of every stored sentence again."""
    word = word.casefold()
    if word in _IRREGULAR:
        return stem_of(_IRREGULAR[word])
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith(("ies", "ied")) and len(word) > 4:
        return word[:-3] + "i"
    if word.endswith(("ches", "shes", "sses", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]  # the plural first: "siblings" → "sibling" → "sibl", as "sibling" does
    if word.endswith("ing") and len(word) >= 6 and _has_vowel(word[:-3]):
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) >= 5 and _has_vowel(word[:-2]):
        word = _undouble(word[:-2])
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    if word.endswith("y") and len(word) > 3:
        word = word[:-1] + "i"  # "hobby" and "hobbies", "study" and "studied" meet at "hobbi", "studi"
    return word


def _has_vowel(text: str) -> bool:
    return any(c in "aeiouy" for c in text)


def _undouble(stem: str) -> str:
    """ "runn" → "run", "plann" → "plan"; "call", "miss" keep theirs."""
    if len(stem) >= 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz" and stem[-1] not in "aeiou":
        return stem[:-1]
    return stem


def rephrase(text: str) -> str:
    """Lowercased, with curly quotes straightened and the common phrasings of `_PHRASES` rewritten."""
    text = normalize_quotes(text).casefold()
    for pattern, replacement in _PHRASES:
        text = pattern.sub(replacement, text)
    return text


def stems_of(text: str) -> set[str]:
    """The stems of the content words of `text`, after `rephrase`."""
    return {stem_of(word) for word in content_words(rephrase(text))}


def _group_map() -> dict[str, frozenset[str]]:
    related: dict[str, set[str]] = {}
    for line in _SYNONYM_GROUPS.strip().splitlines():
        group = {stem_of(word) for word in line.split()}
        for member in group:
            related.setdefault(member, set()).update(group - {member})
    for general, specific in _BROADER.items():
        related.setdefault(stem_of(general), set()).update(stem_of(word) for word in specific.split())
    return {word: frozenset(words) for word, words in related.items()}


RELATED = _group_map()
"""A stem → the stems of words that answer a question using it: synonyms both ways, specifics one way."""
KIN_STEMS = frozenset(stem_of(word) for word in _KIN)
WEAK_STEMS = frozenset(stem_of(word) for word in _WEAK)
MODIFIER_STEMS = frozenset(stem_of(word) for word in _MODIFIERS)


def same_word(query: str, evidence: str, *, compound: bool = True) -> bool:
    """The same stem; one derived from the other ("teach" / "teacher"); or, with `compound`, the evidence a
    compound ending in the query's word ("boat" / "sailboat")."""
    if query == evidence:
        return True
    short, long = sorted((query, evidence), key=len)
    if len(short) >= 4 and long.startswith(short) and long[len(short) :] in _DERIVED:
        return True
    return compound and len(query) >= 4 and evidence.endswith(query) and len(evidence) - len(query) >= 3
