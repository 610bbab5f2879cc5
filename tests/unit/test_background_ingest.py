"""Background ingest: add_memory acknowledges a durable page at once; the process's scheduler embeds and
consolidates it."""

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.facade.memoryos import Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns
from memoryos.types import Turn
from tests.support.fakes import FAKE_DIM, FAKE_MODEL_NAME, HashEmbedder


class SlowCountingEmbedder(HashEmbedder):
    """Counts encode calls and takes a while per call, so writes pile up behind it."""

    def __init__(self, delay_s: float = 0.05, broken: bool = False) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.delay_s = delay_s
        self.broken = broken

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if not is_query:
            self.calls.append(len(texts))
            time.sleep(self.delay_s)
            if self.broken:
                raise RuntimeError("embedding backend unavailable")
        return super().encode(texts, is_query=is_query)


def make(root: Path, embedder: HashEmbedder) -> Memoryos:
    return Memoryos(
        "alice",
        None,
        root,
        short_term_capacity=3,
        config=MemoryConfig(faiss_use_gpu="never", ingest_mode="background"),
        embedder=embedder,
        llm=OfflineLLM(),
    )


def test_writes_are_acknowledged_before_embedding_and_batched(tmp_path: Path) -> None:
    embedder = SlowCountingEmbedder(delay_s=0.05)
    memory = make(tmp_path, embedder)
    ids = [memory.add_memory(f"note {i} about kiwi{i}", "noted") for i in range(12)]

    assert ids == list(range(1, 13))
    assert len(memory.space.pages(ids)) == 12  # durable before any vector exists
    found = memory.retrieve("kiwi7", top_k=1).retrieved_pages
    assert [p.page_id for p in found] == [8]
    assert sum(embedder.calls) == 12
    assert len(embedder.calls) < 12, "pending pages share encode calls"
    stats = memory.stats()
    assert stats.short_term_pages == 3 and stats.mid_term_pages == 9
    memory.close()


def test_an_embedding_failure_surfaces_on_read_and_loses_nothing(tmp_path: Path) -> None:
    embedder = SlowCountingEmbedder(delay_s=0.0, broken=True)
    memory = make(tmp_path, embedder)
    page_id = memory.add_memory("My locker code is 4411.", "I'll remember it.")

    with pytest.raises(RuntimeError, match="unavailable"):
        memory.retrieve("locker code")
    (page,) = memory.space.pages([page_id])
    assert not page.embedded

    embedder.broken = False
    found = memory.retrieve("locker code").retrieved_pages  # the next read retries, and succeeds
    assert [p.page_id for p in found] == [page_id]
    memory.close()


def test_pages_stored_but_not_embedded_before_a_restart_are_embedded_on_open(tmp_path: Path) -> None:
    memory = make(tmp_path, HashEmbedder())
    memory.close()
    # What a crash right after the acknowledgement leaves: pages without vectors.
    config = MemoryConfig(data_dir=tmp_path, faiss_use_gpu="never")
    space_writer = MemorySpace(
        config.space_dir("alice", "default_assistant_profile"), config, FAKE_MODEL_NAME, lambda: FAKE_DIM
    )
    space_writer.apply(
        AddTurns(
            turns=[
                Turn(
                    user_input="The spare key is under the mat.",
                    agent_response="OK.",
                    timestamp="2024-01-01 09:00:00",
                )
            ]
        )
    )
    space_writer.close()

    reopened = make(tmp_path, HashEmbedder())
    found = reopened.retrieve("spare key", top_k=1).retrieved_pages
    assert found and found[0].user_input == "The spare key is under the mat."
    reopened.close()


def test_concurrent_writers_all_land(tmp_path: Path) -> None:
    memory = make(tmp_path, SlowCountingEmbedder(delay_s=0.01))

    def write(worker: int) -> None:
        for i in range(10):
            memory.add_memory(f"worker {worker} message {i}", "ack")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = memory.stats()
    assert stats.short_term_pages + stats.mid_term_pages + stats.archived_pages == 40
    assert memory.space.page_index.count() == 40
    memory.close()
