"""Engine errors and request errors to HTTP responses, in one place.

Every error body is `ErrorBody` JSON: `{"error": code, "message": ..., "field": ...}`. Bad input is a 4xx
naming the field; nothing a caller sends should produce a 5xx, so an unexpected exception is a bug: it is
answered 500 with a generic message and logged with its class (its message may quote memory text, so the
traceback goes to DEBUG only). Messages of engine errors that name server paths are replaced by ones that
do not: a caller learns which user or item is missing, not where the data directory is.

Bodies are written with `ensure_ascii`, so no text — not even a lone surrogate echoed in a message — can
make rendering the error fail.
"""

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memoryos.errors import (
    EmbeddingModelMismatchError,
    InvalidInputError,
    ItemNotFoundError,
    LLMError,
    SchedulerClosedError,
    SpaceNotFoundError,
    StorageError,
    WriteIdConflictError,
)
from memoryos.portability.bundle import SpaceNotEmptyError
from memoryos.scheduler.batcher import BatcherClosedError
from memoryos.storage.space_lock import SpaceBusyError
from services.api.access import BackpressureError, NotInThisModeError
from services.jobs.bundles import BundleRoomError
from services.jobs.status import JobNotFoundError, JobNotReadyError
from services.queue.connection import REDIS_UNAVAILABLE
from services.queue.reads import REMOTE_ERRORS, ReadUnavailableError, RemoteReadError

log = logging.getLogger(__name__)

BUSY_RETRY_AFTER_S = 1
"""Retry-After of a space busy in another process (a forget or reindex takes seconds)."""
REDIS_RETRY_AFTER_S = 2
"""Retry-After while the queue's Redis is not answering: a restart on the same host takes about that."""

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    429: "rate_limited",
    501: "not_implemented",
    502: "llm_failed",
    503: "unavailable",
    504: "timeout",
}


class ErrorResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: renders whatever the message holds."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(
    status: int,
    message: str,
    *,
    field: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ErrorResponse:
    body = {"error": code or _STATUS_CODES.get(status, "error"), "message": message, "field": field}
    return ErrorResponse(body, status_code=status, headers=headers)


def _field_of(loc: tuple[int | str, ...]) -> str:
    """pydantic's location as the engine names fields: ("body", "turns", 0, "user_input") ->
    "turns[0].user_input"; a path or query parameter is its name."""
    parts = list(loc[1:] if loc and loc[0] in ("body", "path", "query", "header") else loc)
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def _validation_message(error: dict[str, Any], field: str) -> str:
    if error.get("type") == "json_invalid":
        return f"invalid JSON: {error.get('ctx', {}).get('error', 'decode error')}"
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return message.removeprefix(f"{field.rsplit('.', 1)[-1]}: ")


async def _request_invalid(request: Request, exc: Exception) -> ErrorResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    field = "body" if first.get("type") == "json_invalid" else _field_of(tuple(first.get("loc", ())))
    return error_response(422, f"{field}: {_validation_message(first, field)}", field=field)


async def _invalid_input(request: Request, exc: Exception) -> ErrorResponse:
    """422 naming the field; 409 for input that conflicts with what the space holds: an import into a
    space with memory (`conflict`), a write id already used for other content (`write_id_conflict`)."""
    assert isinstance(exc, InvalidInputError)
    if isinstance(exc, SpaceNotEmptyError):
        return error_response(409, str(exc), field=exc.field, code="conflict")
    if isinstance(exc, WriteIdConflictError):
        return error_response(409, str(exc), field=exc.field, code="write_id_conflict")
    return error_response(422, str(exc), field=exc.field)


async def _space_not_found(request: Request, exc: Exception) -> ErrorResponse:
    assert isinstance(exc, SpaceNotFoundError)
    message = f"no memory for user {exc.user_id!r} (assistant {exc.assistant_id!r})"
    return error_response(404, message, code="space_not_found")


async def _item_not_found(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(404, str(exc), code="item_not_found")


async def _space_busy(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(
        503,
        "the memory space is held by another process (a forget, reindex or import); retry shortly",
        code="space_busy",
        headers={"Retry-After": str(BUSY_RETRY_AFTER_S)},
    )


async def _model_mismatch(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(409, str(exc), code="embedding_model_mismatch")


async def _llm_failed(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(502, "the LLM call failed after its retries", code="llm_failed")


async def _shutting_down(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(
        503, "the server is shutting down", code="unavailable", headers={"Retry-After": "1"}
    )


async def _storage_failed(request: Request, exc: Exception) -> ErrorResponse:
    # The engine words these messages itself (a store's path, SQLite's reason: "database or disk is
    # full", "file is not a database"), never from memory text; an operator needs the reason.
    log.error("memory store failed (%s): %s", type(exc).__name__, exc)
    return error_response(500, "the memory store failed", code="storage_error")


async def _overloaded(request: Request, exc: Exception) -> ErrorResponse:
    """Backpressure: writes arrive faster than they are embedded (or applied, in Redis mode), and the
    lag bound keeps reads short. 429, not 503: the server is up and answering, this client should slow
    down; monitoring counts them apart from failures (`memoryos_http_request_duration_seconds_count`
    with `status="429"`)."""
    assert isinstance(exc, BackpressureError)
    return error_response(
        429, str(exc), code="overloaded", headers={"Retry-After": str(max(1, round(exc.retry_after_s)))}
    )


async def _retry_later(request: Request, exc: Exception) -> ErrorResponse:
    """No worker answering for the space, no room for another bundle (Redis mode): nothing was done;
    retry."""
    assert isinstance(exc, ReadUnavailableError | BundleRoomError)
    return error_response(503, str(exc), headers={"Retry-After": str(max(1, round(exc.retry_after_s)))})


async def _redis_unavailable(request: Request, exc: Exception) -> ErrorResponse:
    """Redis mode, Redis restarting, replaying its AOF or unreachable: nothing was queued; retry."""
    log.warning("Redis unavailable (%s) on %s", type(exc).__name__, request.url.path)
    return error_response(
        503,
        "the queue's Redis is not answering (restarting or unreachable); nothing was done, retry shortly",
        code="unavailable",
        headers={"Retry-After": str(REDIS_RETRY_AFTER_S)},
    )


async def _job_not_found(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(404, str(exc), code="job_not_found")


async def _job_not_ready(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(409, str(exc), code="job_not_finished")


async def _not_in_this_mode(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(501, str(exc))


async def _remote_error(request: Request, exc: Exception) -> ErrorResponse:
    """The owner's engine refused the call: the same status as in embedded mode. Messages that could name
    the worker's paths (a missing space) are rebuilt from the request, as `_space_not_found` does."""
    assert isinstance(exc, RemoteReadError)
    status, code = REMOTE_ERRORS.get(exc.kind, (500, "internal"))
    message = str(exc)
    if exc.kind == "SpaceNotFoundError":
        params = request.path_params
        message = f"no memory for user {params.get('user_id')!r} (assistant {params.get('assistant_id')!r})"
    elif status == 500:
        log.error("the owning worker failed (%s)", exc.kind)
        message = "the worker owning this memory space failed"
    elif status == 502:
        message = "the LLM call failed after its retries"
    headers = {"Retry-After": str(BUSY_RETRY_AFTER_S)} if status == 503 else None
    return error_response(status, message, field=exc.field, code=code, headers=headers)


async def _http_error(request: Request, exc: Exception) -> ErrorResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    return error_response(exc.status_code, message, headers=dict(exc.headers or {}))


def install_error_handlers(app: FastAPI) -> None:
    """Register the mapping on `app`; `CatchAllMiddleware` answers what none of these handles."""
    app.add_exception_handler(RequestValidationError, _request_invalid)
    app.add_exception_handler(InvalidInputError, _invalid_input)
    app.add_exception_handler(SpaceNotFoundError, _space_not_found)
    app.add_exception_handler(ItemNotFoundError, _item_not_found)
    app.add_exception_handler(SpaceBusyError, _space_busy)
    app.add_exception_handler(EmbeddingModelMismatchError, _model_mismatch)
    app.add_exception_handler(LLMError, _llm_failed)
    app.add_exception_handler(SchedulerClosedError, _shutting_down)
    app.add_exception_handler(BatcherClosedError, _shutting_down)
    app.add_exception_handler(StorageError, _storage_failed)
    app.add_exception_handler(BackpressureError, _overloaded)
    app.add_exception_handler(ReadUnavailableError, _retry_later)
    app.add_exception_handler(BundleRoomError, _retry_later)
    app.add_exception_handler(JobNotFoundError, _job_not_found)
    app.add_exception_handler(JobNotReadyError, _job_not_ready)
    app.add_exception_handler(NotInThisModeError, _not_in_this_mode)
    app.add_exception_handler(RemoteReadError, _remote_error)
    app.add_exception_handler(HTTPException, _http_error)
    for unavailable in REDIS_UNAVAILABLE:
        app.add_exception_handler(unavailable, _redis_unavailable)


class CatchAllMiddleware:
    """A 500 `ErrorBody` for any exception no handler took, logged by class only (see module docstring).

    Starlette's own last-resort handler re-raises after answering, so the server would log the full
    traceback with its message; this one does not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as error:
            route = getattr(scope.get("route"), "path", "?")
            log.error("unhandled %s on %s %s", type(error).__name__, scope.get("method"), route)
            log.debug("traceback", exc_info=True)
            if started:
                raise
            await error_response(500, "internal error", code="internal")(scope, receive, send)
