"""`memoryos worker --redis-url URL`: one worker process — leases, queued writes, reads, drain.

The main loop heartbeats, renews its leases (dropping shards it lost), takes free shards up to its fair
share and gives back those beyond it, and applies the owned shards' writes; a second thread answers
reads. While Redis is away (restarting, replaying its AOF, unreachable) both wait and try again, with a
growing pause (`outage.py`); the leases are trusted only as long as their last renewal vouches for them,
so a lease that expired meanwhile is re-won by the usual rules, never assumed, and the entries left
pending are taken up again. SIGTERM (every Kubernetes rollout sends it) sets `stop`: the write batch in flight finishes and
is acknowledged, the leases are released at once so other workers take the shards without waiting for
the TTL, and the spaces are closed (their index snapshots written).
"""

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import redis

from memoryos import MemoryConfig
from memoryos.errors import DatabaseUnavailableError, FencedOutError
from memoryos.scheduler import Scheduler, shared_scheduler
from memoryos.space.ops import AddTurns, AnyOp, ForgetSpace
from memoryos.space.pool import SpaceKey
from memoryos.space.tombstones import prune_snapshot_cache
from memoryos.storage.records.factory import take_shard_fence
from services.allocator import PeriodicTrim
from services.queue.connection import REDIS_UNAVAILABLE, connect
from services.queue.settings import QueueSettings
from services.worker.consumer import ShardConsumer
from services.worker.leases import ShardLeases
from services.worker.outage import Outage
from services.worker.owner_calls import OwnerCallServer
from services.worker.spaces import WorkerSpaces
from services.worker.tombstones import honour_tombstones

log = logging.getLogger(__name__)

CACHE_PRUNE_S = 30.0
"""With a database, how often a worker removes its cached snapshots of spaces forgotten by another
worker (`prune_snapshot_cache`): the longest such a snapshot stays on this host's disk."""
EMBEDDING_HOLD_POLL_S = 0.02
"""How often a worker holding back new writes looks at its embedding lag again: a fraction of the bound."""


def new_worker_id() -> str:
    """Host, pid and a random part: unique, and readable in `XINFO CONSUMERS` and the lease keys."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """One worker: its leases, its consumer, its read server and its open spaces."""

    def __init__(
        self, settings: QueueSettings, config: MemoryConfig, worker_id: str | None = None, **parts: Any
    ) -> None:
        """`parts` (embedder, llm, clock, scheduler) go to every space opened: tests inject them. Its
        batcher never gives way to the writes it applies (`embedding_yield_ms` 0): Redis acknowledged them,
        and embedding them is this process's job."""
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.client: redis.Redis = connect(settings)
        config = config.model_copy(update={"embedding_yield_ms": 0.0})
        self.fences: dict[int, int] = {}
        """The fencing number this worker recorded for each shard it took."""
        self._to_close: set[int] = set()
        """Shards lost (a lease that lapsed, a write fenced out) whose spaces the main loop closes next."""
        self.spaces = WorkerSpaces(config, settings, fence_of=self._fence_of, **parts)
        self.scheduler: Scheduler = parts.get("scheduler") or shared_scheduler(config)
        self.leases = ShardLeases(self.client, settings, self.worker_id)
        self.consumer = ShardConsumer(self.client, settings, self.worker_id, self._apply, self._still_owned)
        self._owned_snapshot: list[int] = []
        self._owner_calls = OwnerCallServer(
            connect(settings),
            settings,
            self.spaces,
            self.serving,
            self.consumer.held.ask_release,
            self.consumer.progress,
        )
        self.period_s = min(0.5, settings.lease_ttl_s / 4)
        self.trusted_s = settings.lease_ttl_s - self.period_s
        """How long the leases are trusted after the last renewal round was *sent*: Redis extended them
        no earlier than that, for the TTL. The last period is margin for the run being applied."""
        self._renewed_at = -self.trusted_s  # no renewal yet: nothing trusted
        self._trim_heap = PeriodicTrim(settings.worker_allocator_trim_interval_s)

    def owned_queue_depth(self) -> int:
        """Unapplied writes in the shards owned now (applied entries are deleted)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in sorted(self.leases.owned):
            pipe.xlen(self.consumer.keys.writes(shard))
        return sum(int(n) for n in pipe.execute())

    def _fence_of(self, shard: int) -> int | None:
        """This worker's fencing number for `shard`, which every write of its spaces checks against the
        number recorded for the shard. The number, not the clock, decides a commit: a write that outlasts
        the lease (a long run, a pause) still commits if no other worker took the shard meanwhile, and
        is refused once one did (it recorded a greater number). A shard given away or found lost has no
        number here any more."""
        return self.fences.get(shard)

    def _take_fence(self, shard: int) -> bool:
        """Draw and record a fencing number for a shard just leased, before any of its writes or reads is
        served (in the database, waiting out any transaction of the previous owner). False, and the lease
        given back, when the database cannot be reached: another worker may take the shard."""
        try:
            self.fences[shard] = take_shard_fence(self.spaces.config, shard)
        except DatabaseUnavailableError as error:
            log.warning(
                "shard %d not taken: the database is away", shard, extra={"error": type(error).__name__}
            )
            self.leases.release(shard)
            return False
        return True

    def _stop_serving(self, shards: set[int]) -> None:
        """Stop serving `shards` at once (a lease lost, a write fenced out): no number vouches for their
        writes any more, and their spaces are closed by the main loop (`_close_lost`)."""
        for shard in shards:
            self.fences.pop(shard, None)
            self.leases.owned.discard(shard)
        self._owned_snapshot = sorted(self.leases.owned)
        self._to_close |= shards

    def _close_lost(self) -> None:
        """Close the spaces of the shards lost since the last round, from the main loop (never from inside
        a space's use, which closing would wait for)."""
        while self._to_close:
            self.spaces.close_shard(self._to_close.pop())

    def _give_back(self, shard: int) -> None:
        """Give a shard away (a surplus): stop serving it, close its spaces with its number still valid (a
        consolidation finishing as its space closes commits), then forget the number and release the
        lease, so the next owner finds nothing of this worker's left running."""
        self.leases.owned.discard(shard)
        self._owned_snapshot = sorted(self.leases.owned)
        self.spaces.close_shard(shard)
        self.fences.pop(shard, None)
        self.leases.release(shard)

    def _apply(self, key: SpaceKey, ops: list[AnyOp]) -> object:
        try:
            return self._apply_ops(key, ops)
        except FencedOutError as error:
            log.warning(
                "worker %s was fenced out of shard %d; stopped serving it", self.worker_id, error.shard
            )
            self._stop_serving({error.shard})
            raise

    def _apply_ops(self, key: SpaceKey, ops: list[AnyOp]) -> object:
        if len(ops) == 1 and isinstance(ops[0], ForgetSpace):
            return self._forget(key, ops[0])
        # A reindex of the space (on a read thread) can hold it closed for minutes: the leases are
        # renewed while this write waits for it, or they would lapse and let a second worker in.
        with self.spaces.writing(key, on_wait=self._renew_if_due) as memory:
            writes = [op for op in ops if isinstance(op, AddTurns)]
            if len(writes) == len(ops):
                return memory.apply_writes(writes)  # one commit for the run
            return [memory.apply_queued(op) for op in ops]

    def _forget(self, key: SpaceKey, op: ForgetSpace) -> object:
        """Erase the space once the calls on it have returned (`WorkerSpaces.forget`, which leaves its
        tombstone on the volume first); what Redis holds of it is the consumer's to drop. The leases are
        renewed while it waits (a reindex may hold the space)."""
        return {"forgotten": self.spaces.forget(key, op.at, self._renew_if_due) is not None}

    def _keep_leases(self) -> None:
        """Heartbeat and renew every lease held; the shards lost stop being served at once.

        The leases count as renewed from when the renewal was sent, not from when Redis's answer came:
        an answer held up on the network (a partition that heals, a stalled link) says "renewed" about
        a lease that may have expired since and been taken by another worker."""
        sent = time.monotonic()
        self.leases.heartbeat()
        lost = self.leases.renew()
        if lost:  # a partition or a stall outlasted the TTL: worth an operator's attention
            log.warning(
                "worker %s lost the lease of shards %s; stopped serving them", self.worker_id, sorted(lost)
            )
            self._stop_serving(lost)
        self._renewed_at = sent
        self._owned_snapshot = sorted(self.leases.owned)

    def _renew_if_due(self) -> None:
        """Heartbeat and renew when a period has passed: between entries, and while a write waits for a
        space held closed (a reindex)."""
        if time.monotonic() - self._renewed_at >= self.period_s:
            self._keep_leases()

    def _renew_until(self, closed: threading.Event) -> None:
        """While a drain closes the spaces: keep the leases every period, so that no other worker takes a
        shard whose spaces are still finishing their background work here (closing waits for a
        consolidation pass, which can outlast the TTL). A lease lost meanwhile is not fought for: its
        fencing number already refuses this worker's commits."""
        while not closed.wait(self.period_s):
            try:
                self.leases.heartbeat()
                self.leases.renew()
            except REDIS_UNAVAILABLE:
                log.warning(
                    "worker draining while Redis is away: its leases may lapse before its spaces close"
                )

    def _trusted(self) -> bool:
        """Whether the last renewal, counted from when it was sent, still vouches for the leases."""
        return time.monotonic() - self._renewed_at < self.trusted_s

    def serving(self) -> list[int]:
        """The shards this worker may apply writes and answer calls for now: those it holds, and only
        while its last renewal is trusted (the read threads ask; the main loop may be stuck on Redis)."""
        return self._owned_snapshot if self._trusted() else []

    def _still_owned(self, shard: int) -> bool:
        """Asked by the consumer before each entry: renews the leases when a period has passed since the
        last renewal, so a long round of writes never lets them lapse while this worker is alive; and
        says no when even the renewal just made cannot vouch for the lease (its answer came too late)."""
        self._renew_if_due()
        return shard in self.leases.owned and self._trusted()

    def step(self) -> int:
        """One round: leases, then the owned shards' writes. Returns how many entries were handled."""
        self._keep_leases()
        self._close_lost()
        for shard in self.leases.acquire(self.leases.target()):
            if self._take_fence(shard):
                self.consumer.take_over(shard)
        busy = self._owner_calls.busy_shards()
        for shard in self.leases.surplus():
            if shard not in busy:  # a call running on it (a reindex): give it back later
                self._give_back(shard)  # between polls: none of its writes is in flight here
        self._owned_snapshot = sorted(self.leases.owned)
        shards = self.serving()
        if not shards:  # nothing held, or the leases not vouched for: renew again after a period
            time.sleep(self.period_s)
            return 0
        if self._embedding_behind():
            # The writes wait in the streams, where the API sees the lag; but not those a read waits for,
            # which would wait out the whole hold (lifting the hold for every shard while any read waited
            # moved the backlog into the worker: docs/reliability.md).
            awaited = self._owner_calls.shards_awaiting_writes()
            waited_for = [shard for shard in shards if shard in awaited]
            if waited_for:
                return self.consumer.poll(waited_for, block_ms=int(EMBEDDING_HOLD_POLL_S * 1000))
            time.sleep(EMBEDDING_HOLD_POLL_S)
            return 0
        return self.consumer.poll(shards, block_ms=int(self.period_s * 1000))

    def _embedding_behind(self) -> bool:
        bound = self.settings.worker_max_embedding_lag_s
        return bool(bound) and self.scheduler.embedding_lag_s() > bound

    def run(self, stop: threading.Event) -> None:
        """Work until `stop` is set, then drain and give everything back."""
        owner_calls = threading.Thread(
            target=self._owner_calls.serve, args=(stop,), name="memoryos-owner-calls", daemon=True
        )
        owner_calls.start()
        log.info("worker started", extra={"worker": self.worker_id})
        outage, database_outage = Outage("worker"), Outage("worker", "the database")
        full = Outage("worker", "Redis at maxmemory")
        checked = False  # the tombstones, before any shard is taken; again after Redis was away
        pruned_at = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    if not checked:
                        honour_tombstones(self.client, self.settings, self.spaces, self._renew_if_due)
                        checked = True
                    if time.monotonic() - pruned_at >= CACHE_PRUNE_S:
                        pruned_at = time.monotonic()
                        prune_snapshot_cache(self.spaces.config, set(self.spaces.pool.open_keys()))
                    self.step()
                except REDIS_UNAVAILABLE as error:
                    checked = False  # it may come back restored from a backup taken before a forget
                    stop.wait(outage.failed(error))
                    continue
                except DatabaseUnavailableError as error:
                    stop.wait(database_outage.failed(error))
                    continue
                except redis.exceptions.OutOfMemoryError as error:
                    # Every Redis write on the draining path is one Redis takes at maxmemory
                    # (docs/reliability.md, "Redis full"); one it refuses is waited out, never an exit.
                    stop.wait(full.failed(error))
                    continue
                outage.over()
                database_outage.over()
                full.over()
                self._trim_heap()  # evicted spaces' holes back to the system, between rounds
        finally:
            # Drain: no more reads or writes, every space closed (its background work done, its numbers
            # still valid), and only then the leases go, so the next owner finds nothing running here. They
            # are renewed meanwhile: the owner-call thread's last wait and the closes can outlast the TTL.
            self._owned_snapshot = []
            closed = threading.Event()
            renewing = threading.Thread(
                target=self._renew_until, args=(closed,), name="memoryos-drain-leases", daemon=True
            )
            renewing.start()
            # on a thread of its own: a Redis that does not answer must not hold the drain up for longer
            threading.Thread(target=self._owner_calls.wake, name="memoryos-wake-reads", daemon=True).start()
            try:
                owner_calls.join(timeout=5)
                self.spaces.close()
            finally:
                closed.set()
                renewing.join(timeout=self.period_s + 5)
            self.fences.clear()
            try:
                self.leases.release_all()
            except REDIS_UNAVAILABLE:  # they expire after their TTL instead
                log.warning("worker stopping while Redis is away: its leases are left to expire")
            log.info("worker stopped; shards released", extra={"worker": self.worker_id})
