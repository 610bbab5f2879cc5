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
ANSWER_MARGIN = 0.75
"""An answer quotes every statement scoring at least this share of the best one (up to
`MAX_ANSWER_SENTENCES`): a question's own word in one statement and a related word in another ("job"
in "a new job at the aquarium", "I'm a marine biologist") are both worth saying."""
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
        recommend ...") as assistant facts, each prefixed with who said it and kept verbatim.

        An assistant sentence that only hands the user's words back is not a fact about the assistant: a
        reply that quotes an exchange (a speaker label or a `[2024-05-01` timestamp) or is one of this
        backend's acknowledgements and answers, a sentence reporting what the user said ("you told me ...",
        "I'll remember that you ..."), or one whose words are mostly those of the message it replies to."""
        assistant_sentences = (
            sentence
            for page in pages
            for sentence in _own_sentences(page)
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
        """A question is answered from what the user said (`_answer_question`); anything else is a
        statement, acknowledged as remembered: "Got it, I'll remember that you work as a nurse." """
        sentences = _sentences(request.query)
        questions = [s for s in sentences if _is_question(s)]
        statements = [s for s in sentences if not _is_question(s)]
        if not questions:
            reply = _acknowledge(statements)
        else:
            answers = [_answer_question(question, request, statements) for question in questions]
            found = _dedupe(a for a in answers if a is not None)
            reply = " ".join(found) if found else NOT_IN_MEMORY
            if any(_content_words(s) - PHATIC for s in statements):
                reply = f"{_acknowledge(statements)} {reply}"
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


# --- chat: statements, questions, answers from what the user said -----------------------------------------
#
# The rules are general English, not phrases of any test set: a sentence is a question by its question
# mark, its first word or a recall request; words are compared after a light stemming; a small map of
# very common relations lets a question's word find a statement's ("living" → "work", "pet" → "dog").


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


ACKNOWLEDGED = "Got it, I'll remember that"
TOLD_ME = "You told me"
EARLIER_I_SAID = "Earlier I said:"

_INTERROGATIVE = _wordset("what who whom whose where when why how which")
_AUXILIARY = _wordset(
    "am is are was were do does did have has had can could will would should shall may might"
)
_PRONOUN_SUBJECT = _wordset("i you we he she they it my your our his her their there this that")
_CLAUSE_SUBJECT = _wordset("i you we he she they")
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
_GREETING = _wordset("hi hello hey")
_THANKS = _wordset("thanks thank thx ty cheers")
_FAREWELL = _wordset("bye goodbye")
_FIRST_PERSON = _wordset("i me my mine myself we us our ours ourselves")

_QUOTED_EXCHANGE = re.compile(r"\b(?:User|Assistant)\s*:|\[\d{4}-\d{2}-\d{2}")
"""A speaker label or a page timestamp: text that quotes a stored exchange."""
_REPORTED = re.compile(
    r"\b(?:you(?:'ve| have)?\s+(?:told|said|mentioned|asked)|as you said|earlier i said|"
    r"i (?:told|said to) you|i(?:'ll| will| shall)\s+remember|i(?:'ve| have)\s+noted)\b",
    re.IGNORECASE,
)
"""What the user said, reported back: about the user, not the assistant's own words."""

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
_WHERE_FROM = re.compile(r"\bwhere\b.*\bfrom\b")

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
_KIN = _wordset(
    """mother mom mum father dad parent parents sister brother sibling wife husband partner spouse boyfriend
    girlfriend son daughter kid kids child children baby grandmother grandfather grandma grandpa grandparent
    grandparents aunt uncle cousin niece nephew friend boss colleague coworker neighbour neighbor roommate
    flatmate"""
)
"""People: a question about one is answered only by a statement naming them (or a word for them)."""
_MODIFIERS = _wordset(
    "favourite favorite best new old first last current next little big older younger eldest oldest "
    "youngest previous main usual dream own"
)
"""Words before the noun in "my favourite film", "my best friend": the noun is what the question is about."""
_WEAK = _wordset(
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
_SWAP = {
    "i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself", "i'm": "you're",
    "i've": "you've", "i'll": "you'll", "i'd": "you'd", "we": "you", "us": "you", "our": "your",
    "ours": "yours", "ourselves": "yourselves", "we're": "you're", "we've": "you've", "we'll": "you'll",
    "we'd": "you'd", "your": "my", "yours": "mine", "yourself": "myself", "you're": "I'm",
    "you've": "I've", "you'll": "I'll", "you'd": "I'd",
}  # fmt: skip
_YOU_AS_SUBJECT_AFTER = _wordset("and but that if when because so or")
_VERB_AFTER_SUBJECT = _AUXILIARY | _wordset("don't didn't can't won't wouldn't always never just really also")
""""you" before one of these is a subject ("I think you are right" → "you think I am right")."""
_PERSON_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_TRAILING_PUNCTUATION = re.compile(r"[\s.!…;,:]+$")


def _normalize_quotes(text: str) -> str:
    return text.replace("’", "'").replace("‘", "'")


def _is_question(sentence: str) -> bool:
    """A question mark; a question word not opening a clause ("what is", not "when I was"); an auxiliary
    before its subject ("do I", "is my"); or a recall request ("tell me ...", "remind me where ...")."""
    text = _LEADING_FILLER.sub("", _normalize_quotes(sentence).strip())
    if sentence.rstrip().endswith("?"):
        return True
    words = _words(text)
    if not words:
        return False
    if words[0] in _INTERROGATIVE:
        return len(words) == 1 or words[1] not in _CLAUSE_SUBJECT
    if words[0] in _AUXILIARY and len(words) > 1 and words[1] in _PRONOUN_SUBJECT:
        return True
    return bool(_RECALL_REQUEST.match(text))


def _stem(word: str) -> str:
    """A light English stemmer: plurals, -ed, -ing and a final e go and a final y becomes i, so "lives",
    "living" and "lived" meet, and so do "movie" and "movies"."""
    word = word.casefold()
    if word in _IRREGULAR:
        return _stem(_IRREGULAR[word])
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


def _rephrase(text: str) -> str:
    """Lowercased, with curly quotes straightened and the common phrasings of `_PHRASES` rewritten."""
    text = _normalize_quotes(text).casefold()
    for pattern, replacement in _PHRASES:
        text = pattern.sub(replacement, text)
    return text


def _stems(text: str) -> set[str]:
    """The stems of the content words of `text`, after `_rephrase`."""
    return {_stem(word) for word in _content_words(_rephrase(text))}


def _group_map() -> dict[str, frozenset[str]]:
    related: dict[str, set[str]] = {}
    for line in _SYNONYM_GROUPS.strip().splitlines():
        group = {_stem(word) for word in line.split()}
        for member in group:
            related.setdefault(member, set()).update(group - {member})
    for general, specific in _BROADER.items():
        related.setdefault(_stem(general), set()).update(_stem(word) for word in specific.split())
    return {word: frozenset(words) for word, words in related.items()}


_RELATED = _group_map()
_KIN_STEMS = frozenset(_stem(word) for word in _KIN)
_WEAK_STEMS = frozenset(_stem(word) for word in _WEAK)
_MODIFIER_STEMS = frozenset(_stem(word) for word in _MODIFIERS)
_JOB = _stem("job")
_NAME = _stem("name")
_HOMETOWN = _stem("hometown")


def _same_word(query: str, evidence: str, *, compound: bool = True) -> bool:
    """The same stem; one derived from the other ("teach" / "teacher"); or, with `compound`, the evidence a
    compound ending in the query's word ("boat" / "sailboat")."""
    if query == evidence:
        return True
    short, long = sorted((query, evidence), key=len)
    if len(short) >= 4 and long.startswith(short) and long[len(short) :] in _DERIVED:
        return True
    return compound and len(query) >= 4 and evidence.endswith(query) and len(evidence) - len(query) >= 3


class _Evidence:
    """One sentence that may answer a question: its words, as stems, and its text as the reply quotes it."""

    def __init__(self, sentence: str, order: int, *, from_user: bool) -> None:
        self.sentence = _STORE_REQUEST.sub("", _LEADING_FILLER.sub("", _normalize_quotes(sentence).strip()))
        self.order = order
        self.from_user = from_user
        self.stems = _stems(self.sentence)
        words = _words(self.sentence)
        self.subject = _subject(words)
        # What the sentence says without a word for it: "I'm a nurse" is a job, "I'm Tom" a name.
        self.tags: set[str] = set()
        if from_user and re.search(r"\b(?:i'm|i am)\s+(?:a|an)\s+\w", self.sentence, re.IGNORECASE):
            self.tags.add(_JOB)
        if from_user and re.search(r"\b(?:I'm|I am)\s+[A-Z][a-z]+\b", self.sentence):
            self.tags.add(_NAME)

    def match(self, term: str) -> float:
        """1 for the question's own word, 0.75 for a related one, 0 for none. Compounds count for the
        question's own word only: "boat" finds "sailboat", but "pet" → "fish" must not find "shellfish"."""
        if any(_same_word(term, stem) for stem in self.stems):
            return 1.0
        related = _RELATED.get(term, frozenset())
        if any(_same_word(word, stem, compound=False) for word in related for stem in self.stems):
            return 0.75
        if ({term} | related) & self.tags:
            return 0.75
        return 0.0

    def quoted(self) -> str:
        """The sentence as the reply quotes it: the user's words in the second person, no end punctuation."""
        text = _TRAILING_PUNCTUATION.sub("", self.sentence)
        return _second_person(text) if self.from_user else text


def _question_terms(question: str) -> tuple[list[str], set[str]]:
    """The question's stems, and those an answer must contain: the thing asked about after "my"/"our"
    ("my sister's name" → sister, "my favourite film" → film), any person ("my mother"), and names."""
    text = _rephrase(question)
    terms = list(dict.fromkeys(_stem(word) for word in _content_words(text)))
    if _WHERE_FROM.search(text) and _HOMETOWN not in terms:
        terms.append(_HOMETOWN)
    required = {term for term in terms if term in _KIN_STEMS}
    words = _words(text)
    for i, word in enumerate(words):
        if word in ("my", "our"):
            rest = [w for w in words[i + 1 : i + 3] if _stem(w) not in _MODIFIER_STEMS]
            if rest and rest[0] not in STOPWORDS:
                required.add(_stem(rest[0]))
    required |= _proper_nouns(question)
    return terms, (required - _WEAK_STEMS) & set(terms)


def _proper_nouns(question: str) -> set[str]:
    """Capitalized words past the first ("Berlin", "Maria"), unless most words are capitalized."""
    tokens = _PERSON_TOKEN.findall(_normalize_quotes(question))
    capitalized = [t for t in tokens[1:] if t[0].isupper() and t != "I" and not t.startswith("I'")]
    if len(capitalized) * 2 > len(tokens):
        return set()
    return {_stem(t) for t in capitalized if t.casefold() not in STOPWORDS}


def _score(terms: Sequence[str], required: set[str], evidence: _Evidence, about_user: bool) -> float:
    """Summed term matches (padding words at half), 0 unless every required term is matched and at least
    one word that is not padding. A statement about the user gets a small edge for a question about the
    user, one about "my X" an edge when the question names X and a handicap when it does not ("what's my
    name?" is not answered by "my dog is called Biscuit" while "I'm Tom" is there)."""
    matches = {term: evidence.match(term) for term in terms}
    if any(matches[term] == 0 for term in required):
        return 0.0
    if not any(weight for term, weight in matches.items() if term not in _WEAK_STEMS):
        return 0.0
    score = sum(weight * (0.5 if term in _WEAK_STEMS else 1.0) for term, weight in matches.items())
    if evidence.subject == _USER:
        score += 0.1 if about_user else 0.0
    elif evidence.subject is not None:  # "my X ...": about X, which the question may not be about
        named = any(_same_word(t, evidence.subject) or evidence.subject in _RELATED.get(t, ()) for t in terms)
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
        rest = [w for w in words[1:3] if _stem(w) not in _MODIFIER_STEMS]
        return _stem(rest[0]) if rest and rest[0] not in STOPWORDS else None
    return None


def _answer_question(question: str, request: AnswerRequest, said_now: Sequence[str]) -> str | None:
    """The stored user statements that best match the question, quoted in the second person ("You told
    me you work as a nurse."); when none does, the assistant's own earlier words ("Earlier I said: ...");
    None when nothing matches. Only the user's statements count as what was said: never an earlier
    answer, so answers do not nest."""
    terms, required = _question_terms(question)
    if not terms:
        return None
    about_user = bool({"i", "my", "me", "our", "we"} & set(_words(_rephrase(question))))
    pages = list(
        {page.page_id: page for page in [*request.retrieved, *reversed(request.short_term)]}.values()
    )
    user_lines = [
        *said_now,
        *(s for page in pages for s in _sentences(page.user_input) if not _is_question(s)),
        *(_fact_sentence(line) for line in [*request.user_knowledge, *request.user_profile.splitlines()]),
    ]
    assistant_lines = [s for page in pages for s in _own_sentences(page) if not _is_question(s)]
    for lines, from_user in ((user_lines, True), (assistant_lines, False)):
        evidence = [_Evidence(line, i, from_user=from_user) for i, line in enumerate(lines) if line]
        scored = sorted(
            ((_score(terms, required, e, about_user), e) for e in evidence), key=lambda x: (-x[0], x[1].order)
        )
        if not scored or scored[0][0] <= 0:
            continue
        best = scored[0][0]
        close = (e.quoted() for score, e in scored if score >= ANSWER_MARGIN * best)
        quotes = _dedupe(close)[:MAX_ANSWER_SENTENCES]
        if from_user:
            return f"{TOLD_ME} {'; '.join(_lower_first(q) for q in quotes)}."
        return f"{EARLIER_I_SAID} {' '.join(q + '.' for q in quotes)}"
    return None


def _fact_sentence(line: str) -> str:
    """A profile line or user fact of this backend ("- User: I'm a nurse.") as the user's sentence; lines of
    other forms ("The user ...") are left out: they are not the user's words."""
    text = line.strip().lstrip("-*• ").strip()
    if text[:5].casefold() != "user:":
        return ""
    return text[5:].strip()


def _acknowledge(statements: Sequence[str]) -> str:
    """A short reply that says the statements were remembered, in the second person ("Got it, I'll remember
    that you work as a nurse."); a greeting, thanks or goodbye with nothing else gets a reply in kind."""
    words = {w for s in statements for w in _words(s)}
    greeting = "Hello! " if words & _GREETING else ""
    content = [
        _TRAILING_PUNCTUATION.sub("", _STORE_REQUEST.sub("", _LEADING_FILLER.sub("", _normalize_quotes(s))))
        for s in statements
        if _content_words(s) - PHATIC
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
    if any(set(_words(text)) & _FIRST_PERSON for text in content):
        said = ", and that ".join(_lower_first(_second_person(text)) for text in content)
        return _clip(f"{greeting}{ACKNOWLEDGED} {said}.", MAX_SUMMARY_CHARS)
    return _clip(f"{greeting}Noted: {'; '.join(_lower_first(text) for text in content)}.", MAX_SUMMARY_CHARS)


def _second_person(text: str) -> str:
    """The user's words as said back to them: "I am" → "you are", "my" → "your", "you" → "I"/"me"."""
    tokens = list(_PERSON_TOKEN.finditer(text))
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


def _lower_first(text: str) -> str:
    """`text` to follow "You told me": its first word lowercased unless it is "I" or looks like a name."""
    words = _PERSON_TOKEN.findall(text)
    if not words or words[0] == "I" or words[0].startswith("I'"):
        return text
    first = words[0].casefold()
    common = first in STOPWORDS or first in PHATIC or first in _SWAP or first in _OPENERS
    return text[0].lower() + text[1:] if common else text


_OPENERS = _wordset(
    """you your yours every each last next this yesterday today tonight tomorrow recently lately sometimes
    usually often always never since most many several one two three ever still also"""
)
"""Common first words of a statement, lowercased when it is quoted inside a reply; other capitalized first
words may be names ("Pico chewed my shoes") and keep their capital."""


_MEMORY_WORDS = frozenset(
    _stem(w) for w in _wordset("remember note noted got keep mind told tell said say know")
)


_OWN_REPLY = re.compile(
    rf"^(?:Hello!\s+)?(?:{re.escape(ACKNOWLEDGED)}|{re.escape(TOLD_ME)}|{re.escape(EARLIER_I_SAID)}|Noted:)"
)
"""How this backend's acknowledgements and answers begin."""


def _own_sentences(page: Page) -> list[str]:
    """The sentences of a page's assistant reply that say something of the assistant's own. None of a
    reply that quotes stored exchanges anywhere (older versions of this backend answered with
    "[2024-05-01 10:00:00] User: ..."), of this backend's own acknowledgements and answers, which only
    hand back what the user said, or of "I don't have that in memory."."""
    response = page.agent_response.strip()
    if _QUOTED_EXCHANGE.search(response) or _OWN_REPLY.match(response) or response == NOT_IN_MEMORY:
        return []
    user_stems = _stems(page.user_input)
    return [s for s in _sentences(response) if _is_assistants_own(s, user_stems)]


def _is_assistants_own(sentence: str, user_stems: set[str]) -> bool:
    """Whether an assistant sentence says something of its own, rather than handing back the user's words:
    not a quoted exchange, not reported speech ("you told me", "I'll remember that"), and fewer than half
    of its content words (memory verbs and pleasantries aside) from the user's message it replies to
    (`user_stems`)."""
    if (
        _QUOTED_EXCHANGE.search(sentence)
        or NOT_IN_MEMORY in sentence
        or _REPORTED.search(_normalize_quotes(sentence))
    ):
        return False
    own = [
        stem
        for stem in (_stem(w) for w in _content_words(_rephrase(sentence)) if w not in PHATIC)
        if stem not in _MEMORY_WORDS
    ]
    if not own:
        return False
    echoed = sum(1 for stem in own if any(_same_word(stem, u) or _same_word(u, stem) for u in user_stems))
    return echoed * 2 < len(own)
