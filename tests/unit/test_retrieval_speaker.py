"""A query naming one speaker weighs that speaker's side of each page most in BM25
(`memoryos/planning/speaker.py`), on hand-made pages: the user is addressed as "Caroline" by the
assistant, the assistant as "Melanie" by the user, in most pages."""

from memoryos.planning.speaker import named_side
from memoryos.space.memory_space import MemorySpace
from tests.support.fakes import axis
from tests.unit.test_retrieval import DIM, MakeSpace, add, make_space, ranked

__all__ = ["make_space"]  # the fixture, shared with test_retrieval

QUERY = "What did Melanie paint?"


def conversation(make_space: MakeSpace, **settings: object) -> tuple[MemorySpace, int, int]:
    """20 pages in which each side names the other; then a page where the user paints (twice over) and one
    where the assistant does. Every vector is orthogonal to the query's: BM25 alone ranks them."""
    space = make_space(**{"dense_name_min_pages": 20, **settings})
    for i in range(20):
        add(space, f"Hey Melanie, how was your day {i}?", f"Good thanks, Caroline {i}", axis(DIM, 8 + i % 8))
    user_paints = add(space, "Melanie, I paint lakes; I paint every week", "Nice, Caroline", axis(DIM, 9))
    assistant_paints = add(space, "How are you, Melanie?", "I paint sunsets, Caroline", axis(DIM, 10))
    return space, user_paints, assistant_paints


def test_a_name_the_other_side_says_belongs_to_the_side_that_does_not(make_space: MakeSpace) -> None:
    space, _, _ = conversation(make_space)
    assert named_side(space, QUERY) == "agent_response"
    assert named_side(space, "What did Caroline paint?") == "user_input"


def test_no_side_for_both_speakers_a_rare_name_or_a_small_space(make_space: MakeSpace) -> None:
    space, _, _ = conversation(make_space)
    assert named_side(space, "What did Caroline and Melanie both paint?") is None
    assert named_side(space, "What did Nicole paint?") is None
    small, _, _ = conversation(make_space, dense_name_min_pages=100)
    assert named_side(small, QUERY) is None


def test_the_named_speakers_words_outrank_the_same_words_from_the_other_side(make_space: MakeSpace) -> None:
    space, user_paints, assistant_paints = conversation(make_space)
    assert ranked(space, QUERY, axis(DIM, 0), 2) == [assistant_paints, user_paints]
    # Control: with both sides weighed alike, the page saying "paint" twice comes first.
    alike, user_paints, assistant_paints = conversation(make_space, lexical_other_side_weight=1.0)
    assert ranked(alike, QUERY, axis(DIM, 0), 2) == [user_paints, assistant_paints]
