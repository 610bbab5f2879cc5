"""Apply the writes of owned shards, in the order they were accepted, exactly once in effect.

Per shard, each poll first re-reads this worker's own pending entries (delivered before, not yet
acknowledged: a failed apply, or entries claimed from a dead worker), in order, and only when none is
left reads new ones. An entry is acknowledged and deleted only after the engine applied it (durable in
the space's store), so a worker killed at any instant loses nothing; the engine's apply is idempotent by
op and write id, so the entry delivered again changes nothing. A transient failure stops the shard's
batch (later writes of the space must not overtake it) until the next poll; an entry that fails
`max_deliveries` times, or can never apply (malformed), goes to the dead-letter list so its shard moves on.
An entry of a space still stored on another embedding model waits aside for its reindex (`held.py`), with
every later write of its space behind it.
Applied entries are acknowledged in groups (`ACK_EVERY_S`): still only after they applied.

A shard's batch is applied space by space: consecutive writes of one space (up to `write_run`) go to the
engine as one run, stored in one transaction, since a commit per write would be most of a worker's time
per write (docs/service.md). Order holds within each space, the only order the queue promises; a run
that fails is applied again entry by entry, so the entry at fault is retried or dead-lettered alone and
the entries before it are applied. A space whose entry must wait stops there; other spaces go on.

A round can outlast a lease (`batch_entries` a shard, many shards, on busy cores): before each run the
consumer asks `still_owned` — the worker renews its leases there when due — and stops a shard whose lease
was lost, so a shard's new owner, which claims the entries left pending here, is its only writer.
New entries are read by a script that checks this worker's lease in the same step
(`streams.FENCED_READ`): a read delayed on the network past the lease's expiry delivers nothing to a
former owner, where the entries would wait unapplied (the new owner claims pending entries once, at
takeover).

A full Redis (`maxmemory` under `noeviction`) never stops it: the queue that filled Redis drains only
through this consumer. Nothing here uses MULTI (Redis refuses a transaction whole when full); reading,
claiming, acknowledging and deleting run as they are, and what it must write — a shard's consumer group,
a dead letter or held write moved out of the stream, a forget's tombstone — by scripts Redis runs at
`maxmemory` (`services/queue/redis_full.py`, docs/reliability.md "Redis full").
"""

import json
import logging
import time
from collections.abc import Callable
from typing import Literal, cast

import redis
from pydantic import ValidationError
from redis.exceptions import OutOfMemoryError

from memoryos.errors import (
    DatabaseUnavailableError,
    EmbeddingModelMismatchError,
    FencedOutError,
    InvalidInputError,
)
from memoryos.space.ops import AnyOp, ForgetSpace, op_from_json
from memoryos.space.pool import SpaceKey
from memoryos.space.tombstones import digest
from memoryos.tracing import tracing_enabled
from services.queue import streams, tombstones
from services.queue.bundle_transfer import purge_bundles
from services.queue.keys import CONSUMER_GROUP, Keys, space_key, space_name
from services.queue.redis_full import ALLOW_OOM
from services.queue.settings import QueueSettings
from services.queue.streams import Entry
from services.worker.held import HeldWrites, UnreadableHeldWrite
from services.worker.runs import Delivered, space_runs
from services.worker.stream_progress import StreamProgress
from services.worker.tracing import UNTRACED, ApplySpans, Untraced

log = logging.getLogger(__name__)

ApplyOps = Callable[[SpaceKey, list[AnyOp]], object]
"""Apply ops to one space in order: one op, or a run of writes (the worker opens the space from its
pool). Applying again what was applied changes nothing (ops are idempotent)."""
ACK_EVERY_S = 0.05
"""Applied entries are acknowledged together at most this long after the first of them (and when a
shard's batch ends): a read waits for its writes to leave the stream, so this bounds what it waits for
beyond their applying. A crash before the acknowledgement redelivers them; applying is idempotent."""
FORGET_RETRY_S = 30.0
"""The longest pause between two tries of a forget that keeps failing (it starts at 0.2 s and doubles)."""
StillOwned = Callable[[int], bool]
"""Whether this worker still holds the shard's lease (renewing it when due): asked before each run."""


def reason_of(error: Exception) -> str:
    """Why an entry cannot apply, for the dead-letter record its tenant reads: pydantic's message quotes
    the offending input (memory text), so a validation error is told by field and rule only."""
    if isinstance(error, ValidationError):
        problems = error.errors(include_input=False, include_url=False, include_context=False)
        return "; ".join(f"{'.'.join(map(str, p['loc'])) or 'op'}: {p['msg']}" for p in problems)
    return str(error)


Outcome = Literal["applied", "retry", "held"] | str
"""What applying one entry came to: applied (to acknowledge), retry (at the next poll; later writes of
its space wait), held (its space is on another model: `held.py`), or else the reason to dead-letter it."""


ACK_AT_ONCE = 1000
"""Entries acknowledged by one script call at most: Lua's `unpack` takes a few thousand values."""

ACKNOWLEDGE = """
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
"""
"""Acknowledge and delete the entries ARGV[2..] of the stream KEYS[1] (group ARGV[1]) in one step: neither
command grows memory, so Redis runs it while full, where a MULTI of the two is refused whole."""

CREATE_GROUP = (
    ALLOW_OOM
    + """
local made = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if type(made) == 'table' and made.err and not string.find(made.err, 'BUSYGROUP', 1, true) then
  return made
end
return 0
"""
)
"""Create the consumer group ARGV[1] of the stream KEYS[1] (and the stream) unless it exists: XGROUP
CREATE is refused while Redis is full, even for a group that exists, and a worker starting then must
take its shards."""

DEAD_LETTER = (
    ALLOW_OOM
    + """
redis.call('RPUSH', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  return redis.call('LPOP', KEYS[2])
end
redis.call('XACK', KEYS[2], ARGV[3], ARGV[2])
return redis.call('XDEL', KEYS[2], ARGV[2])
"""
)
"""Move a write to the dead-letter list KEYS[1] (its record ARGV[1]) from where it waited: the stream
KEYS[2] (entry ARGV[2], group ARGV[3]), or with ARGV[2] '' the space's held list KEYS[2] (its oldest).
One step, and it moves what Redis held, so it runs while Redis is full."""

FORGOTTEN = (
    ALLOW_OOM
    + """
redis.call('INCR', KEYS[3])
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('SREM', KEYS[2], ARGV[1])
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""
)
"""A forget applied: count it for the AOF rewrite (KEYS[3]), and if the space's note of its newest write
(KEYS[1], field ARGV[1]) still names the forget's entry ARGV[2] (no write accepted since), drop the note
and the space from the set of known spaces (KEYS[2]) — the forget's own enqueue added it back. It runs
while Redis is full: the count is what gets the forgotten text out of Redis's files."""


class ShardConsumer:
    """Reads and applies the writes of the shards a worker owns."""

    def __init__(
        self,
        client: redis.Redis,
        settings: QueueSettings,
        worker_id: str,
        apply: ApplyOps,
        still_owned: StillOwned = lambda shard: True,
        progress: StreamProgress | None = None,
    ) -> None:
        """`progress` is told each time entries leave a shard's stream: the worker's read threads wait
        on it for a read's writes (`stream_progress.py`)."""
        self.client = client
        self.settings = settings
        self.worker_id = worker_id
        self.keys = Keys(settings.redis_namespace)
        self.held = HeldWrites(client, self.keys)
        self._apply = apply
        self._still_owned = still_owned
        self.progress = progress or StreamProgress()
        self._failures: dict[bytes, int] = {}
        self._not_before: dict[bytes, float] = {}  # failing forgets: not tried again before then
        self._fenced_read = client.register_script(streams.FENCED_READ)
        self._forgotten_script = client.register_script(FORGOTTEN)
        self._acknowledge_script = client.register_script(ACKNOWLEDGE)
        self._create_group = client.register_script(CREATE_GROUP)
        self._dead_letter_script = client.register_script(DEAD_LETTER)
        self.dead_letters = 0
        self.backing_off = False
        """Whether the last poll left entries pending only because they wait out a pause."""
        """Entries this consumer dead-lettered (a metric)."""

    def take_over(self, shard: int) -> None:
        """Make the shard's stream readable here, and claim what a previous owner left unacknowledged
        (the lease says it is gone): those entries come first in this worker's pending list. The shard's
        held spaces are loaded before any entry is read, so none of their writes overtakes them."""
        stream = self.keys.writes(shard)
        self._create_group(keys=[stream], args=[CONSUMER_GROUP])
        self.held.take_over(shard)
        streams.claim_all(self.client, stream, CONSUMER_GROUP, self.worker_id)

    def poll(self, shards: list[int], block_ms: int) -> int:
        """Apply what is waiting in `shards` (blocking up to `block_ms` for new writes when none is
        pending), held writes whose space may be reindexed first; returns how many entries were applied,
        held or dead-lettered."""
        self.backing_off = False
        done = self._release_held(shards)
        idle: list[int] = []
        for shard in shards:
            pending = self._read(shard, "0")
            if pending:
                done += self._process(shard, pending)
            else:
                idle.append(shard)
        if not idle:
            if not done and self.backing_off:
                time.sleep(block_ms / 1000)  # only paused forgets are pending: no busy loop meanwhile
            return done
        new, waiting = streams.read_new_fenced(
            self.client,
            self._fenced_read,
            CONSUMER_GROUP,
            self.worker_id,
            {self.keys.writes(s): self.keys.lease(s) for s in idle},
            self.settings.batch_entries,
        )
        for stream, entries in new:
            done += self._process(int(stream.rsplit(":", 1)[1]), entries)
        if not done and not new and waiting:
            streams.wait_for_new(self.client, waiting, block_ms)
        return done

    def _read(self, shard: int, start: str) -> list[Entry]:
        found = streams.read_group(
            self.client,
            CONSUMER_GROUP,
            self.worker_id,
            {self.keys.writes(shard): start},
            self.settings.batch_entries,
        )
        return [entry for _, entries in found for entry in entries]

    def _process(self, shard: int, entries: list[Entry]) -> int:
        stream = self.keys.writes(shard)
        done = 0
        if not self._still_owned(shard):
            return done  # the lease lapsed since the read: the entries are the new owner's
        delivered: list[Delivered] = []
        for entry_id, fields in entries:
            try:
                space = space_key(fields[b"space"].decode())
                delivered.append(Delivered(entry_id, fields, space, op_from_json(fields[b"op"])))
            except (KeyError, ValueError, ValidationError) as error:
                self._dead_letter(stream, entry_id, fields, f"malformed entry: {reason_of(error)}")
                done += 1
        acks = _Acknowledgements(self._acknowledge, stream, lambda: self.progress.left(shard))
        waiting: set[SpaceKey] = set()  # spaces whose entry must be retried: their later entries wait
        try:
            for run in space_runs(delivered, self.settings.write_run):
                if run[0].space in waiting:
                    continue
                if self._not_before.get(run[0].entry_id, 0.0) > time.monotonic():
                    waiting.add(run[0].space)  # a failing forget pausing: its space waits, others go on
                    self.backing_off = True
                    continue
                if not self._still_owned(shard):
                    return done  # the lease lapsed mid-round: the rest is the new owner's to claim
                if self._holds(shard, run[0]):
                    self.held.hold(shard, stream, run)  # behind the space's held writes
                    done += len(run)
                    continue
                if len(run) > 1 and self._applies_whole(shard, run):
                    acks.add([entry.entry_id for entry in run])
                    done += len(run)
                    continue
                for entry in run:
                    outcome = "held" if self._holds(shard, entry) else self._attempt(shard, entry)
                    if outcome == "retry":
                        waiting.add(entry.space)  # later writes of the space wait: order within a space
                        break
                    if outcome == "applied":
                        acks.add([entry.entry_id])
                        if isinstance(entry.op, ForgetSpace):
                            self._forgotten(shard, entry)
                    elif outcome == "held":
                        self.held.hold(shard, stream, [entry])
                    else:
                        self._dead_letter(stream, entry.entry_id, entry.fields, outcome)
                    done += 1
            return done
        finally:
            acks.flush()
            self.progress.left(shard)  # the batch's entries left: acknowledged, dead-lettered or held

    def _forgotten(self, shard: int, entry: Delivered) -> None:
        """After a forget applied, what Redis still holds of the space goes, owner side: its held writes,
        its bundles (an export may have finished after the API purged them), its note of a newest write
        (the forget's own) and its place among the known spaces, so the user's id does not stay — unless
        a newer write took their place. The forget is counted for the AOF rewrite that takes the user's
        text out of Redis's files (`services/jobs/tasks.py`, `rewrite_aof_after_forgets`). Its tombstone
        is set, so a Redis restored from before it is checked (`services/worker/tombstones.py`)."""
        tombstones.record(self.client, self.keys, digest(entry.space), entry.op.at)
        self.client.hdel(self.keys.forgets_failing(), digest(entry.space))
        self.held.forget(shard, entry.space)
        purge_bundles(self.client, self.keys, entry.space)
        self._forgotten_script(
            keys=[self.keys.last_writes(shard), self.keys.spaces(), self.keys.forgotten_since_rewrite()],
            args=[space_name(entry.space), entry.entry_id],
        )

    def _holds(self, shard: int, entry: Delivered) -> bool:
        """Whether the entry goes behind its space's held writes: a forget does not (it erases them)."""
        return self.held.holds(shard, entry.space) and not isinstance(entry.op, ForgetSpace)

    def _release_held(self, shards: list[int]) -> int:
        """Apply the held writes of the spaces due to be tried (`HeldWrites.due`); returns how many."""
        return sum(
            self._release(shard, key) for shard, key in self.held.due(shards) if self._still_owned(shard)
        )

    def _release(self, shard: int, key: SpaceKey) -> int:
        """Apply the space's oldest held writes, up to `batch_entries`, in order: none if the space is
        still on another model. A space with writes left (more than a batch, or one to retry) is tried
        again at the next poll; one with none left stops being held."""
        done = 0
        try:
            oldest = self.held.oldest(key, self.settings.batch_entries)
        except UnreadableHeldWrite as unreadable:
            self._dead_letter(
                self.keys.writes(shard), unreadable.entry_id, unreadable.fields, str(unreadable), held=True
            )
            self.held.ask_release(key)  # the next ones, at the next poll
            return 1
        for run in space_runs(oldest, self.settings.write_run):
            if len(run) > 1 and self._applies_whole(shard, run):
                self.held.released(shard, key, len(run))
                done += len(run)
                continue
            for entry in run:
                outcome = self._attempt(shard, entry)
                if outcome == "held":
                    return done  # not reindexed yet: tried again at its next reindex, takeover or sweep
                if outcome == "retry":
                    self.held.ask_release(key)
                    return done
                if outcome == "applied":
                    self.held.released(shard, key, 1)
                else:
                    stream = self.keys.writes(shard)
                    self._dead_letter(stream, entry.entry_id, entry.fields, outcome, held=True)
                done += 1
        if not self.held.released(shard, key, 0):
            self.held.ask_release(key)  # more than a batch was held: the next poll goes on
        return done

    def _spans(self, shard: int, run: list[Delivered]) -> ApplySpans | Untraced:
        """The run's spans while it is applied (`services/worker/tracing.py`); with tracing off, one flag
        read and the shared `UNTRACED`."""
        return ApplySpans(self.keys.writes(shard), shard, run) if tracing_enabled() else UNTRACED

    def _applies_whole(self, shard: int, run: list[Delivered]) -> bool:
        """Apply a run of one space's writes in one call; False when it failed (nothing of it stored),
        for the caller to apply it entry by entry and find the entry at fault."""
        try:
            with self._spans(shard, run) as spans:
                spans.applied(self._apply(run[0].space, [entry.op for entry in run]))
        except (EmbeddingModelMismatchError, FencedOutError, DatabaseUnavailableError):
            return False  # its first entry says so again (held, or retried uncounted): no log line per run
        except Exception as error:
            log.info("a run of writes failed; applied one by one", extra={"error": type(error).__name__})
            return False
        return True

    def _attempt(self, shard: int, entry: Delivered) -> Outcome:
        """Apply one entry; what came of it (`Outcome`). Refused input is dead-lettered at once, any other
        failure after `max_deliveries` tries, and a space on another model is held, never failed."""
        try:
            with self._spans(shard, [entry]) as spans:
                spans.applied(self._apply(entry.space, [entry.op]))
        except EmbeddingModelMismatchError:
            return "held"
        except (FencedOutError, DatabaseUnavailableError) as error:
            # Not the write's fault, never counted against it: another worker owns the shard now (its to
            # apply), or the database is away (the write applies once it is back).
            log.warning(
                "write not applied; the shard's store refused it", extra={"error": type(error).__name__}
            )
            return "retry"
        except (InvalidInputError, ValidationError) as error:
            return f"{type(error).__name__}: {reason_of(error)}"
        except Exception as error:
            if isinstance(entry.op, ForgetSpace):
                self._forget_failed(entry, error)
                return "retry"  # never dead-lettered: the API said the user would be forgotten
            failures = self._failures.get(entry.entry_id, 0) + 1
            self._failures[entry.entry_id] = failures
            if failures < self.settings.max_deliveries:
                log.warning(
                    "write not applied; retried at the next poll",
                    extra={"shard": shard, "entry": entry.entry_id.decode(), "error": type(error).__name__},
                )
                return "retry"
            return f"{type(error).__name__}: {error}"
        return "applied"

    def _forget_failed(self, entry: Delivered, error: Exception) -> None:
        """Note a forget that failed where the API's `/readyz` and both processes' metrics show it, by the
        space's digest only; it is tried again after a pause that grows with its tries (`FORGET_RETRY_S`),
        its space's later writes behind it."""
        key = self.keys.forgets_failing()
        space_digest = digest(entry.space)
        noted = cast(bytes | None, self.client.hget(key, space_digest))
        earlier = json.loads(noted) if noted else {"since": time.time(), "tries": 0}
        tries = int(earlier["tries"]) + 1
        failure = {"error": type(error).__name__, "since": earlier["since"], "tries": tries}
        try:
            self.client.hset(key, space_digest, json.dumps(failure))
        except OutOfMemoryError:  # a note for operators, not needed to drain: written at the next try
            log.warning("a failing forget is not noted in Redis: Redis is full", extra={"tries": tries})
        self._not_before[entry.entry_id] = time.monotonic() + min(FORGET_RETRY_S, 0.1 * 2**tries)
        log.warning(
            "a forget failed; tried again after a pause",
            extra={"tombstone": space_digest[:12], "error": type(error).__name__, "tries": tries},
        )

    def _acknowledge(self, stream: str, entry_ids: list[bytes]) -> None:
        """Acknowledge and delete applied entries together: with `appendfsync always` every write command
        costs Redis an fsync, which per entry would be a large part of a worker's time per write
        (docs/service.md, "Where a worker's time per write goes"); one script call, which Redis runs
        while full (`ACKNOWLEDGE`)."""
        for start in range(0, len(entry_ids), ACK_AT_ONCE):
            chunk = entry_ids[start : start + ACK_AT_ONCE]
            self._acknowledge_script(keys=[stream], args=[CONSUMER_GROUP, *chunk])
        for entry_id in entry_ids:
            self._failures.pop(entry_id, None)
            self._not_before.pop(entry_id, None)

    def _dead_letter(
        self, stream: str, entry_id: bytes, fields: dict[bytes, bytes], reason: str, held: bool = False
    ) -> None:
        """Keep the entry aside, visible through the API and a metric, and let the shard (or the held
        space: the oldest of its held writes) move on."""
        record = {
            "entry": entry_id.decode(),
            "stream": stream,
            "space": fields.get(b"space", b"").decode(errors="replace"),
            "op": fields.get(b"op", b"").decode(errors="replace"),
            "error": reason,
        }
        if held:  # the space's oldest held write
            where, entry = self.keys.held(record["space"]), ""
        else:
            where, entry = stream, entry_id.decode()
        self._dead_letter_script(
            keys=[self.keys.dead_letters(), where], args=[json.dumps(record), entry, CONSUMER_GROUP]
        )
        self._failures.pop(entry_id, None)
        self.dead_letters += 1
        log.warning("write dead-lettered", extra={"entry": record["entry"], "space": record["space"]})


class _Acknowledgements:
    """Applied entries of one shard's batch, acknowledged together at most `ACK_EVERY_S` after the first
    of them and when the batch ends. `left` is told after each acknowledgement within the batch (the
    batch's end tells it once, for every entry that left)."""

    def __init__(
        self, acknowledge: Callable[[str, list[bytes]], None], stream: str, left: Callable[[], None]
    ) -> None:
        self._acknowledge = acknowledge
        self._stream = stream
        self._left = left
        self._entry_ids: list[bytes] = []
        self._oldest = 0.0

    def add(self, entry_ids: list[bytes]) -> None:
        if not self._entry_ids:
            self._oldest = time.monotonic()
        self._entry_ids += entry_ids
        if time.monotonic() - self._oldest >= ACK_EVERY_S:
            self.flush()
            self._left()  # reads waiting on the shard need not wait for the batch's end

    def flush(self) -> None:
        if self._entry_ids:
            self._acknowledge(self._stream, self._entry_ids)
            self._entry_ids = []
