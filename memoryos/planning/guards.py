"""Checks on what a language model proposes for long-term memory, before the planner turns it into ops.

A weak or misbehaving model writes nonsense as readily as facts: "The user is a puppy who likes shoes", a
fact that is just "Maya", a profile that invents "Age: 25, has a partner, two children" or forgets most of
what it held. Long-term memory outlives the conversation, so a bad reply stored there misleads every later
answer. The checks are cheap and lexical (no second model call): what a proposal asserts must be made of
words the source turns (or the previous profile) hold. They run in the planner, so `MemorySpace.apply`
stays deterministic; a refused proposal leaves the previous state, is logged at INFO with ids and counts
only (memory text only at DEBUG), and is counted per rule in `REFUSALS`.

Grounding compares crude stems (`stem`): "hiking" and "hike", "likes" and "like" meet; a paraphrase that
shares no word with the turns does not, which is why the thresholds ask for a share of the words, not all.
"""

import logging
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from memoryos.config import MemoryConfig
from memoryos.llm.endpoint import llm_endpoint_configured
from memoryos.types import Page
from memoryos.validation import TIMESTAMP_FORMAT

log = logging.getLogger(__name__)

Rule = Literal["fact_not_sentence", "fact_ungrounded", "profile_dropped", "profile_unsupported"]
"""The names refusals are logged and counted under."""

_WORD = re.compile(r"[^\W_]+")
_ATTRIBUTE_SPLIT = re.compile(r"[\n;,]|\.(?:\s|$)")
_SUFFIXES = ("ingly", "edly", "ings", "ists", "ing", "ies", "ied", "ers", "ist", "er", "ed", "es", "ly", "s")


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


STOPWORDS = _word_set(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each else ever few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself just
    like likely me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves one ones thing things lot lots really well
    user users assistant assistants speaker person people someone something currently recently"""
)
"""Words that carry no content of their own. "like" is here as the preposition it mostly is in facts
("activities like hiking"); "user" and "assistant" are every fact's subject, so matching them proves
nothing about the turns."""

PROFILE_LABELS = _word_set(
    """name age gender occupation job work profession location lives live home hobby hobbies interest
    interests personality trait traits preference preferences habit habits goal goals communication style
    identity background family relationship relationships status values value note notes"""
)
"""Headings a profile line may start with ("Hobbies: painting"): formatting, not an attribute's content."""

PRONOUN_SUBJECTS = _word_set("he she they it i we you his her their its my our your him them")
"""A fact opening with one of these names nobody once stored alone: the prompt asks to resolve pronouns,
and the 1.5B model often did not ("He is interested in yoga")."""


def stem(word: str) -> str:
    """A crude stem: a common suffix, then a final "e", removed while three letters stay. Enough to match
    inflections across a paraphrase ("hiking"/"hike", "shoes"/"shoe"); never meant to be linguistics."""
    word = word.casefold()
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def content_stems(text: str, ignore: frozenset[str] = STOPWORDS) -> set[str]:
    """The stems of the words of `text` that are not in `ignore` (numbers included: an age is content)."""
    return {stem(word) for word in _WORD.findall(text) if word.casefold() not in ignore}


def source_stems(pages: Sequence[Page]) -> set[str]:
    """What the source turns support: the stems of every word of both sides of each turn (stopwords too:
    "like" in a turn supports "likes" in a fact), and of its date, spelt as a model turns "yesterday" into
    a date ("7 May 2023", "Monday")."""
    stems: set[str] = set()
    for page in pages:
        stems |= content_stems(f"{page.user_input}\n{page.agent_response}", ignore=frozenset())
        stems |= _date_stems(page.timestamp)
    return stems


def _date_stems(timestamp: str) -> set[str]:
    try:
        moment = datetime.strptime(timestamp, TIMESTAMP_FORMAT)
    except ValueError:
        return content_stems(timestamp)
    return content_stems(f"{moment.year} {moment.day} {moment:%B %A}", ignore=frozenset())


@dataclass(frozen=True)
class GuardSettings:
    """The thresholds, from `MemoryConfig` (each setting's description says why it is what it is)."""

    fact_min_words: int
    fact_min_grounding: float
    profile_min_kept: float
    profile_min_grounding: float
    profile_max_unsupported: int

    @classmethod
    def of(cls, config: MemoryConfig) -> "GuardSettings":
        return cls(
            fact_min_words=config.guard_fact_min_words,
            fact_min_grounding=config.guard_fact_min_grounding,
            profile_min_kept=config.guard_profile_min_kept,
            profile_min_grounding=config.guard_profile_min_grounding,
            profile_max_unsupported=config.guard_profile_max_unsupported,
        )


def guards_enabled(config: MemoryConfig) -> bool:
    """`llm_guards`: "auto" guards the replies of a language model; the offline backend copies the turns'
    own sentences, which these checks would only slow down."""
    if config.llm_guards == "auto":
        return llm_endpoint_configured(config)
    return config.llm_guards == "on"


def fact_refusal(fact: str, sources: set[str], settings: GuardSettings) -> Rule | None:
    """Why `fact` may not be stored, or None. A fact is a sentence that stands alone (at least
    `fact_min_words` words, one of them content, not opening with a pronoun), and at least
    `fact_min_grounding` of its content words occur in its source turns."""
    words = _WORD.findall(fact)
    content = content_stems(fact)
    if len(words) < settings.fact_min_words or not content or words[0].casefold() in PRONOUN_SUBJECTS:
        return "fact_not_sentence"
    if _grounded_share(content, sources) < settings.fact_min_grounding:
        return "fact_ungrounded"
    return None


def profile_refusal(
    previous: str, proposed: str, sources: set[str], settings: GuardSettings
) -> tuple[Rule, int] | None:
    """Why the proposed profile may not replace `previous`, with a count (previous words lost, or new
    attributes unsupported), or None.

    Dropped: less than `profile_min_kept` of the previous profile's content words are still there (the
    prompt asks to keep every line the conversation does not contradict; a model that rewrote the profile
    from the last turns alone loses the rest). Unsupported: more than `profile_max_unsupported` new
    attributes (a line, or an item of a comma-separated line) whose new words are less than
    `profile_min_grounding` found in the turns.
    """
    before = content_stems(previous, STOPWORDS | PROFILE_LABELS)
    after = content_stems(proposed, STOPWORDS | PROFILE_LABELS)
    if before:
        lost = len(before - after)
        if 1 - lost / len(before) < settings.profile_min_kept:
            return "profile_dropped", lost
    unsupported = sum(
        1
        for attribute in _attributes(proposed)
        if (new := content_stems(attribute, STOPWORDS | PROFILE_LABELS) - before)
        and _grounded_share(new, sources) < settings.profile_min_grounding
    )
    if unsupported > settings.profile_max_unsupported:
        return "profile_unsupported", unsupported
    return None


def _attributes(profile: str) -> list[str]:
    """A profile's attributes: its lines, and the items of a line that lists several."""
    return [part for part in (p.strip(" -*•\t") for p in _ATTRIBUTE_SPLIT.split(profile)) if part]


def _grounded_share(content: set[str], sources: set[str]) -> float:
    return len(content & sources) / len(content) if content else 1.0


class RefusalCounter:
    """Proposals refused, per rule, since the process started. Consolidation runs on the scheduler's loop
    while metrics are read from other threads, so it takes a lock; readers get a copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Rule, int] = {}

    def record(self, rule: Rule, count: int = 1) -> None:
        with self._lock:
            self._counts[rule] = self._counts.get(rule, 0) + count

    def snapshot(self) -> dict[Rule, int]:
        with self._lock:
            return dict(self._counts)


REFUSALS = RefusalCounter()
"""The process's refusals, every space together: what a metrics collector reads."""


@dataclass(frozen=True)
class ProposalGuard:
    """The checks of one slice of pages, for one space (named by its path in the logs)."""

    settings: GuardSettings
    space: str
    counter: RefusalCounter = REFUSALS

    def facts(self, kind: str, facts: Iterable[str], pages: Sequence[Page]) -> list[str]:
        """The facts that pass; each refused one is counted, and the slice's refusals logged once."""
        sources = source_stems(pages)
        kept: list[str] = []
        refused: dict[Rule, int] = {}
        for fact in facts:
            rule = fact_refusal(fact, sources, self.settings)
            if rule is None:
                kept.append(fact)
                continue
            refused[rule] = refused.get(rule, 0) + 1
            self.counter.record(rule)
            log.debug("fact refused (%s): %r", rule, fact)
        if refused:
            log.info(
                "LLM facts refused",
                extra={"space": self.space, "kind": kind, "pages": _page_range(pages), "refused": refused},
            )
        return kept

    def profile(self, previous: str, proposed: str, pages: Sequence[Page]) -> bool:
        """Whether `proposed` may replace `previous`; a refusal is counted and logged."""
        verdict = profile_refusal(previous, proposed, source_stems(pages), self.settings)
        if verdict is None:
            return True
        rule, count = verdict
        self.counter.record(rule)
        log.info(
            "LLM profile update refused",
            extra={"space": self.space, "rule": rule, "count": count, "pages": _page_range(pages)},
        )
        log.debug("profile refused (%s): %r replacing %r", rule, proposed, previous)
        return False


def _page_range(pages: Sequence[Page]) -> str:
    return f"{pages[0].page_id}-{pages[-1].page_id}" if pages else ""
