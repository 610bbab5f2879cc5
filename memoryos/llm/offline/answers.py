"""How the offline backend (`backend.py`) replies in a chat: a question is answered, a statement acknowledged.

A sentence is a question by its question mark, its first word or a recall request ("tell me where I
work"). A question is answered from what the user said — their statements in the message, the retrieved
and recent pages, their facts and profile — quoted back in the second person; failing that, from the
assistant's own earlier words; never from an earlier answer, so answers do not nest. A statement is
acknowledged as remembered. The rules are general English, not phrases of any test set.
"""

import re
from collections.abc import Sequence

from memoryos.llm.base import AnswerRequest
from memoryos.llm.offline.extracts import MAX_SUMMARY_CHARS
from memoryos.llm.offline.person import PERSON_TOKEN, lower_first, second_person
from memoryos.llm.offline.replies import ACKNOWLEDGED, EARLIER_I_SAID, TOLD_ME, own_sentences
from memoryos.llm.offline.stems import (
    KIN_STEMS,
    MODIFIER_STEMS,
    RELATED,
    WEAK_STEMS,
    rephrase,
    same_word,
    stem_of,
    stems_of,
)
from memoryos.llm.offline.text import (
    AUXILIARY,
    PHATIC,
    STOPWORDS,
    clip,
    content_words,
    dedupe,
    lower_words,
    normalize_quotes,
    split_sentences,
    word_set,
)

MAX_ANSWER_SENTENCES = 3
ANSWER_MARGIN = 0.75
"""An answer quotes every statement scoring at least this share of the best one (up to
`MAX_ANSWER_SENTENCES`): a question's own word in one statement and a related word in another ("job"
in "a new job at the aquarium", "I'm a marine biologist") are both worth saying."""

_INTERROGATIVE = word_set("what who whom whose where when why how which")
_PRONOUN_SUBJECT = word_set("i you we he she they it my your our his her their there this that")
_CLAUSE_SUBJECT = word_set("i you we he she they")
"""After a wh-word these make a clause, not a question: "When I was young, ..."."""
_RECALL_REQUEST = re.compile(
    r"^(?:please\s+)?(?:(?:can|could|would|will)\s+you\s+)?(?:please\s+)?"
    r"(?:(?:tell|show)\s+me|remind\s+me\s+(?!to\b)|(?:what|which)\s+do\s+you\s+(?:remember|know|recall)"
    r"|do\s+you\s+(?:remember|recall|know)|recall\b|what\s+(?:have|did)\s+i\s+(?:told|tell|say|said))",
    re.IGNORECASE,
)
"""Asking without a question word or mark: "tell me where I work", "remind me what my dog is called"."""
_LEADING_FILLER = re.compile(
    r"^(?:(?:hi|hello|hey|ok|okay|oh|ah|well|so|yes|yeah|sorry|thanks|thank you|by the way|btw|actually|"
    r"anyway|also|and|but|oh well|you know|just so you know|fyi|for the record|honestly|to be honest)"
    r"\b[\s,!.:;—–-]*)+",
    re.IGNORECASE,
)
_STORE_REQUEST = re.compile(
    r"^(?:please\s+)?(?:remember|note|don't forget|do not forget)(?:\s+that)?\b[\s,:]*", re.IGNORECASE
)
""""Remember that my code is 4512": the words after it are the statement."""
_I_AM_A = re.compile(r"\b(?:i'm|i am)\s+(?:a|an)\s+\w", re.IGNORECASE)
"""A job said without a word for it: "I'm a nurse"."""
_I_AM_NAME = re.compile(r"\b(?:I'm|I am)\s+[A-Z][a-z]+\b")
"""A name said without a word for it: "I'm Tom"."""
_GREETING = word_set("hi hello hey")
_THANKS = word_set("thanks thank thx ty cheers")
_FAREWELL = word_set("bye goodbye")
_FIRST_PERSON = word_set("i me my mine myself we us our ours ourselves")
_ASKER = word_set("i my me our we")
"""Words that make a question one about the user."""
_WHERE_FROM = re.compile(r"\bwhere\b.*\bfrom\b")
_TRAILING_PUNCTUATION = re.compile(r"[\s.!…;,:]+$")
_JOB = stem_of("job")
_NAME = stem_of("name")
_HOMETOWN = stem_of("hometown")


def is_question(sentence: str) -> bool:
    """A question mark; a question word not opening a clause ("what is", not "when I was"); an auxiliary
    before its subject ("do I", "is my"); or a recall request ("tell me ...", "remind me where ...")."""
    text = _LEADING_FILLER.sub("", normalize_quotes(sentence).strip())
    if sentence.rstrip().endswith("?"):
        return True
    words = lower_words(text)
    if not words:
        return False
    if words[0] in _INTERROGATIVE:
        return len(words) == 1 or words[1] not in _CLAUSE_SUBJECT
    if words[0] in AUXILIARY and len(words) > 1 and words[1] in _PRONOUN_SUBJECT:
        return True
    return bool(_RECALL_REQUEST.match(text))


def _statement_core(sentence: str) -> str:
    """The sentence without leading filler ("ok, so ...") and store request ("remember that ...")."""
    return _STORE_REQUEST.sub("", _LEADING_FILLER.sub("", normalize_quotes(sentence).strip()))


class _Evidence:
    """One sentence that may answer a question: its words, as stems, and its text as the reply quotes it."""

    def __init__(self, sentence: str, order: int, *, from_user: bool) -> None:
        self.sentence = _statement_core(sentence)
        self.order = order
        self.from_user = from_user
        self.stems = stems_of(self.sentence)
        words = lower_words(self.sentence)
        self.subject = _subject(words)
        # What the sentence says without a word for it: "I'm a nurse" is a job, "I'm Tom" a name.
        self.tags: set[str] = set()
        if from_user and _I_AM_A.search(self.sentence):
            self.tags.add(_JOB)
        if from_user and _I_AM_NAME.search(self.sentence):
            self.tags.add(_NAME)

    def match(self, term: str) -> float:
        """1 for the question's own word, 0.75 for a related one, 0 for none. Compounds count for the
        question's own word only: "boat" finds "sailboat", but "pet" → "fish" must not find "shellfish"."""
        if any(same_word(term, stem) for stem in self.stems):
            return 1.0
        related = RELATED.get(term, frozenset())
        if any(same_word(word, stem, compound=False) for word in related for stem in self.stems):
            return 0.75
        if ({term} | related) & self.tags:
            return 0.75
        return 0.0

    def quoted(self) -> str:
        """The sentence as the reply quotes it: the user's words in the second person, no end punctuation."""
        text = _TRAILING_PUNCTUATION.sub("", self.sentence)
        return second_person(text) if self.from_user else text


def _question_terms(question: str) -> tuple[list[str], set[str]]:
    """The question's stems, and those an answer must contain: the thing asked about after "my"/"our"
    ("my sister's name" → sister, "my favourite film" → film), any person ("my mother"), and names."""
    text = rephrase(question)
    terms = list(dict.fromkeys(stem_of(word) for word in content_words(text)))
    if _WHERE_FROM.search(text) and _HOMETOWN not in terms:
        terms.append(_HOMETOWN)
    required = {term for term in terms if term in KIN_STEMS}
    words = lower_words(text)
    for i, word in enumerate(words):
        if word in ("my", "our"):
            rest = [w for w in words[i + 1 : i + 3] if stem_of(w) not in MODIFIER_STEMS]
            if rest and rest[0] not in STOPWORDS:
                required.add(stem_of(rest[0]))
    required |= _proper_nouns(question)
    return terms, (required - WEAK_STEMS) & set(terms)


def _proper_nouns(question: str) -> set[str]:
    """Capitalized words past the first ("Berlin", "Maria"), unless most words are capitalized."""
    tokens = PERSON_TOKEN.findall(normalize_quotes(question))
    capitalized = [t for t in tokens[1:] if t[0].isupper() and t != "I" and not t.startswith("I'")]
    if len(capitalized) * 2 > len(tokens):
        return set()
    return {stem_of(t) for t in capitalized if t.casefold() not in STOPWORDS}


def _score(terms: Sequence[str], required: set[str], evidence: _Evidence, about_user: bool) -> float:
    """Summed term matches (padding words at half), 0 unless every required term is matched and at least
    one word that is not padding. A statement about the user gets a small edge for a question about the
    user, one about "my X" an edge when the question names X and a handicap when it does not ("what's my
    name?" is not answered by "my dog is called Biscuit" while "I'm Tom" is there)."""
    matches = {term: evidence.match(term) for term in terms}
    if any(matches[term] == 0 for term in required):
        return 0.0
    if not any(weight for term, weight in matches.items() if term not in WEAK_STEMS):
        return 0.0
    score = sum(weight * (0.5 if term in WEAK_STEMS else 1.0) for term, weight in matches.items())
    if evidence.subject == _USER:
        score += 0.1 if about_user else 0.0
    elif evidence.subject is not None:  # "my X ...": about X, which the question may not be about
        named = any(same_word(t, evidence.subject) or evidence.subject in RELATED.get(t, ()) for t in terms)
        score += 0.1 if named else -0.2
    return max(score, 0.01)


_USER = ""
"""The subject of a sentence in the first person ("I ...", "we ...")."""


def _subject(words: Sequence[str]) -> str | None:
    """Who or what a sentence is about, from its first words: the user ("I", "we"), the stem of the noun
    after "my"/"our" ("my dog is called ..." → dog), or None."""
    if not words:
        return None
    if words[0] in ("i", "we"):
        return _USER
    if words[0] in ("my", "our"):
        rest = [w for w in words[1:3] if stem_of(w) not in MODIFIER_STEMS]
        return stem_of(rest[0]) if rest and rest[0] not in STOPWORDS else None
    return None


def answer_question(question: str, request: AnswerRequest, said_now: Sequence[str]) -> str | None:
    """The stored user statements that best match the question, quoted in the second person ("You told
    me you work as a nurse."); when none does, the assistant's own earlier words ("Earlier I said: ...");
    None when nothing matches. Only the user's statements count as what was said: never an earlier
    answer, so answers do not nest."""
    terms, required = _question_terms(question)
    if not terms:
        return None
    about_user = not _ASKER.isdisjoint(lower_words(rephrase(question)))
    pages = list(
        {page.page_id: page for page in [*request.retrieved, *reversed(request.short_term)]}.values()
    )
    user_lines = [
        *said_now,
        *(s for page in pages for s in split_sentences(page.user_input) if not is_question(s)),
        *(_fact_sentence(line) for line in [*request.user_knowledge, *request.user_profile.splitlines()]),
    ]
    assistant_lines = [s for page in pages for s in own_sentences(page) if not is_question(s)]
    for lines, from_user in ((user_lines, True), (assistant_lines, False)):
        evidence = [_Evidence(line, i, from_user=from_user) for i, line in enumerate(lines) if line]
        scored = sorted(
            ((_score(terms, required, e, about_user), e) for e in evidence), key=lambda x: (-x[0], x[1].order)
        )
        if not scored or scored[0][0] <= 0:
            continue
        best = scored[0][0]
        close = (e.quoted() for score, e in scored if score >= ANSWER_MARGIN * best)
        quotes = dedupe(close)[:MAX_ANSWER_SENTENCES]
        if from_user:
            return f"{TOLD_ME} {'; '.join(lower_first(q) for q in quotes)}."
        return f"{EARLIER_I_SAID} {' '.join(q + '.' for q in quotes)}"
    return None


def _fact_sentence(line: str) -> str:
    """A profile line or user fact of this backend ("- User: I'm a nurse.") as the user's sentence; lines of
    other forms ("The user ...") are left out: they are not the user's words."""
    text = line.strip().lstrip("-*• ").strip()
    if text[:5].casefold() != "user:":
        return ""
    return text[5:].strip()


def acknowledge(statements: Sequence[str]) -> str:
    """A short reply that says the statements were remembered, in the second person ("Got it, I'll remember
    that you work as a nurse."); a greeting, thanks or goodbye with nothing else gets a reply in kind."""
    words = {w for s in statements for w in lower_words(s)}
    greeting = "Hello! " if words & _GREETING else ""
    content = [
        _TRAILING_PUNCTUATION.sub("", _statement_core(s)) for s in statements if content_words(s) - PHATIC
    ]
    content = [text for text in content if text]
    if not content:
        if words & _THANKS:
            return "You're welcome!"
        if words & _FAREWELL:
            return "Bye! I'll remember what you told me."
        if greeting:
            return "Hello! Tell me anything you'd like me to remember, or ask me what you told me."
        return "OK."
    if any(set(lower_words(text)) & _FIRST_PERSON for text in content):
        said = ", and that ".join(lower_first(second_person(text)) for text in content)
        return clip(f"{greeting}{ACKNOWLEDGED} {said}.", MAX_SUMMARY_CHARS)
    return clip(f"{greeting}Noted: {'; '.join(lower_first(text) for text in content)}.", MAX_SUMMARY_CHARS)
