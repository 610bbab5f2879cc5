"""Which query words reach BM25: content words only, and in large spaces not the near-ubiquitous ones."""

from pathlib import Path

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.lexical import fts_match_expression, query_terms
from memoryos.ops import AddTurns
from memoryos.retrieval import _lexical_terms
from memoryos.space import MemorySpace
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
    assert fts_match_expression(['say "hi"', "near"]) == '"say ""hi""" OR "near"'
    assert fts_match_expression([]) is None


def test_small_spaces_keep_every_word(tmp_path: Path) -> None:
    space = space_with_pages(tmp_path)
    assert _lexical_terms(space, "tea with kiwi", 10) == ["tea", "kiwi"]
    space.close()


def test_large_spaces_leave_out_words_found_in_most_pages(tmp_path: Path) -> None:
    space = space_with_pages(tmp_path, lexical_df_cap_min_pages=5, lexical_max_df_fraction=0.5)
    assert _lexical_terms(space, "tea with kiwi", 10) == ["kiwi"]
    space.close()
