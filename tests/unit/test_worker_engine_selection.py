"""Which worker starts the host's embedding engine: several applying processes share one by default; one
process, an engine run apart, or an embeddings server leave none to start."""

from pathlib import Path

import pytest

from memoryos import MemoryConfig
from services.queue.settings import QueueSettings
from services.worker.process import engine_threads, runs_embedding_engine


@pytest.mark.parametrize(
    ("processes", "configured", "expected"),
    [
        (1, None, False),  # one process: its own model, no socket hop
        (4, None, True),  # several: one model for all of them
        (4, False, False),  # turned off: each child loads the model again
        (1, True, True),  # asked for with one applying process
    ],
)
def test_the_engine_follows_the_process_count_unless_configured(
    processes: int, configured: bool | None, expected: bool
) -> None:
    settings = QueueSettings(worker_processes=processes, worker_embedding_engine=configured)
    assert runs_embedding_engine(settings, MemoryConfig()) is expected


def test_no_engine_is_started_when_one_runs_apart_or_a_server_embeds(tmp_path: Path) -> None:
    settings = QueueSettings(worker_processes=4, worker_embedding_engine=True)
    apart = MemoryConfig(embedding_engine_socket=tmp_path / "engine.sock")
    served = MemoryConfig(embedding_api_base_url="http://127.0.0.1:8080/v1")
    assert not runs_embedding_engine(settings, apart)
    assert not runs_embedding_engine(settings, served)


@pytest.mark.parametrize(
    ("cores", "processes", "threads"),
    [
        (16, 8, 8),  # the cores the applying processes leave: no longer the per-process cap of 4
        (2, 2, 1),  # none left: one thread all the same
        (64, 4, 60),
        (None, 4, 1),  # the OS cannot tell
    ],
)
def test_the_engine_takes_the_cores_the_applying_processes_leave(
    cores: int | None, processes: int, threads: int
) -> None:
    assert engine_threads(cores, processes) == threads
