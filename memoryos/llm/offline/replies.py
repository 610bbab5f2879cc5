"""What the offline backend's chat replies begin with, and which assistant sentences are the assistant's own.

The backend's replies only hand back what the user said ("Got it, I'll remember that you ...", "You told
me ..."). Those words must never count as the assistant's: not as its facts (`memoryos/llm/offline/extracts.py`), not
as what "I said earlier" in an answer (`memoryos/llm/offline/answers.py`). Both ask `own_sentences`, which knows the
reply phrases and so lives beside them.
"""

import re

from memoryos.llm.offline.stems import rephrase, same_word, stem_of, stems_of
from memoryos.llm.offline.text import PHATIC, content_words, normalize_quotes, split_sentences, word_set
from memoryos.types import Page

NOT_IN_MEMORY = "I don't have that in memory."
ACKNOWLEDGED = "Got it, I'll remember that"
TOLD_ME = "You told me"
EARLIER_I_SAID = "Earlier I said:"

_OWN_REPLY = re.compile(
    rf"^(?:Hello!\s+)?(?:{re.escape(ACKNOWLEDGED)}|{re.escape(TOLD_ME)}|{re.escape(EARLIER_I_SAID)}|Noted:)"
)
"""How this backend's acknowledgements and answers begin."""
_QUOTED_EXCHANGE = re.compile(r"\b(?:User|Assistant)\s*:|\[\d{4}-\d{2}-\d{2}")
"""A speaker label or a page timestamp: text that quotes a stored exchange."""
_REPORTED = re.compile(
    r"\b(?:you(?:'ve| have)?\s+(?:told|said|mentioned|asked)|as you said|earlier i said|"
    r"i (?:told|said to) you|i(?:'ll| will| shall)\s+remember|i(?:'ve| have)\s+noted)\b",
    re.IGNORECASE,
)
"""What the user said, reported back: about the user, not the assistant's own words."""
_MEMORY_WORDS = frozenset(
    stem_of(w) for w in word_set("remember note noted got keep mind told tell said say know")
)


def own_sentences(page: Page) -> list[str]:
    """The sentences of a page's assistant reply that say something of the assistant's own. None of a
    reply that quotes stored exchanges anywhere (older versions of this backend answered with
    "[2024-05-01 10:00:00] User: ..."), of this backend's own acknowledgements and answers, which only
    hand back what the user said, or of "I don't have that in memory."."""
    response = page.agent_response.strip()
    if _QUOTED_EXCHANGE.search(response) or _OWN_REPLY.match(response) or response == NOT_IN_MEMORY:
        return []
    user_stems = stems_of(page.user_input)
    return [s for s in split_sentences(response) if _is_assistants_own(s, user_stems)]


def _is_assistants_own(sentence: str, user_stems: set[str]) -> bool:
    """Whether an assistant sentence says something of its own, rather than handing back the user's words:
    not a quoted exchange, not reported speech ("you told me", "I'll remember that"), and fewer than half
    of its content words (memory verbs and pleasantries aside) from the user's message it replies to
    (`user_stems`)."""
    if (
        _QUOTED_EXCHANGE.search(sentence)
        or NOT_IN_MEMORY in sentence
        or _REPORTED.search(normalize_quotes(sentence))
    ):
        return False
    own = [
        stem
        for stem in (stem_of(w) for w in content_words(rephrase(sentence)) if w not in PHATIC)
        if stem not in _MEMORY_WORDS
    ]
    if not own:
        return False
    echoed = sum(1 for stem in own if any(same_word(stem, u) or same_word(u, stem) for u in user_stems))
    return echoed * 2 < len(own)
