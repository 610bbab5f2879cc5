"""How every front end answers an error of the spaces: one table from error class to HTTP status, error code
and message, read by the API's handlers, by the remote path (an owner's refusal names the engine error's
class) and by the MCP tools, so an error means the same whichever front end and mode served the call.

A message of the table's own replaces the error's where that text could name server paths or says nothing
a caller can act on; otherwise the error's message is written for callers and goes out as it is.
"""

from dataclasses import dataclass

from redis.exceptions import OutOfMemoryError

from memoryos.errors import (
    DatabaseUnavailableError,
    EmbeddingModelMismatchError,
    EmbeddingServerError,
    EmbeddingServerModelError,
    FencedOutError,
    InvalidInputError,
    ItemNotFoundError,
    LLMError,
    SchedulerClosedError,
    SpaceNotFoundError,
    StorageError,
    WriteIdConflictError,
)
from memoryos.portability.bundles import InvalidBundleError, SpaceNotEmptyError
from memoryos.scheduler.batcher import BatcherClosedError
from memoryos.storage.space_lock import SpaceBusyError
from services.queue.connection import REDIS_UNAVAILABLE
from services.queue.owner_calls import OwnerRefusedError, OwnerUnavailableError
from services.spaces.protocol import BackpressureError, NotInThisModeError

__all__ = [
    "REDIS_UNAVAILABLE",
    "ErrorAnswer",
    "OwnerRefusedError",
    "OwnerUnavailableError",
    "RemoteSpaceNotFoundError",
    "answer_for",
    "message_for",
    "refusal_answer",
    "retry_after_s",
    "space_missing",
]


@dataclass(frozen=True)
class ErrorAnswer:
    """What a caller is told of one kind of error."""

    status: int
    code: str
    message: str | None = None
    """The table's own message; None: the error's message, which is written for callers."""
    retry_after_s: int | None = None
    """When to come back, for a refusal that passes (an error's own `retry_after_s` wins)."""


class RemoteSpaceNotFoundError(SpaceNotFoundError):
    """No memory for that user on a server the command asked (its data directory is the server's)."""

    def __init__(self, message: str) -> None:
        LookupError.__init__(self, message)


BUSY_RETRY_AFTER_S = 1
"""A space busy in another process: a forget or reindex takes seconds."""
REDIS_RETRY_AFTER_S = 2
"""Redis restarting on the same host takes about that."""
DATABASE_RETRY_AFTER_S = 2
"""A PostgreSQL restart (crash recovery replays its WAL) takes a few seconds."""
REDIS_FULL_RETRY_AFTER_S = 5
"""A full Redis has room again once the workers have applied (and trimmed) a few batches."""

_SHUTTING_DOWN = ErrorAnswer(503, "unavailable", "the server is shutting down", retry_after_s=1)

ENGINE_ERRORS: dict[type[Exception], ErrorAnswer] = {
    SpaceNotEmptyError: ErrorAnswer(409, "conflict"),
    WriteIdConflictError: ErrorAnswer(409, "write_id_conflict"),
    InvalidBundleError: ErrorAnswer(422, "invalid_input"),
    InvalidInputError: ErrorAnswer(422, "invalid_input"),
    SpaceNotFoundError: ErrorAnswer(404, "space_not_found"),
    ItemNotFoundError: ErrorAnswer(404, "item_not_found"),
    SpaceBusyError: ErrorAnswer(
        503,
        "space_busy",
        "the memory space is held by another process (a forget, reindex or import); retry shortly",
        BUSY_RETRY_AFTER_S,
    ),
    EmbeddingModelMismatchError: ErrorAnswer(409, "embedding_model_mismatch"),
    LLMError: ErrorAnswer(502, "llm_failed", "the LLM call failed after its retries"),
    EmbeddingServerModelError: ErrorAnswer(502, "embedding_failed"),  # its message names both models
    EmbeddingServerError: ErrorAnswer(
        502, "embedding_failed", "the embeddings server failed after its retries"
    ),
    SchedulerClosedError: _SHUTTING_DOWN,
    BatcherClosedError: _SHUTTING_DOWN,
    TimeoutError: ErrorAnswer(503, "unavailable", retry_after_s=BUSY_RETRY_AFTER_S),
    DatabaseUnavailableError: ErrorAnswer(
        503,
        "unavailable",
        "the memory database is not answering (restarting or unreachable); nothing was done, retry shortly",
        DATABASE_RETRY_AFTER_S,
    ),
    FencedOutError: ErrorAnswer(
        503, "unavailable", "the memory space's shard moved to another worker; retry", BUSY_RETRY_AFTER_S
    ),
    StorageError: ErrorAnswer(500, "storage_error", "the memory store failed"),
}
"""The engine's errors, most specific first. An owner's refusal is looked up by its class's name here."""

OWNER_FAILED = ErrorAnswer(500, "internal", "the worker owning this memory space failed")
"""An owner's error that is no engine error: a bug on the worker, never its text."""

SPACES_ERRORS: dict[type[Exception], ErrorAnswer] = {
    BackpressureError: ErrorAnswer(429, "overloaded"),
    OwnerUnavailableError: ErrorAnswer(503, "unavailable"),
    OwnerRefusedError: OWNER_FAILED,  # answered by the engine error it names (`answer_for`)
    NotInThisModeError: ErrorAnswer(501, "not_implemented"),
    # Redis at its maxmemory under noeviction refuses the enqueue script before it writes anything; the
    # API's soft limit below it refuses first (`RedisFullError`, services/queue/redis_full.py).
    OutOfMemoryError: ErrorAnswer(
        503,
        "queue_full",
        "the queue's Redis is full (its soft limit or maxmemory reached); nothing was queued, retry once the "
        "workers drain it",
        REDIS_FULL_RETRY_AFTER_S,
    ),
    **{
        unavailable: ErrorAnswer(
            503,
            "unavailable",
            "the queue's Redis is not answering (restarting or unreachable); nothing was done, retry shortly",
            REDIS_RETRY_AFTER_S,
        )
        for unavailable in REDIS_UNAVAILABLE
    },
}
"""The spaces' own refusals: too many writes, no owner answering, Redis away or full, a route this mode
lacks."""

ANSWERS: dict[type, ErrorAnswer] = {**ENGINE_ERRORS, **SPACES_ERRORS}
"""Every error the table answers: `install_error_handlers` (services/api/errors.py) registers each."""
_BY_NAME = {error.__name__: answer for error, answer in ENGINE_ERRORS.items()}


def answer_for(error: BaseException) -> ErrorAnswer | None:
    """The table's answer to `error` (an owner's refusal by the engine error it names), or None for an
    error that is neither the engine's nor the spaces' (a bug: the front end's generic 500)."""
    if isinstance(error, OwnerRefusedError):
        return refusal_answer(error)
    return next((ANSWERS[kind] for kind in type(error).__mro__ if kind in ANSWERS), None)


def refusal_answer(error: OwnerRefusedError) -> ErrorAnswer:
    """The answer to an owner's refusal: that of the engine error it names, `OWNER_FAILED` for any other."""
    return _BY_NAME.get(error.kind, OWNER_FAILED)


def space_missing(user_id: str, assistant_id: str) -> str:
    """A missing space named by its user and assistant, never by the directory it would be in."""
    return f"no memory for user {user_id!r} (assistant {assistant_id!r})"


def message_for(error: BaseException, answer: ErrorAnswer) -> str:
    """What the caller is told of `error`."""
    if isinstance(error, SpaceNotFoundError) and not isinstance(error, RemoteSpaceNotFoundError):
        return space_missing(error.user_id, error.assistant_id)
    return answer.message or str(error)


def retry_after_s(error: BaseException, answer: ErrorAnswer) -> int | None:
    """Seconds to wait before retrying, for a refusal that passes; None for the others."""
    own = getattr(error, "retry_after_s", None)
    if isinstance(own, int | float):
        return max(1, round(own))
    return answer.retry_after_s
