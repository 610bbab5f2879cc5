"""`Spaces`: what the REST routes and the MCP tools need of memory spaces, whichever mode serves them.

Two implementations: `EmbeddedSpaces` (`embedded.py`: `memoryos serve`, the engine in this process, a write
acknowledged once SQLite holds it) and `QueuedSpaces` (`queued.py`: `memoryos serve --redis-url`,
a write acknowledged once Redis holds it, every other call answered by the worker that owns the space).
Callers name what to run (`services/spaces/calls.py`), never pass code, so the same request works in both.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from memoryos import MemoryConfig
from memoryos.portability.bundles import ImportReport
from memoryos.scheduler.batcher import BatcherStats
from memoryos.space.ops import AddTurns
from memoryos.space.pool import SpaceKey
from services.queue.dead_letters import DeadLetter
from services.spaces.calls import OwnerCall

T = TypeVar("T")

WritePlan = Callable[[], AddTurns]
"""Makes a write's op: the engine's check of the turns (`plan_write`), raising on bad input. Run on the
thread that stores or enqueues the write, not on the event loop (docs/api.md: the loop bounds the rate)."""


class BackpressureError(Exception):
    """Writes arrive faster than they are embedded or applied: refused, nothing stored; retry later."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class NotInThisModeError(Exception):
    """The route exists, but this mode of the API cannot serve it yet (501 with the reason)."""


@dataclass(frozen=True)
class SpaceFigures:
    """What `/metrics` reports of the spaces, read at scrape time."""

    queue_depth: int
    """Writes acknowledged and not yet searchable (embedded: pages to embed; Redis: entries to apply)."""
    write_lag_s: float
    """Age of the oldest of those writes (0 when none)."""
    open_spaces: int
    batcher: BatcherStats | None
    """This process's embedding batcher, when it embeds (embedded mode, once a model is loaded)."""
    forgets_failing: int = 0
    """Spaces whose queued forget failed and is being retried (Redis mode; embedded forgets answer at once)."""


class SpacesLimits(Protocol):
    """The bounds a `Spaces` keeps, as the serving process's settings state them (`ApiSettings`)."""

    max_write_lag_s: float
    max_pending_pages: int
    memory_budget_mb: int
    max_open_spaces: int
    allocator_trim_interval_s: float
    sampler_interval_s: float

    def backpressure_retry_after(self) -> int:
        """Seconds a write refused by backpressure should wait before it comes back."""
        ...


class Spaces(Protocol):
    """The memory spaces behind one API process."""

    config: MemoryConfig
    """The engine's settings (limits such as `max_text_chars` are checked before anything is queued)."""

    async def call(self, key: SpaceKey, call: OwnerCall[T], /, **args: Any) -> T:
        """Run `call` on the space. A call that does not create (`call.creates`) on a space that does not
        exist raises `SpaceNotFoundError`, and nothing is created."""
        ...

    async def write(self, key: SpaceKey, plan: WritePlan) -> tuple[AddTurns, list[int]]:
        """Plan a write and acknowledge it once it is durable: its op, and its page ids when already known
        (embedded), else none (queued: `GET .../writes/{id}` tells them once applied). A refused plan
        creates no space; `BackpressureError` over the bound."""
        ...

    async def acknowledged_unstored(self, key: SpaceKey, write_ids: list[str]) -> set[str]:
        """Of `write_ids`, which the space did not hold when asked (`WRITE_STATUS` said None), those this API
        acknowledged to the space and may still store: a read may wait for these, and any other is a write
        id the space never acknowledged (a read naming it is refused at once, not left to time out).
        Embedded: none — a write is stored before it is acknowledged. Redis: the caller-chosen ids the queue
        recorded for the space in the last `write_digest_ttl_s` (an id the server chose was stored before
        any read could name it: the owner answers a read after every write acknowledged before it)."""
        ...

    async def forget(self, key: SpaceKey) -> bool:
        """Erase the space (after every write accepted before it). True once it is erased; False when
        the erase is queued and was not seen done within the read timeout (its owner busy or away): it
        happens when the owner applies it, retried until it does, never dropped."""
        ...

    async def dead_letters(self, tenant: str, user_id: str | None, limit: int) -> list[DeadLetter]:
        """Writes of the tenant (of one user, if given) that could never be applied: only a queue has
        any (embedded, a refused write is refused before it is acknowledged)."""
        ...

    async def export_bundle(self, key: SpaceKey, out: Path) -> None:
        """Write the space as a bundle file at `out` (`SpaceNotFoundError` when there is none)."""
        ...

    async def import_bundle(self, key: SpaceKey, bundle: Path) -> ImportReport:
        """Import the bundle file into the space, which must hold no memory yet."""
        ...

    async def ready(self) -> bool:
        """Whether calls can be served now (`/readyz`)."""
        ...

    def figures(self) -> SpaceFigures: ...

    async def maintain(self) -> None:
        """Background upkeep for the process's lifetime (cancelled at shutdown)."""
        ...

    def preload(self) -> None:
        """Load what the first call would wait for (blocking), before the process says it is ready."""
        ...

    def close(self) -> None: ...
