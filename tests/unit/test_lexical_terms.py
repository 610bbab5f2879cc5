"""Which query words reach BM25: content words only, and the rarest first within the postings budget."""

from pathlib import Path

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.planning.lexical import query_terms
from memoryos.planning.retrieval import _lexical_terms
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns
from memoryos.storage.records.sqlite.page_queries import quoted
from memoryos.types import Turn
from tests.support.fakes import FakeClock


def space_with_pages(tmp_path: Path, **settings: object) -> MemorySpace:
    config = MemoryConfig.model_validate({"data_dir": tmp_path, "faiss_use_gpu": "never", **settings})
    space = MemorySpace(tmp_path / "s", config, "fake", lambda: 4, FakeClock())
    turns = [
        Turn(
            user_input=f"tea time {i}" + (" with a kiwi" if i == 3 else ""),
            agent_response="ok",
            timestamp="2024-01-01 10:00:00",
        )
        for i in range(10)
    ]
    vectors = np.tile(np.array([1, 0, 0, 0], dtype=np.float32), (10, 1))
    space.apply(AddTurns(turns=turns, vectors=vectors))
    return space


def test_query_terms_drop_stopwords_and_duplicates_and_quote_safely() -> None:
    assert query_terms("What did Caroline research, and what did CAROLINE find?") == [
        "caroline",
        "research",
        "find",
    ]
    assert quoted('say "hi"') == '"say ""hi"""'


def test_words_within_the_budget_are_all_kept(tmp_path: Path) -> None:
    space = space_with_pages(tmp_path)
    assert _lexical_terms(
        space,
        "tea with kiwi",
    ) == ["tea", "kiwi"]
    space.close()


def test_the_most_common_words_are_left_out_past_the_budget(tmp_path: Path) -> None:
    """tea is in 10 pages, time in 10, kiwi in 1: a budget of 11 keeps kiwi and one of the others."""
    space = space_with_pages(tmp_path, lexical_postings_budget=11)
    assert _lexical_terms(space, "kiwi tea time") == ["kiwi", "tea"]
    space.close()


def test_a_word_alone_over_the_budget_is_left_out(tmp_path: Path) -> None:
    space = space_with_pages(tmp_path, lexical_postings_budget=5)
    assert _lexical_terms(space, "tea with kiwi") == ["kiwi"]
    assert _lexical_terms(space, "tea time") == []
    space.close()
