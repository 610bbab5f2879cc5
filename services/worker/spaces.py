"""The spaces a worker holds open: a `SpacePool` of `Memoryos` instances, one per (tenant, user,
assistant), least recently used closed first within the memory budget. Writes open (and create) a
space; reads only open an existing one, so a read for an unknown user creates nothing.

Every space opened here carries its shard's fence: the worker's fencing number for that shard
(`fence_of`), which every write transaction of the space checks, its background work's included (in
the database, or in the data directory's fence files on one host). A shard the worker gives away, or loses, has its spaces closed first
(`close_shard`)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from memoryos import MemoryConfig, Memoryos
from memoryos.embedding.base import Embedder
from memoryos.embedding.shared import shared_embedder
from memoryos.errors import SpaceNotFoundError
from memoryos.facade.memoryos import forget_space
from memoryos.space import tombstones
from memoryos.space.pool import SpaceKey, SpacePool
from memoryos.storage.records.factory import ShardFence, record_store_exists
from services.queue.keys import shard_of
from services.queue.settings import QueueSettings


class WorkerSpaces:
    """Open spaces of one worker process, sharing its embedder, LLM and scheduler."""

    def __init__(
        self,
        config: MemoryConfig,
        settings: QueueSettings,
        fence_of: Callable[[int], int | None] = lambda shard: None,
        **parts: Any,
    ) -> None:
        """`parts` (embedder, llm, clock, scheduler) go to every `Memoryos` opened: tests inject them.
        `fence_of(shard)`: the fencing number this worker holds for the shard now (None: none)."""
        self.config = config
        self._parts = parts
        self._shard_count = settings.shard_count
        self._fence_of = fence_of
        self.pool: SpacePool[Memoryos] = SpacePool(
            self._open,
            memory_budget_bytes=settings.worker_memory_budget_mb * 1024 * 1024,
            max_open=settings.worker_max_open_spaces,
        )

    def config_of(self, key: SpaceKey) -> MemoryConfig:
        """The engine settings of the space's tenant (`<data_dir>/<tenant>/...`)."""
        return self.config.model_copy(update={"tenant": key.tenant})

    def embedder(self) -> Embedder:
        """The embedder every space of this worker shares (an injected one in tests)."""
        injected: Embedder | None = self._parts.get("embedder")
        return injected if injected is not None else shared_embedder(self.config)

    def _open(self, key: SpaceKey, create: bool) -> Memoryos:
        """The pool's factory: a write's open creates the space, a read's does not (`reading`)."""
        return Memoryos.from_config(
            key.user_id,
            self.config_of(key),
            key.assistant_id,
            create=create,
            fence=self._fence(key),
            **self._parts,
        )

    def _fence(self, key: SpaceKey) -> ShardFence:
        """The space's shard and this worker's number for it, which every write of the space checks."""
        shard = shard_of(key, self._shard_count)
        return ShardFence(shard, lambda: self._fence_of(shard))

    def close_shard(self, shard: int) -> None:
        """Close every open space of `shard` (their background work finished or stopped, their snapshots
        written) before the shard's lease goes: a space left open would go on writing for a shard
        another worker owns (and keep a forget of it from erasing, on a data volume)."""
        for key in self.pool.open_keys():
            if shard_of(key, self._shard_count) == shard:
                with self.pool.closed_for(key):
                    pass

    @contextmanager
    def writing(self, key: SpaceKey, on_wait: Callable[[], None] | None = None) -> Iterator[Memoryos]:
        """The space, created if new. `on_wait` runs while the space is not to be had yet (another
        thread opens or closes it, or a reindex holds it closed): the worker renews its leases there."""
        with self.pool.use(key, on_wait) as memory:
            yield memory

    @contextmanager
    def closed(self, key: SpaceKey) -> Iterator[None]:
        """The space closed in this worker, and kept closed until the block exits: for a reindex, which
        takes its files exclusively (`SpacePool.closed_for`)."""
        with self.pool.closed_for(key):
            yield

    def forget(
        self, key: SpaceKey, forgotten_at: float, on_wait: Callable[[], None] | None = None
    ) -> dict[str, int] | None:
        """Erase the space once no call is inside it, none let in until it is gone (`closed_for`), without
        opening it (`memoryos.forget_space`: no model load, and a space still on another embedding model
        goes too), emptying the shared embedding cache. A read that came first answers from the space, one
        that comes after finds none; erasing through the pool's instance would close its SQLite connection
        under the reads using it (docs/lifecycle.md). None when there was no space (a forget delivered again
        after it applied). The volume's tombstone (`forgotten_at`: when the forget was planned) is written
        first, so a restored copy of the space is erased again (`memoryos/space/tombstones.py`). `on_wait`:
        as `writing`'s."""
        with self.pool.closed_for(key, on_wait):
            if self.exists(key):
                tombstones.record(self.config, tombstones.digest(key), forgotten_at)
            try:
                return forget_space(
                    key.user_id, self.config_of(key), key.assistant_id, self.embedder(), self._fence(key)
                )
            except SpaceNotFoundError:
                return None

    def exists(self, key: SpaceKey) -> bool:
        """Whether the space has a store (was written to, and not forgotten since)."""
        return record_store_exists(
            self.config_of(key), self.config_of(key).space_dir(key.user_id, key.assistant_id)
        )

    @contextmanager
    def reading(self, key: SpaceKey) -> Iterator[Memoryos]:
        """An existing space only: `SpaceNotFoundError` (nothing created) for one that has no store."""
        if not self.exists(key):
            raise SpaceNotFoundError(self.config_of(key).space_dir(key.user_id, key.assistant_id))
        with self.pool.use(key, create=False) as memory:  # one that waited out a forget makes nothing
            yield memory

    def warm_up(self) -> None:
        """Load the embedding model (and its runtime) now: a worker that took shards before loading it
        would hold their writes and reads for the seconds a load takes."""
        self.embedder().encode(["warm up"])

    def close(self) -> None:
        self.pool.close()
