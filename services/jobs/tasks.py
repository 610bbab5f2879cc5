"""The maintenance jobs. Each reads its Redis and queue settings from the environment (`MEMORYOS_*`), as
any rq job runs in its own worker process."""

import time

from memoryos.ops import ExpireDue
from services.queue.connection import connect
from services.queue.keys import space_key
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings

QUEUE_NAME = "memoryos-maintenance"


def _queue() -> WriteQueue:
    settings = QueueSettings()
    return WriteQueue(connect(settings), settings)


def sweep_space(space: str) -> str:
    """Ask the owner of `tenant/user/assistant` to erase what has expired by now; returns the entry id."""
    return _queue().enqueue(space_key(space), ExpireDue(at=time.time()))


def sweep_every_space() -> int:
    """The scheduled expiry sweep: one `ExpireDue` per space the queue knows; returns how many were asked.
    Spaces with nothing due apply it as a logged no-op; the engine's own timer also sweeps open spaces."""
    queue = _queue()
    now = time.time()
    spaces = queue.known_spaces()
    for key in spaces:
        queue.enqueue(key, ExpireDue(at=now))
    return len(spaces)
