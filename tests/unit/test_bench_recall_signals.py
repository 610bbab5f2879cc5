"""The added signals of `bench/quality/recall_signals.py`, on hand-made pages and vectors."""

import numpy as np
import pytest

from bench.quality.recall_signals import Sentences, first_person, whole_space_z
from memoryos.types import Page


def page(page_id: int, user_input: str, agent_response: str) -> Page:
    return Page(
        page_id=page_id, user_input=user_input, agent_response=agent_response, timestamp="2023-05-08 13:56:00"
    )


def test_pages_without_a_score_count_zero_against_the_whole_space() -> None:
    z = whole_space_z({1: 3.0}, [1, 2, 3, 4])
    assert z[1] == pytest.approx(np.sqrt(3))  # values 3, 0, 0, 0: mean 0.75, std 1.299
    assert z[2] == z[3] == z[4] == pytest.approx(-1 / np.sqrt(3))
    assert sum(z.values()) == pytest.approx(0.0)


def test_first_person_counts_the_named_side_speaking_of_itself_and_not_asking() -> None:
    pages = {
        1: page(1, "I went camping with my kids.", "Sounds fun!"),
        2: page(2, "Did I tell you about my pottery?", "Not yet!"),
        3: page(3, "The weather is nice.", "I love sunny days."),
    }
    assert first_person(pages, "user_input") == {1: 1.0, 2: 0.0, 3: 0.0}
    assert first_person(pages, "agent_response") == {1: 0.0, 2: 0.0, 3: 1.0}
    assert first_person(pages, None) == {}


def test_the_nearest_sentence_is_taken_on_the_named_side_only_when_one_is_named() -> None:
    query = np.array([1.0, 0.0])
    sentences = Sentences(
        owners=[(1, "user_input"), (1, "agent_response"), (2, "user_input"), (2, "user_input")],
        vectors=np.array([[0.2, 0.98], [1.0, 0.0], [0.6, 0.8], [0.8, 0.6]]),
    )
    assert sentences.best(query, None) == pytest.approx({1: 1.0, 2: 0.8})
    assert sentences.best(query, "user_input") == pytest.approx({1: 0.2, 2: 0.8})
    assert sentences.best(query, "agent_response") == pytest.approx({1: 1.0})
