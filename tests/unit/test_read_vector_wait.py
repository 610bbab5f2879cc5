"""A read's bounded wait for vectors (issue 35, reads under load): by default a retrieve waits until every
page stored before it has its vector; with `max_vector_wait_s` it answers after at most that long, ranks
the pages still without one by their words and date, and says how many there were."""

import concurrent.futures
import math
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.scheduler import Scheduler
from tests.support.fakes import HashEmbedder

STUCK_S = 60.0
"""How long a closed gate holds a page batch: far past every wait a test allows."""


class GatedEmbedder(HashEmbedder):
    """Page batches pass only while `open` is set; queries always pass (they go ahead of pages)."""

    def __init__(self) -> None:
        super().__init__(name="gated-hash-embedder")
        self.open = threading.Event()
        self.open.set()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if not is_query:
            self.open.wait(STUCK_S)
        return super().encode(texts, is_query=is_query)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Memoryos, GatedEmbedder]]:
    embedder = GatedEmbedder()
    scheduler = Scheduler(MemoryConfig(embedding_max_wait_ms=5.0), name="test-vector-wait")
    config = MemoryConfig(data_dir=tmp_path, faiss_use_gpu="never", short_term_capacity=3)
    memory = Memoryos.from_config("maya", config, scheduler=scheduler, embedder=embedder, llm=OfflineLLM())
    try:
        memory.add_memory("The weather was mild all week.", "Nice.")
        memory.add_memory("We talked about lunch plans.", "Sounds good.")
        memory.flush()  # both embedded: the space has vectors to rank against
        yield memory, embedder
    finally:
        embedder.open.set()
        memory.close()
        scheduler.close()


def test_a_bounded_read_answers_without_the_missing_vectors_finds_the_page_by_its_words_and_says_so(
    gated: tuple[Memoryos, GatedEmbedder],
) -> None:
    memory, embedder = gated
    embedder.open.clear()  # the next page waits for its vector
    memory.add_memory("My zeppelin model is painted red.", "Lovely.")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        read = pool.submit(memory.retrieve, "zeppelin", 1, None, 0.2)
        context = read.result(timeout=STUCK_S / 2)  # an unbounded read would still wait for the gate
    assert context.pages_without_vectors == 1
    assert [p.user_input for p in context.retrieved_pages] == ["My zeppelin model is painted red."]
    assert "My zeppelin model is painted red." in [p.user_input for p in context.short_term_memory]

    embedder.open.set()
    complete = memory.retrieve("zeppelin", top_k=1)  # the default waits for every vector
    assert complete.pages_without_vectors == 0
    assert [p.user_input for p in complete.retrieved_pages] == ["My zeppelin model is painted red."]


def test_a_bounded_read_stops_waiting_at_once_when_the_batches_ahead_would_outlast_its_bound(
    gated: tuple[Memoryos, GatedEmbedder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a backlog a page batch on the CPU takes longer than a read's bound: the read answers now
    instead of sitting out a wait its vectors cannot end (`EmbeddingBatcher.vectors_due_in_s`)."""
    memory, embedder = gated
    batcher = memory._work._batcher
    monkeypatch.setattr(batcher, "vectors_due_in_s", lambda source: STUCK_S)  # far past the bound
    embedder.open.clear()
    memory.add_memory("My zeppelin model is painted red.", "Lovely.")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        read = pool.submit(memory.retrieve, "zeppelin", 1, None, STUCK_S / 2)
        context = read.result(timeout=STUCK_S / 4)  # a read sitting out its bound would still wait
    assert context.pages_without_vectors == 1
    assert [p.user_input for p in context.retrieved_pages] == ["My zeppelin model is painted red."]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the vectors due in time: it waits for them
        monkeypatch.setattr(batcher, "vectors_due_in_s", lambda source: 0.0)
        read = pool.submit(memory.retrieve, "zeppelin", 1, None, STUCK_S / 2)
        with pytest.raises(concurrent.futures.TimeoutError):
            read.result(timeout=0.5)
        embedder.open.set()
        assert read.result(timeout=STUCK_S / 4).pages_without_vectors == 0


def test_a_read_without_a_bound_still_waits_for_the_vectors_of_the_writes_before_it(
    gated: tuple[Memoryos, GatedEmbedder],
) -> None:
    memory, embedder = gated
    embedder.open.clear()
    memory.add_memory("My zeppelin model is painted red.", "Lovely.")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        read = pool.submit(memory.retrieve, "zeppelin")
        with pytest.raises(concurrent.futures.TimeoutError):
            read.result(timeout=0.5)
        embedder.open.set()
        assert read.result(timeout=30).pages_without_vectors == 0


def test_a_read_whose_pages_all_have_vectors_counts_none_even_with_a_zero_bound(
    gated: tuple[Memoryos, GatedEmbedder],
) -> None:
    memory, _ = gated
    context = memory.retrieve("weather", max_vector_wait_s=0)
    assert context.pages_without_vectors == 0
    assert context.retrieved_pages[0].user_input == "The weather was mild all week."


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, True, "1"])
def test_a_bad_bound_is_refused_naming_the_field(gated: tuple[Memoryos, GatedEmbedder], bad: object) -> None:
    memory, _ = gated
    with pytest.raises(InvalidInputError, match="max_vector_wait_s"):
        memory.retrieve("weather", max_vector_wait_s=bad)  # type: ignore[arg-type]
