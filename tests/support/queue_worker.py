"""A `memoryos worker` on a thread of the test process (hashed fake embedder, offline LLM), for tests
against a real `redis-server`; `tests/integration/test_worker_process.py` runs the real process."""

import threading
import time
from typing import Any

from memoryos import MemoryConfig
from memoryos.llm.offline.backend import OfflineLLM
from services.queue.settings import QueueSettings
from services.worker.main import Worker
from tests.support.fakes import HashEmbedder


def wait_for(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


class Running:
    """A worker on a thread; `stop()` drains it, `kill()` abandons it as a crash would (no release).
    Starting returns once it serves: a round has taken its leases, every one it could, with their
    fences. Returning at its first lease let a test ask for a space whose shard the same round had not
    reached yet ("no worker owns shard 6 yet")."""

    def __init__(self, settings: QueueSettings, config: MemoryConfig, name: str, **parts: Any) -> None:
        """`parts` replace the default hashed embedder (the model this worker serves: the fake one every
        test space is made with) and offline LLM; `llm=None` makes each space's LLM from `config` (an
        OpenAI-compatible test server, say), as a real worker does."""
        chosen = {"embedder": HashEmbedder(), "llm": OfflineLLM(), **parts}
        self.embedder = chosen["embedder"]
        self.worker = Worker(settings, config, worker_id=name, **chosen)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.worker.run, args=(self.stop_event,), daemon=True)
        self.thread.start()
        wait_for(lambda: bool(self.worker.serving()))

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)

    def kill(self) -> None:
        """Stop its loop without releasing its leases: they expire as a dead process's would."""
        self.worker.leases.release_all = lambda: None  # type: ignore[method-assign]
        self.stop()
