"""The worker's side of owner calls over Redis (`services/queue/owner_calls.py`): a thread that takes requests
for the shards this worker owns and hands each to one of `worker_read_threads` threads, which waits until
the space's writes up to the request's `through` entry are applied, runs the call on the engine
(`services/spaces/calls.py`) and pushes the answer to the request's reply list.

Several threads, because a read waits: for its space's writes to leave the stream, then for their
vectors. With one thread every other user's read would queue behind that wait, and under a steady write
load reads would time out (503) while the worker only waits (docs/reliability.md, "Reads under load"). A
request is taken from Redis only when a thread is free, so what waits beyond them waits in Redis, where
the API's timeout bounds it.

Traced, each call is a SERVER span in the caller's trace (its request carries the caller's context), the
parent of what the call does here: its wait for the space's writes, the engine's work, an LLM request."""

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import redis
from opentelemetry.trace import SpanKind

from memoryos import Memoryos
from memoryos.errors import MemoryOSError
from memoryos.space.pool import SpaceKey
from memoryos.tracing import context_of, tracing_enabled
from memoryos.tracing.spans import mark_failed, operation_span
from services.queue import streams
from services.queue.connection import BLOCK_SLICE_S, REDIS_UNAVAILABLE
from services.queue.keys import Keys, space_key
from services.queue.redis_full import ALLOW_OOM
from services.queue.settings import QueueSettings
from services.queue.tracing import OWNER_CALL_OPERATIONS, TRACE_KEY, owner_call_attributes
from services.spaces.calls import REINDEX, owner_call, run_call
from services.worker.bundles import run_bundle_call
from services.worker.outage import Outage
from services.worker.reindex import run_reindex_call
from services.worker.spaces import WorkerSpaces
from services.worker.stream_progress import StreamProgress

log = logging.getLogger(__name__)

REPLY_TTL_S = 60
"""A reply nobody collected (the API timed out) expires from Redis after this."""
REPLY = (
    ALLOW_OOM
    + """
redis.call('RPUSH', KEYS[1], ARGV[1])
return redis.call('EXPIRE', KEYS[1], ARGV[2])
"""
)
"""Push a call's answer with its expiry in one step, even while Redis is full: the API took the request
before, and waits for this answer (`services/queue/redis_full.py`)."""
WAKE = (
    ALLOW_OOM
    + """
redis.call('RPUSH', KEYS[1], '1')
return redis.call('PEXPIRE', KEYS[1], ARGV[1])
"""
)
"""Wake the request thread from its blocking pop (`OwnerCallServer.wake`), even while Redis is full: the
drain waits for that thread. One small entry, with an expiry: the thread may have left already."""
WAKE_TTL_MS = 10_000
SERVED_POLL_S = 0.01
"""How often a call waits to be served again on a shard whose lease the main loop is renewing."""


def run_owner_call(memory: Memoryos, kind: str, args: dict[str, Any]) -> Any:
    """One owner call on the engine, its result as JSON data."""
    call = owner_call(kind)
    return call.result.dump_python(run_call(memory, call, args), mode="json")


class OwnerCallServer:
    """Answers owner calls (reads, edits, bundles, reindex) for the shards `owned()` returns, until `stop`
    is set."""

    def __init__(
        self,
        client: redis.Redis,
        settings: QueueSettings,
        spaces: WorkerSpaces,
        owned: Callable[[], list[int]],
        reindexed: Callable[[SpaceKey], None],
        progress: StreamProgress,
    ) -> None:
        """`reindexed` is told each space a reindex call moved to this worker's model: its held writes
        (`held.py`) can apply now. `progress` says when entries left a shard's stream: the consumer's."""
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.redis_namespace)
        self.spaces = spaces
        self.owned = owned
        self.reindexed = reindexed
        self.progress = progress
        self._busy: Counter[int] = Counter()
        self._awaiting: Counter[int] = Counter()
        self._busy_lock = threading.Lock()
        self._reply = client.register_script(REPLY)
        self._wake = client.register_script(WAKE)
        self._wake_key = self.keys.owner_calls_wake(uuid.uuid4().hex[:12])

    def busy_shards(self) -> frozenset[int]:
        """The shards of the calls running now: the worker does not give them back meanwhile (a reindex or
        an import runs for minutes, and the shard's next owner would open the space under it)."""
        with self._busy_lock:
            return frozenset(self._busy)

    def shards_awaiting_writes(self) -> frozenset[int]:
        """The shards where a call waits for writes still in the stream: the worker applies those even
        while it holds new writes back for its embedding lag, or the call would wait out the whole hold
        (then for the vectors, which go first once a reader waits for them)."""
        with self._busy_lock:
            return frozenset(self._awaiting)

    def serve(self, stop: threading.Event) -> None:
        """Take requests while a thread is free, until `stop`; then let the calls running finish."""
        threads = self.settings.worker_read_threads
        free = threading.Semaphore(threads)
        pool = ThreadPoolExecutor(threads, thread_name_prefix="memoryos-read")
        outage = Outage("read server")
        try:
            while not stop.is_set():
                shards = self.owned()
                if not shards:
                    stop.wait(0.1)
                    continue
                if not free.acquire(timeout=0.1):
                    continue
                try:
                    queues = [self._wake_key, *(self.keys.owner_calls(s) for s in shards)]
                    popped = self.client.blpop(queues, timeout=BLOCK_SLICE_S)
                except REDIS_UNAVAILABLE as error:
                    # A call caught midway: its caller times out (503) and retries.
                    free.release()
                    stop.wait(outage.failed(error))
                    continue
                outage.over()
                if popped is None:
                    free.release()
                    continue
                queue, request = cast(tuple[bytes, bytes], popped)
                name = queue.decode()
                if name == self._wake_key:  # `wake`: the loop sees `stop` now
                    free.release()
                    continue
                pool.submit(self._answer_then_free, name, json.loads(request), free)
        finally:
            pool.shutdown(wait=True)

    def wake(self) -> None:
        """Bring `serve` out of its blocking pop now, once `stop` is set, rather than at the pop's timeout
        (`BLOCK_SLICE_S`, a second): the worker's drain waits for that thread before it closes the spaces
        and gives the leases back, and every stop (each rollout's) waited out most of that second with
        its shards served by nobody. Redis away: the pop's own timeout ends the wait, as before."""
        try:
            self._wake(keys=[self._wake_key], args=[WAKE_TTL_MS])
        except REDIS_UNAVAILABLE:
            log.info("read server not woken: Redis is away; its pop times out instead")

    def _answer_then_free(self, queue: str, request: dict[str, Any], free: threading.Semaphore) -> None:
        try:
            self._answer(queue, request)
        except REDIS_UNAVAILABLE:  # the answer could not be pushed: the caller times out (503), retries
            log.warning("a read's answer was lost to a Redis outage", extra={"kind": request.get("kind")})
        finally:
            free.release()

    def _answer(self, queue: str, request: dict[str, Any]) -> None:
        shard = int(queue.rsplit(":", 1)[1])
        space = str(request.get("space")).split("/")
        if not tracing_enabled() or len(space) != 3:  # a malformed name: `_run` answers why
            self._reply_to(request, self._run(shard, request))
            return
        kind = str(request.get("kind"))
        with operation_span(
            f"owner_call {kind}",
            OWNER_CALL_OPERATIONS.get(kind, kind),
            (space[0], space[1], space[2]),
            owner_call_attributes(queue, shard, kind, "process"),
            kind=SpanKind.SERVER,
            context=context_of(request.get(TRACE_KEY)),
        ) as span:
            reply = self._run(shard, request)
            if span is not None and not reply["ok"]:
                mark_failed(span, reply["error"]["kind"])
            self._reply_to(request, reply)

    def _reply_to(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        self._reply(keys=[self.keys.reply(request["id"])], args=[json.dumps(reply), REPLY_TTL_S])

    def _run(self, shard: int, request: dict[str, Any]) -> dict[str, Any]:
        """The call's reply: its result, or the error the API answers with."""
        with self._busy_lock:
            self._busy[shard] += 1
        try:
            self._wait_applied(shard, request["through"])
            self._wait_served(shard)
            key = space_key(request["space"])
            call = owner_call(request["kind"])
            if call is REINDEX:
                result = run_reindex_call(self.spaces, key, request["args"])
                self.reindexed(key)
            elif not call.facade:
                result = run_bundle_call(call, self.client, self.keys, self.spaces, key, request["args"])
            else:
                opened = self.spaces.writing(key) if call.creates else self.spaces.reading(key)
                with opened as memory:
                    result = run_owner_call(memory, request["kind"], request["args"])
            reply: dict[str, Any] = {"ok": True, "result": result}
        except (MemoryOSError, ValueError, TypeError, TimeoutError) as error:
            reply = {
                "ok": False,
                "error": {
                    "kind": type(error).__name__,
                    "message": str(error),
                    "field": getattr(error, "field", None),
                },
            }
        except REDIS_UNAVAILABLE:
            raise
        except Exception as error:  # the API must get an answer, not a timeout
            log.exception("read failed", extra={"kind": request.get("kind")})
            reply = {"ok": False, "error": {"kind": "InternalError", "message": type(error).__name__}}
        finally:
            with self._busy_lock:
                self._busy[shard] -= 1
                if not self._busy[shard]:
                    del self._busy[shard]
        return reply

    def _wait_served(self, shard: int) -> None:
        """Until the worker vouches for the shard's lease again: a long apply on the main loop can
        outlast the trust of its last renewal, and it renews before its next entry. A shard lost
        meanwhile is not served here (the new owner runs calls, edits above all): 503, retry."""
        deadline = time.monotonic() + self.settings.lease_ttl_s
        while shard not in self.owned():
            if time.monotonic() > deadline:
                raise TimeoutError(f"shard {shard} moved to another worker; retry")
            time.sleep(SERVED_POLL_S)

    def _wait_applied(self, shard: int, through: str) -> None:
        """Until the space's write `through` (its newest when the read was asked) has left the shard's
        stream, or the API's timeout has passed (it answers 503 itself then). An entry leaves only once
        settled (applied, held for a reindex or dead-lettered), and a space's entries settle in the order
        accepted, so none of the space's earlier writes is left either: one lookup, however deep the
        stream (a scan for the space's entries would be bounded, and a read behind a deeper backlog would
        go ahead of its own writes). It looks again when the consumer says the shard's entries left
        (`stream_progress.py`), not on a timer."""
        deadline = time.monotonic() + self.settings.read_timeout_s
        if through == "0-0":
            return
        stream = self.keys.writes(shard)
        seen = self.progress.seen(shard)
        if not streams.entries(self.client, stream, after=through, through=through, count=1):
            return
        with self._busy_lock:
            self._awaiting[shard] += 1
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.progress.wait(shard, seen, left)  # told when the shard's entries leave
                seen = self.progress.seen(shard)
                if not streams.entries(self.client, stream, after=through, through=through, count=1):
                    return
        finally:
            with self._busy_lock:
                self._awaiting[shard] -= 1
                if not self._awaiting[shard]:
                    del self._awaiting[shard]
        raise TimeoutError(f"writes up to {through} not applied in time")
