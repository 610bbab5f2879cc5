"""`bench.quality.recall_without_vectors` ranks a space as if some pages had no vector yet: those pages
leave the dense hits (found by their words only), the others rank as before, and the space is restored."""

from pathlib import Path

from bench.quality.recall_without_vectors import without_vectors
from memoryos.config import MemoryConfig
from memoryos.planning.retrieval import rank_pages
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns
from memoryos.types import Turn
from tests.support.fakes import FakeClock, axis

DIM = 8


def test_pages_shown_without_vectors_are_ranked_by_their_words_alone_and_the_space_is_restored(
    tmp_path: Path,
) -> None:
    config = MemoryConfig(data_dir=tmp_path, faiss_use_gpu="never")
    space = MemorySpace(tmp_path / "space", config, "hand-made", lambda: DIM, FakeClock())
    try:
        texts = ["a quiet afternoon", "nothing much today", "the weather again", "more of the same"]
        ids = []
        for i, text in enumerate(texts):
            turn = Turn(user_input=text, agent_response="ok", timestamp="2022-01-10 10:00:00")
            ids += space.apply(AddTurns(turns=[turn], vectors=axis(DIM, i)[None]))
        query = axis(DIM, 0)  # by meaning, the first page; no word of the query is in any page
        assert rank_pages(space, "zz", query, 1)[0].page_id == ids[0]
        with space.lock, without_vectors(space, [ids[0]]):
            assert ids[0] not in [s.page_id for s in rank_pages(space, "zz", query, 4)]
            found = rank_pages(space, "quiet afternoon", query, 1)  # its words still find it
            assert [s.page_id for s in found] == [ids[0]]
        assert rank_pages(space, "zz", query, 1)[0].page_id == ids[0]
    finally:
        space.close()
