"""What the queue's spans say: the memory operation an op is, and the messaging attributes of the stream
entry or owner-call list that carries it between the API and a worker (docs/service.md, "Tracing").

The trace context itself travels in a field of its own (`TRACE_FIELD` of a stream entry, `TRACE_KEY` of
an owner call's request), beside the op's JSON and outside its content id: the same write is the same
op, traced or not, and a write retried under its write id is recognised whatever trace it came in.
"""

from memoryos.space.ops import AddTurns, AnyOp, DeletePages, ForgetSpace, UpdatePage
from memoryos.tracing.attributes import (
    CREATE_MEMORY,
    DELETE_MEMORY,
    DELETE_MEMORY_STORE,
    MEMORY_RECORD_COUNT,
    MESSAGING_DESTINATION,
    MESSAGING_OPERATION,
    MESSAGING_SYSTEM,
    OWNER_CALL,
    SEARCH_MEMORY,
    SHARD,
    UPDATE_MEMORY,
    WRITE_ID,
    pseudonym,
)

TRACE_FIELD = b"trace"
"""The stream entry's field holding the enqueue span's context (`memoryos.tracing.current_carrier`)."""
TRACE_KEY = "trace"
"""The owner call request's key holding the caller's context, beside `args`."""
OWNER_CALL_OPERATIONS = {
    "retrieve": SEARCH_MEMORY,
    "update_page": UPDATE_MEMORY,
    "update_fact": UPDATE_MEMORY,
    "delete_page": DELETE_MEMORY,
    "delete_fact": DELETE_MEMORY,
}
"""The owner calls that are a GenAI memory operation; any other is named by the call itself."""


def operation_of(op: AnyOp) -> str:
    """The GenAI memory operation a queued op is (`gen_ai.operation.name`), else the op's own kind."""
    if isinstance(op, AddTurns):
        return CREATE_MEMORY
    if isinstance(op, ForgetSpace):
        return DELETE_MEMORY_STORE
    if isinstance(op, UpdatePage):
        return UPDATE_MEMORY
    if isinstance(op, DeletePages):
        return DELETE_MEMORY
    return op.kind


def stream_attributes(stream: str, shard: int, operation: str) -> dict[str, str | int]:
    """The messaging attributes of a span sending to, or processing from, a shard's write stream."""
    return {
        MESSAGING_SYSTEM: "redis",
        MESSAGING_DESTINATION: stream,
        MESSAGING_OPERATION: operation,
        SHARD: shard,
    }


def write_attributes(op: AnyOp) -> dict[str, str | int]:
    """A write's id (pseudonymised) and its number of turns (`gen_ai.memory.record.count`: a turn is
    stored as one page); nothing for another op."""
    if not isinstance(op, AddTurns):
        return {}
    return {MEMORY_RECORD_COUNT: len(op.turns), WRITE_ID: pseudonym(op.write_id)}


def owner_call_attributes(queue: str, shard: int, method: str, operation: str) -> dict[str, str | int]:
    """The attributes of an owner call's span, at the caller (`send`) and at the owner (`process`):
    the call's name and the shard's request list (`queue`), as messaging over Redis."""
    return {**stream_attributes(queue, shard, operation), OWNER_CALL: method}
