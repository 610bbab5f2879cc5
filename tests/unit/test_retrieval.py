"""Retrieval (docs/retrieval.md), one rule per test, on a real `MemorySpace` with hand-made unit vectors and
a fixed clock: no model. Query vectors live on axes 0-7, filler pages on axes 8-15 (cosine 0 to any query),
and filler text shares no word with any query."""

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.planning.retrieval import (
    _lexical_terms,
    dense_query_text,
    dense_scores,
    query_words,
    rank_pages,
    retrieve_context,
    word_asks,
)
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddKnowledge, AddTurns, FileTopic, RecordVisits
from memoryos.types import Turn
from tests.support.fakes import T0, FakeClock, axis, unit

DIM = 16
MODEL = "hand-made-vectors"
FILLER = ("we chatted about nothing much", "sounds like an ordinary afternoon")
STAMP = "2022-01-10 10:00:00"
"""Far from every date a query here names, so fillers get no date bonus."""


MakeSpace = Callable[..., MemorySpace]


@pytest.fixture
def make_space(tmp_path: Path) -> Iterator[MakeSpace]:
    """Opens fresh spaces with the given `MemoryConfig` settings; closes them after the test."""
    opened: list[MemorySpace] = []

    def make(**settings: object) -> MemorySpace:
        config = MemoryConfig.model_validate({"data_dir": tmp_path, "faiss_use_gpu": "never", **settings})
        space = MemorySpace(tmp_path / f"space{len(opened)}", config, MODEL, lambda: DIM, FakeClock())
        opened.append(space)
        return space

    yield make
    for space in opened:
        space.close()


def add(space: MemorySpace, user: str, agent: str, vector: np.ndarray, stamp: str = STAMP) -> int:
    (page_id,) = space.apply(
        AddTurns(turns=[Turn(user_input=user, agent_response=agent, timestamp=stamp)], vectors=vector[None])
    )
    return page_id


def fillers(space: MemorySpace, count: int) -> list[int]:
    return [add(space, *FILLER, axis(DIM, 8 + i % 8)) for i in range(count)]


def ranked(space: MemorySpace, query: str, vector: np.ndarray, k: int) -> list[int]:
    return [s.page_id for s in rank_pages(space, query, vector, k)]


# --- fusion: each signal alone can bring a page into the top k -----------------------------------------
Exchange = tuple[str, str, np.ndarray]


def space_with_decoys(
    make_space: MakeSpace, decoy: Exchange, decoys: int, target: Exchange, **settings: object
) -> tuple[MemorySpace, int]:
    """`decoys` copies of the `decoy` page, each followed by fillers, then the target page; its id."""
    space = make_space(**settings)
    fillers(space, 6)
    for _ in range(decoys):
        add(space, *decoy)
        fillers(space, 3)
    target_id = add(space, *target)
    fillers(space, 6)
    return space, target_id


LEXICAL_ONLY: tuple[Exchange, int, Exchange] = (
    ("nothing related here", "indeed unrelated", unit(DIM, (0, 0.6), (1, 0.8))),
    8,
    ("the kiwi orchard flooded", "sorry about the orchard", axis(DIM, 2)),
)
"""Eight pages close to the query vector but sharing no word with it; a target with the query's rare
words whose vector is orthogonal to the query."""

DENSE_ONLY: tuple[Exchange, int, Exchange] = (
    ("kiwi orchard kiwi", "the orchard again", axis(DIM, 3)),
    4,
    ("zebra umbrella", "a striped parasol", axis(DIM, 0)),
)
"""Four pages with the query's words but orthogonal vectors; a target with no shared word whose vector is
the query's."""


def test_a_page_only_bm25_finds_is_in_the_top_k(make_space: MakeSpace) -> None:
    space, target = space_with_decoys(make_space, *LEXICAL_ONLY)
    assert target in ranked(space, "kiwi orchard", axis(DIM, 0), 3)
    # Control: dense alone ranks the eight near pages above it, so the test above depends on BM25.
    without_bm25, target = space_with_decoys(make_space, *LEXICAL_ONLY, lexical_weight=0.0)
    assert target not in ranked(without_bm25, "kiwi orchard", axis(DIM, 0), 3)


def test_a_page_only_dense_finds_is_in_the_top_k(make_space: MakeSpace) -> None:
    space, target = space_with_decoys(make_space, *DENSE_ONLY)
    assert target in ranked(space, "kiwi orchard", axis(DIM, 0), 3)
    without_dense, target = space_with_decoys(make_space, *DENSE_ONLY, dense_weight=0.0)
    assert target not in ranked(without_dense, "kiwi orchard", axis(DIM, 0), 3)


# --- neighbour lift -------------------------------------------------------------------------------------
def test_the_neighbour_of_a_strong_match_outranks_an_equal_page_elsewhere(make_space: MakeSpace) -> None:
    space = make_space()
    fillers(space, 5)
    middling = unit(DIM, (0, 0.5), (4, 0.866))
    alone = add(space, "some other remark", "fine", middling)  # lower id: it wins a tie
    fillers(space, 5)
    strong = add(space, "the kiwi orchard flooded", "sorry about the orchard", axis(DIM, 0))
    beside = add(space, "some other remark", "fine", middling)
    fillers(space, 5)
    top = rank_pages(space, "kiwi orchard", axis(DIM, 0), 3)
    assert [s.page_id for s in top][:2] == [strong, beside]
    assert top[1].score > top[2].score and top[2].page_id == alone
    # Without the lift the two equal pages tie and the earlier one comes first.
    space.config.neighbour_weight = 0.0
    assert ranked(space, "kiwi orchard", axis(DIM, 0), 3) == [strong, alone, beside]


def test_a_strong_match_between_weak_pages_stays_first(make_space: MakeSpace) -> None:
    space = make_space()
    fillers(space, 3)
    weak = unit(DIM, (0, 0.3), (5, 0.954))
    for _ in range(3):
        add(space, "some other remark", "fine", weak)
    strong = add(space, "the kiwi orchard flooded", "sorry about the orchard", axis(DIM, 0))
    fillers(space, 8)
    assert ranked(space, "kiwi orchard", axis(DIM, 0), 1) == [strong]


# --- date bonus -----------------------------------------------------------------------------------------
def dated_space(make_space: MakeSpace) -> tuple[MemorySpace, int, int]:
    """Two pages equal in text and vector, the earlier stored months before 8 May 2023, the later that day."""
    space = make_space()
    fillers(space, 4)
    months_away = add(space, "kiwi picking", "lovely", axis(DIM, 0), "2023-01-15 09:00:00")
    fillers(space, 4)
    that_day = add(space, "kiwi picking", "lovely", axis(DIM, 0), "2023-05-08 18:30:00")
    fillers(space, 4)
    return space, months_away, that_day


def test_a_query_naming_a_date_ranks_pages_stored_that_day_first(make_space: MakeSpace) -> None:
    space, months_away, that_day = dated_space(make_space)
    assert ranked(space, "What kiwi did we pick on 8 May, 2023?", axis(DIM, 0), 2) == [that_day, months_away]


def test_a_query_naming_no_date_leaves_the_order_alone(make_space: MakeSpace) -> None:
    space, months_away, that_day = dated_space(make_space)
    top = rank_pages(space, "What kiwi did we pick?", axis(DIM, 0), 2)
    assert [s.page_id for s in top] == [months_away, that_day]
    assert top[0].score == pytest.approx(top[1].score)


# --- name-free query embedding --------------------------------------------------------------------------
def named_space(make_space: MakeSpace, **settings: object) -> MemorySpace:
    """20 pages: "Caroline" in 15 (75%), "Melanie" in 1 (5%)."""
    space = make_space(dense_name_min_pages=20, **settings)
    for i in range(20):
        name = "Caroline" if i < 15 else "Melanie" if i == 15 else "friend"
        add(space, f"Hey {name}, how was the day?", "Good thanks", axis(DIM, 8 + i % 8))
    return space


def test_dense_query_text_drops_a_common_name_and_keeps_a_rare_one(make_space: MakeSpace) -> None:
    space = named_space(make_space)
    query = "What did Caroline's sister tell Melanie about Caroline at lunch?"
    assert dense_query_text(space, query) == "What did sister tell Melanie about at lunch?"


def test_word_asks_made_before_the_space_grew_are_counted_again(make_space: MakeSpace) -> None:
    """A read makes its asks before catching up with other processes' pages (`Memoryos.retrieve`): counts
    of asks the space's size has changed since are not used; the words are counted again."""
    space = named_space(make_space)
    query = "What did Caroline's sister tell Melanie?"
    asks = word_asks(space, query)
    counted = space.store.document_frequencies(asks.asks)
    assert asks.counted(space, counted) == query_words(space, query)
    assert asks.counted(space, counted).dense_text == "What did sister tell Melanie?"
    for _ in range(60):  # now in 15 of 80 pages (under 20%): no longer a speaker's name
        add(space, *FILLER, axis(DIM, 9))
    assert word_asks(space, query) != asks
    assert asks.counted(space, counted) == query_words(space, query)
    assert asks.counted(space, counted).dense_text == query


def test_dense_query_text_keeps_a_name_opening_a_sentence(make_space: MakeSpace) -> None:
    space = named_space(make_space)
    assert (
        dense_query_text(space, "Caroline went where? Caroline knows.")
        == "Caroline went where? Caroline knows."
    )


def test_dense_query_text_keeps_names_below_the_fraction_or_in_small_spaces(make_space: MakeSpace) -> None:
    query = "What did Caroline say?"
    assert dense_query_text(named_space(make_space, dense_name_max_df_fraction=0.8), query) == query
    small = make_space(dense_name_min_pages=21)
    for i in range(20):
        add(small, "Hey Caroline", "hi", axis(DIM, 8 + i % 8))
    assert dense_query_text(small, query) == query


# --- lexical postings budget ----------------------------------------------------------------------------
def test_lexical_terms_keep_the_rarest_words_within_the_budget(make_space: MakeSpace) -> None:
    space = make_space(lexical_postings_budget=6)
    for i in range(10):
        extra = " mango" if i < 4 else ""
        add(space, "tea time" + extra + (" kiwi" if i == 9 else ""), "ok", axis(DIM, 8 + i % 8))
    # kiwi 1 page + mango 4 = 5 fit; tea (10 pages) alone is over 6: left out. Query order is kept.
    assert _lexical_terms(space, "tea mango kiwi") == ["mango", "kiwi"]
    assert _lexical_terms(space, "tea") == []


# --- facts ----------------------------------------------------------------------------------------------
def test_facts_below_knowledge_min_score_are_left_out(make_space: MakeSpace) -> None:
    space = make_space(knowledge_min_score=0.5)
    fillers(space, 3)
    for kind in ("user", "assistant"):
        space.apply(
            AddKnowledge(
                knowledge_kind=kind,
                texts=[f"{kind} close fact", f"{kind} far fact"],
                vectors=np.stack([unit(DIM, (0, 0.6), (1, 0.8)), unit(DIM, (0, 0.4), (2, 0.917))]),
                timestamp=STAMP,
            )
        )
    context = retrieve_context(space, "kiwi", axis(DIM, 0), 3, 10, T0)
    assert [k.knowledge for k in context.retrieved_user_knowledge] == ["user close fact"]
    assert [k.knowledge for k in context.retrieved_assistant_knowledge] == ["assistant close fact"]
    assert context.retrieved_user_knowledge[0].score == pytest.approx(0.6, abs=1e-3)


# --- tiers and segments never hide a page ---------------------------------------------------------------
def file_topic(space: MemorySpace, page_ids: list[int], vector: np.ndarray, keyword: str) -> int:
    space.apply(FileTopic(page_ids=page_ids, summary=keyword, keywords=[keyword], vector=vector, at=T0))
    (segment_id,) = {p.segment_id for p in space.pages(page_ids)}
    assert segment_id is not None
    return segment_id


def test_a_page_of_an_archived_segment_is_still_retrieved(make_space: MakeSpace) -> None:
    space = make_space(mid_term_capacity=1)
    target = add(space, "the kiwi orchard flooded", "sorry about the orchard", axis(DIM, 0))
    other = fillers(space, 6)
    archived = file_topic(space, [target], axis(DIM, 6), "orchard")
    file_topic(space, other, axis(DIM, 7), "chatter")  # over capacity: the orchard segment is archived
    assert archived not in {s.segment_id for s in space.segments()}
    context = retrieve_context(space, "kiwi orchard", axis(DIM, 0), 3, 10, T0)
    assert (context.retrieved_pages[0].page_id, context.retrieved_pages[0].tier) == (target, "archived")


def test_a_page_in_a_cold_unrelated_segment_is_not_gated_out(make_space: MakeSpace) -> None:
    space = make_space()
    hot_pages = [add(space, "kiwi talk", "more kiwi talk", unit(DIM, (0, 0.5), (1, 0.866))) for _ in range(6)]
    cold_page = add(space, "the orchard flooded", "sorry to hear", axis(DIM, 0))
    fillers(space, 6)
    hot = file_topic(space, hot_pages, axis(DIM, 0), "kiwi")  # topic vector equal to the query
    cold = file_topic(space, [cold_page], axis(DIM, 7), "weather")  # topic orthogonal to the query
    space.apply(RecordVisits(segment_ids=[hot] * 5, at=T0))
    assert space.segment_heats(T0)[hot] > space.segment_heats(T0)[cold]
    context = retrieve_context(space, "kiwi", axis(DIM, 0), 3, 10, T0)
    assert context.retrieved_pages[0].page_id == cold_page
    assert context.retrieved_pages[0].segment_id == cold


def test_asking_for_more_pages_than_the_candidate_pool_still_gets_k_pages(make_space: MakeSpace) -> None:
    space = make_space(candidate_pool=2)
    fillers(space, 9)
    assert len(ranked(space, "anything at all", axis(DIM, 8), 6)) == 6


def test_short_term_memory_is_the_newest_pages_while_consolidation_lags(make_space: MakeSpace) -> None:
    """Pages beyond `short_term_capacity` that consolidation has not moved yet (7,000 after bench.serving.api's
    10k-page batch fill) are ranked like any page, not all returned as short-term memory by every read."""
    space = make_space(short_term_capacity=3)
    target = add(space, "the kiwi orchard flooded", "sorry about the orchard", axis(DIM, 0))
    newest = fillers(space, 9)[-3:]
    context = retrieve_context(space, "kiwi orchard", axis(DIM, 0), 3, 10, T0)
    assert [p.page_id for p in context.short_term_memory] == newest
    assert context.retrieved_pages[0].page_id == target


# --- where ranking reads its vectors ----------------------------------------------------------------------
def test_needed_pages_are_scored_from_the_index_and_only_those_it_lacks_from_the_store(
    make_space: MakeSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dense_scores`: what the index holds costs no store read; a page whose vector the index lacks (stored
    since by another process) is scored from the store's vector; a page with none gets no score."""
    space = make_space()
    ids = [add(space, *FILLER, unit(DIM, (0, 0.6), (i % 8 + 1, 0.8))) for i in range(6)]
    (pending,) = space.apply(AddTurns(turns=[Turn(user_input="x", agent_response="y", timestamp=STAMP)]))
    query = axis(DIM, 0)
    asked: list[list[int]] = []
    vectors_of = space.store.embedded_page_vectors

    def counted(page_ids: list[int], dim: int) -> tuple[list[int], np.ndarray]:
        asked.append(list(page_ids))
        return vectors_of(page_ids, dim)

    monkeypatch.setattr(space.store, "embedded_page_vectors", counted)
    with space.lock:
        assert dense_scores(space, query, ids[1:4]) == pytest.approx({pid: 0.6 for pid in ids[1:4]}, abs=1e-3)
        assert asked == []
        space.page_index.remove(np.array([ids[2]], dtype=np.int64))  # as if stored after the catch-up
        scores = dense_scores(space, query, [ids[1], ids[2], pending])
    assert asked == [[ids[2], pending]]
    assert scores == pytest.approx({ids[1]: 0.6, ids[2]: 0.6}, abs=1e-3)
