"""Calls over Redis: the API asks the worker that owns the space to run an owner call (a read, or an edit
it applies at once; `services/spaces/calls.py`) and awaits its answer.

The owner holds the space's open index and the model (queries jump its embedding queue). A request names
the newest entry of the space's shard when it was sent (`through`): the worker answers once every write of
that space up to it is applied, so a read sees each write acknowledged before it — the engine's own read
contract — and the engine then waits for their vectors. Traced, the call is a CLIENT span here and a
SERVER span at the owner, one trace: the request carries the caller's context (`TRACE_KEY`) beside its
arguments. No owner (no live worker holds the shard), or
no answer in time, is `OwnerUnavailableError`: the API's 503 with Retry-After.
"""

import json
import time
from typing import Any, Protocol, TypeVar

import redis
from opentelemetry.trace import SpanKind
from pydantic import TypeAdapter

from memoryos.ids import new_id
from memoryos.space.pool import SpaceKey
from memoryos.tracing import current_carrier, tracing_enabled
from memoryos.tracing.spans import operation_span
from services.queue.connection import BLOCK_SLICE_S
from services.queue.keys import Keys, shard_of, space_name
from services.queue.producer import WriteQueue
from services.queue.redis_full import ALLOW_OOM
from services.queue.settings import QueueSettings
from services.queue.tracing import OWNER_CALL_OPERATIONS, TRACE_KEY, owner_call_attributes

T = TypeVar("T")

ASK = ALLOW_OOM + "return redis.call('RPUSH', KEYS[1], ARGV[1])"
"""Queue a request for the shard's owner, even while Redis is full: a request is popped as soon as the
owner has a thread free, and reads (a forget's wait for its owner among them) must not fail because the
write queue filled Redis (`redis_full.py`)."""


class OwnerCall(Protocol[T]):
    """What the transport needs of a call (`services.spaces.calls.OwnerCall`): the method's name, and how
    to read its JSON answer back as the method's own type."""

    @property
    def method(self) -> str: ...

    @property
    def result(self) -> TypeAdapter[T]: ...


class OwnerUnavailableError(Exception):
    """No worker owns the space's shard, or it did not answer within the timeout: retry later."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class OwnerRefusedError(Exception):
    """The worker ran the read and the engine refused it: `kind` is the engine's error class name
    (`SpaceNotFoundError`, `InvalidInputError`, ...), `field` the field it names, if any. An invalid
    bundle names the file the owner staged it in: here its field is `bundle`, not the owner's path."""

    def __init__(self, kind: str, message: str, field: str | None) -> None:
        if kind == "InvalidBundleError" and field:
            message, field = f"bundle: {message.removeprefix(f'{field}: ')}", "bundle"
        self.kind, self.field = kind, field
        super().__init__(message)


class OwnerCallClient:
    """The API's side: one request, one reply list, both in Redis."""

    def __init__(self, client: redis.Redis, settings: QueueSettings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.redis_namespace)
        self.writes = WriteQueue(client, settings)
        self._push = client.register_script(ASK)

    def ask(
        self, key: SpaceKey, call: OwnerCall[T], args: dict[str, Any], timeout_s: float | None = None
    ) -> T:
        """The owner's answer to `call` on the space, as the facade method's own type, or an error
        above. Blocking (up to `timeout_s`, default `read_timeout_s`): the async API runs it on a worker
        thread."""
        timeout_s = self.settings.read_timeout_s if timeout_s is None else timeout_s
        if not tracing_enabled():
            return self._ask(key, call, args, timeout_s, None)
        shard = shard_of(key, self.settings.shard_count)
        with operation_span(
            f"owner_call {call.method}",
            OWNER_CALL_OPERATIONS.get(call.method, call.method),
            (key.tenant, key.user_id, key.assistant_id),
            owner_call_attributes(self.keys.owner_calls(shard), shard, call.method, "send"),
            kind=SpanKind.CLIENT,
        ):
            return self._ask(key, call, args, timeout_s, current_carrier())

    def _ask(
        self, key: SpaceKey, call: OwnerCall[T], args: dict[str, Any], timeout_s: float, trace: str | None
    ) -> T:
        """`ask`'s work; the request carries `trace` (the caller's span's context) when traced."""
        shard = shard_of(key, self.settings.shard_count)
        if self.client.get(self.keys.lease(shard)) is None:
            raise OwnerUnavailableError(f"no worker owns shard {shard} yet", self.settings.lease_ttl_s)
        request_id = new_id()
        request = {
            "id": request_id,
            "space": space_name(key),
            "kind": call.method,
            "args": args,
            "through": self.writes.last_write_id(key),
        }
        if trace is not None:
            request[TRACE_KEY] = trace
        self._push(keys=[self.keys.owner_calls(shard)], args=[json.dumps(request)])
        reply = self._wait_reply(request_id, timeout_s)
        if reply is None:
            raise OwnerUnavailableError(
                f"the worker owning shard {shard} did not answer within {timeout_s} s",
                self.settings.read_timeout_s,
            )
        answer = json.loads(reply[1])
        if not answer["ok"]:
            error = answer["error"]
            raise OwnerRefusedError(error["kind"], error["message"], error.get("field"))
        return call.result.validate_python(answer["result"])

    def _wait_reply(self, request_id: str, timeout_s: float) -> Any:
        """The reply, or None after `timeout_s`: BLPOPs of at most `BLOCK_SLICE_S` each (connection.py)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            reply = self.client.blpop(
                [self.keys.reply(request_id)], timeout=max(0.01, min(left, BLOCK_SLICE_S))
            )
            if reply is not None:
                return reply
        return None
