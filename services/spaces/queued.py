"""`QueuedSpaces`: the spaces of a deployment with Redis (`memoryos serve --redis-url URL`).

This process holds no space and loads no model. A write is planned (checked) by the engine here, appended
to its shard's stream and acknowledged once Redis holds it (`services/queue/producer.py`); the worker that
owns the shard applies it. Every other call goes to that worker (`services/queue/owner_calls.py`), which runs it
after every write of the space accepted before the call. The API is ready when Redis answers: writes are
accepted with no worker running, so autoscaling on queue depth can start workers from zero.
"""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import redis
from anyio import to_thread

from memoryos import MemoryConfig
from memoryos.errors import InvalidInputError, SpaceNotFoundError
from memoryos.portability.bundles import ImportReport
from memoryos.space.ops import AddTurns, ForgetSpace
from memoryos.space.pool import SpaceKey
from services.queue import streams
from services.queue.bundle_transfer import chunks, download, stored_size, upload
from services.queue.connection import connect
from services.queue.dead_letters import DeadLetter, list_dead_letters
from services.queue.keys import space_name
from services.queue.owner_calls import OwnerCallClient, OwnerRefusedError, OwnerUnavailableError
from services.queue.producer import QueueFullError, WriteQueue
from services.queue.settings import QueueSettings
from services.queue.space_jobs import purge_space_jobs
from services.spaces.calls import EXPORT_BUNDLE, IMPORT_BUNDLE, STATS, OwnerCall
from services.spaces.protocol import BackpressureError, SpaceFigures, SpacesLimits, WritePlan
from services.spaces.write_shares import WriteShares

T = TypeVar("T")


class QueuedSpaces:
    """Writes to the shard streams, calls to each space's owner."""

    def __init__(self, config: MemoryConfig, settings: QueueSettings, api: SpacesLimits) -> None:
        """`api`: the Retry-After of a write refused because its shard's stream is full, spread like the
        embedded API's (workers apply hundreds a second, but refused clients must not return together)."""
        self.config = config
        self.settings = settings
        self.api = api
        self.client: redis.Redis = connect(settings)
        self.queue = WriteQueue(self.client, settings)
        self.owner_calls = OwnerCallClient(self.client, settings)
        self.max_bundle_bytes = settings.max_queued_bundle_mb * 1024 * 1024
        self.write_lag_s = 0.0
        """The age of the oldest write not yet applied, as last sampled by `maintain`."""
        self._shares = WriteShares()

    async def call(self, key: SpaceKey, call: OwnerCall[T], /, **args: Any) -> T:
        timeout_s = self.settings.read_timeout_s if call.facade else self.settings.bundle_timeout_s
        try:
            return await to_thread.run_sync(self.owner_calls.ask, key, call, args, timeout_s)
        except OwnerRefusedError as error:
            if error.kind == "SpaceNotFoundError":  # rebuilt here: the worker's message names its paths
                raise self._not_found(key) from None
            raise

    def _not_found(self, key: SpaceKey) -> SpaceNotFoundError:
        """The space's `SpaceNotFoundError`, named by this process's settings (never the worker's paths)."""
        tenant_dir = self.config.model_copy(update={"tenant": key.tenant})
        return SpaceNotFoundError(tenant_dir.space_dir(key.user_id, key.assistant_id))

    async def write(self, key: SpaceKey, plan: WritePlan) -> tuple[AddTurns, list[int]]:
        bound = self.api.max_write_lag_s
        under_pressure = bool(bound and self.write_lag_s * 2 >= bound)  # half the bound: `write_shares.py`
        self._shares.admit_write(
            key, self.refuse_over_lag, under_pressure, self.api.backpressure_retry_after()
        )

        def plan_and_enqueue() -> AddTurns:
            op = plan()
            self.queue.enqueue(key, op)
            return op

        try:
            op = await to_thread.run_sync(plan_and_enqueue)
        except QueueFullError as full:
            raise BackpressureError(str(full), self.api.backpressure_retry_after()) from None
        return op, []  # the owner assigns the page ids when it applies the write

    async def acknowledged_unstored(self, key: SpaceKey, write_ids: list[str]) -> set[str]:
        """The ids among `write_ids` the queue's record of caller-chosen write ids (`producer.ENQUEUE`)
        holds for the space, first accepted less than `write_digest_ttl_s` ago by Redis's clock."""
        times = self.queue.keys.write_digest_times(space_name(key))

        def recorded() -> set[str]:
            pipe = self.client.pipeline(transaction=False)
            pipe.zmscore(times, write_ids)
            pipe.time()
            accepted, (now, _) = pipe.execute()
            since = now - self.settings.write_digest_ttl_s
            return {w for w, at in zip(write_ids, accepted, strict=True) if at is not None and at > since}

        return await to_thread.run_sync(recorded)

    async def forget(self, key: SpaceKey) -> bool:
        """Purge the space's writes, bundles and jobs still in Redis (their text and its ids must not stay
        there), then queue the forget behind anything its owner is applying now, and wait for it as a read
        waits for the writes before it: an owner's answer after the forget says it is erased (a space found
        again was written after the forget). No owner, or none within the read timeout: False, the forget
        still queued."""

        def purge_then_forget() -> None:
            self.queue.purge(key)
            purge_space_jobs(self.client, self.settings, key)
            self.queue.enqueue(key, ForgetSpace())

        await to_thread.run_sync(purge_then_forget)
        try:
            await self.call(key, STATS)
        except SpaceNotFoundError:
            return True
        except (OwnerUnavailableError, OwnerRefusedError):
            return False
        return True

    async def dead_letters(self, tenant: str, user_id: str | None, limit: int) -> list[DeadLetter]:
        return await to_thread.run_sync(
            lambda: list_dead_letters(self.client, self.queue.keys, tenant, user_id, limit)
        )

    async def export_bundle(self, key: SpaceKey, out: Path) -> None:
        """The owner writes the bundle into Redis (`bundle_transfer.py`); this process streams it out."""
        sent = await self.call(key, EXPORT_BUNDLE, max_bytes=self.max_bundle_bytes)
        try:
            await to_thread.run_sync(download, self.client, self.queue.keys, sent.transfer_id, out)
        except InvalidInputError:  # written moments ago and gone: a forget purged it, and the space with it
            raise self._not_found(key) from None

    async def import_bundle(self, key: SpaceKey, bundle: Path) -> ImportReport:
        """The upload crosses Redis to the owner, which imports it into the (empty) space."""
        transfer_id = await to_thread.run_sync(
            upload, self.client, self.queue.keys, key, bundle, self.max_bundle_bytes
        )
        return await self.call(key, IMPORT_BUNDLE, transfer_id=transfer_id)

    def stored_bundle(self, transfer_id: str) -> tuple[int, Iterator[bytes]]:
        """The size and the pieces, read as they are consumed, of a bundle waiting in Redis (a finished
        export job's); `InvalidInputError` once it expired. Blocking."""
        return stored_size(self.client, self.queue.keys, transfer_id), chunks(
            self.client, self.queue.keys, transfer_id
        )

    async def ready(self) -> bool:
        try:
            return bool(await to_thread.run_sync(self.client.ping))
        except redis.RedisError:
            return False

    def figures(self) -> SpaceFigures:
        """Entries not yet applied over every shard, and the age of the oldest (its stream id is the
        time Redis accepted it, read against Redis's own clock)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.settings.shard_count):
            pipe.xlen(self.queue.keys.writes(shard))
            pipe.xrange(self.queue.keys.writes(shard), count=1)
        pipe.hlen(self.queue.keys.forgets_failing())
        pipe.time()
        *replies, forgets_failing, now = pipe.execute()
        seconds, micros = cast(tuple[int, int], now)
        now_ms = seconds * 1000 + micros // 1000
        depth, oldest_ms = 0, None
        for length, first in zip(replies[0::2], replies[1::2], strict=True):
            depth += int(length)
            if first:
                accepted_ms = int(cast(list[streams.Entry], first)[0][0].split(b"-")[0])
                oldest_ms = accepted_ms if oldest_ms is None else min(oldest_ms, accepted_ms)
        lag_s = 0.0 if oldest_ms is None else max(0.0, (now_ms - oldest_ms) / 1000)
        return SpaceFigures(
            queue_depth=depth,
            write_lag_s=lag_s,
            open_spaces=0,
            batcher=None,
            forgets_failing=int(forgets_failing),
        )

    def refuse_over_lag(self) -> None:
        """`BackpressureError` while the oldest write not yet applied is older than `max_write_lag_s`: a
        read waits until its space's writes are applied, so an unbounded queue turns into reads answered 503
        after the read timeout (docs/reliability.md, Reads under load); refusing writes keeps both short.
        The shard streams' own length bound (`queue_max_entries`) still caps Redis's memory."""
        lag, bound = self.write_lag_s, self.api.max_write_lag_s
        if bound and lag >= bound:
            raise BackpressureError(
                f"the oldest queued write was accepted {lag:.1f} s ago and is not applied yet (bound "
                f"{bound:g} s); retry later",
                self.api.backpressure_retry_after(),
            )

    async def maintain(self) -> None:
        """Sample the write lag every `sampler_interval_s` for `refuse_over_lag` (one pipelined round trip
        over the shard streams; a write never pays for it)."""
        while True:
            try:
                self.write_lag_s = (await to_thread.run_sync(self.figures)).write_lag_s
            except redis.RedisError:
                self.write_lag_s = 0.0  # Redis away: writes get 503 from the queue itself, not 429 here
            await anyio.sleep(self.api.sampler_interval_s)

    def preload(self) -> None:
        """Wait (up to the read timeout) for Redis, so a process started beside it reports ready soon."""
        deadline = time.monotonic() + self.settings.read_timeout_s
        while True:
            try:
                self.client.ping()
                return
            except redis.RedisError:
                if time.monotonic() >= deadline:
                    return  # /readyz says 503 until it answers
                time.sleep(0.2)

    def close(self) -> None:
        self.client.close()
