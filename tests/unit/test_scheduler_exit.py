"""The scheduler closing under a consolidation pass that waits for vectors (issue 57): what interpreter
exit does to a script that never closed its `Memoryos`. The pass is cancelled before the batchers close
and nothing is logged; before, the batcher closed first, the pass failed with `BatcherClosedError` and
logged "consolidation pass failed" with a traceback (2 runs in 5 of a script in the reference's style).
`tests/e2e/test_interpreter_exit.py` runs the real exit in a subprocess."""

import logging
import threading
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.errors import SchedulerClosedError
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.scheduler import Scheduler
from memoryos.scheduler.batcher import BatcherClosedError
from memoryos.scheduler.space_work import _embed_in_batches
from memoryos.space.memory_space import MemorySpace
from tests.support.fakes import BlockedEmbedder


def test_closing_cancels_a_pass_waiting_for_vectors_before_the_batchers_close(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A page's batch holds the batcher; a pass waits behind it for a fact's vector. Closing must end the
    pass by cancelling it — not by failing its request when the batcher closes — and log nothing."""
    config = MemoryConfig(data_dir=tmp_path, openai_api_key=None)
    scheduler = Scheduler(config, name="exit-test")
    embedder = BlockedEmbedder()
    memory = Memoryos.from_config("maya", config, embedder=embedder, llm=OfflineLLM(), scheduler=scheduler)
    waiting, ended = threading.Event(), threading.Event()
    outcome: list[str] = []

    async def waiting_for_a_facts_vector(space: MemorySpace) -> None:
        waiting.set()
        try:
            await _embed_in_batches(scheduler.batcher(embedder), ["Maya adopted a dog called Pico."])
            outcome.append("encoded")
        except BaseException as error:
            outcome.append(type(error).__name__)
            raise
        finally:
            ended.set()

    try:
        memory.add_memory("I adopted a dog called Pico.", "Lovely name!")  # its batch blocks the batcher
        memory._work.consolidator.run = waiting_for_a_facts_vector  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING):
            memory._work.request_consolidation()
            assert waiting.wait(10)
            closing = threading.Thread(target=scheduler.close)
            closing.start()
            assert ended.wait(20)  # cancelled, or failed by the closing batcher: before the batch ends
            embedder.release.set()
            closing.join(30)
            assert not closing.is_alive()
        assert outcome == ["CancelledError"]
        assert not [record for record in caplog.records if record.levelno >= logging.WARNING], caplog.text
    finally:
        embedder.release.set()
        memory.close()
        scheduler.close()


def test_a_closed_batcher_is_the_scheduler_closing_to_a_pass() -> None:
    """A pass that meets a closed batcher anyway (asked for by the last batch) ends as one that meets the
    closed scheduler: `SpaceWork._passes` catches `SchedulerClosedError` and leaves the work to the next
    open, quietly."""
    assert issubclass(BatcherClosedError, SchedulerClosedError)
