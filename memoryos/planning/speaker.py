"""Whose words a question asks about: the side of the conversation a name in the query belongs to.

People are addressed by name by the one they talk to ("Wow, Caroline!"), rarely by themselves. So a name
that one side of the conversation says in many pages, and the other side says less, is the other side's
name. A question naming a person ("What activities does Melanie partake in?") asks about what that person
said, so BM25 counts the words of that side of each page fully and the other side's at
`MemoryConfig.lexical_other_side_weight` (how often names fall on each side, and the recall gained:
docs/retrieval.md). Nothing is assumed about who the user is; the counts decide, per query.
"""

import re
from collections.abc import Sequence

from memoryos.planning.lexical import STOPWORDS
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.records.base import FrequencyAsk, Side

_SIDES: tuple[Side, Side] = ("user_input", "agent_response")

_NAME = re.compile(r"(?<![.!?]\s)(?<=\s)([A-Z][^\W\d_]*)(?:['\u2019]s\b)?")
"""A capitalized word that does not open a sentence, with its possessive: "Caroline's" in "What did
Caroline's mom say?"."""


def query_names(query: str) -> set[str]:
    """The capitalized words of `query` that may be names: not opening a sentence, not stopwords."""
    return {match[1] for match in _NAME.finditer(query) if match[1].lower() not in STOPWORDS}


def without_names(query: str, names: set[str]) -> str:
    """`query` with the given names (and their possessive) left out, spaces collapsed."""
    return " ".join(_NAME.sub(lambda m: "" if m[1] in names else m[0], query).split())


def common_name_limit(space: MemorySpace) -> int | None:
    """Pages a name must be found in, beyond, to count as a speaker's name; None in a space too small to
    tell (`MemoryConfig.dense_name_min_pages`)."""
    config = space.config
    total = space.page_index.count()
    if total < config.dense_name_min_pages:
        return None
    return int(config.dense_name_max_df_fraction * total)


def side_asks(space: MemorySpace, query: str) -> list[FrequencyAsk]:
    """What `named_side` counts: the query's names in each side's words (`_SIDES`' order), counting
    stopped just past `common_name_limit`, so each count is bounded; none in a space too small to tell.
    A caller asks them with its other counts, in one call to the store (one round trip to a database)."""
    limit = common_name_limit(space)
    if limit is None:
        return []
    names = [name.lower() for name in query_names(query)]
    return [FrequencyAsk(names, side, limit + 1) for side in _SIDES]


def side_named(space: MemorySpace, counts: Sequence[Sequence[int]]) -> Side | None:
    """The side whose speaker the query names, from the counts of its `side_asks`; None: no speaker's
    name, or names of both sides.

    A name belongs to a side when the other side says it in more than `dense_name_max_df_fraction` of the
    pages and this side says it less.
    """
    limit = common_name_limit(space)
    if limit is None or not counts:
        return None
    said = dict(zip(_SIDES, counts, strict=True))
    named: set[Side] = set()
    for user_says, assistant_says in zip(said["user_input"], said["agent_response"], strict=True):
        if assistant_says > limit and user_says < assistant_says:
            named.add("user_input")
        elif user_says > limit and assistant_says < user_says:
            named.add("agent_response")
    return named.pop() if len(named) == 1 else None


def named_side(space: MemorySpace, query: str) -> Side | None:
    """The side whose speaker the query names (`side_named`), counted on its own."""
    asks = side_asks(space, query)
    return side_named(space, space.store.document_frequencies(asks) if asks else [])


def side_weights(space: MemorySpace, side: Side | None) -> tuple[float, float] | None:
    """BM25 column weights (user_input, agent_response) for a query naming `side`: the named side's words
    count fully, the other side's at `lexical_other_side_weight`; None when the query names no one side
    or the sides weigh alike."""
    other = space.config.lexical_other_side_weight
    if side is None or other == 1.0:
        return None
    return (1.0, other) if side == "user_input" else (other, 1.0)
