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

from services.jobs.bundles import BundleRoomError
from services.jobs.status import JobNotFoundError, JobNotReadyError
from services.spaces.errors import ANSWERS, REDIS_UNAVAILABLE, answer_for, message_for, retry_after_s

log = logging.getLogger(__name__)

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


async def _answered(request: Request, exc: Exception) -> ErrorResponse:
    """An error of the spaces, answered as their one table says (`services/spaces/errors.py`)."""
    answer = answer_for(exc)
    assert answer is not None
    if isinstance(exc, REDIS_UNAVAILABLE):
        log.warning("Redis unavailable (%s) on %s", type(exc).__name__, request.url.path)
    elif answer.code == "storage_error":
        # The engine words these itself (a store's path, SQLite's reason: "database or disk is full"),
        # never from memory text; an operator needs the reason.
        log.error("memory store failed (%s): %s", type(exc).__name__, exc)
    elif answer.status == 500:
        log.error("the owning worker failed (%s)", getattr(exc, "kind", type(exc).__name__))
    retry = retry_after_s(exc, answer)
    return error_response(
        answer.status,
        message_for(exc, answer),
        field=getattr(exc, "field", None),
        code=answer.code,
        headers={"Retry-After": str(retry)} if retry is not None else None,
    )


async def _retry_later(request: Request, exc: Exception) -> ErrorResponse:
    """No room for another bundle in Redis: nothing was done; retry."""
    assert isinstance(exc, BundleRoomError)
    return error_response(503, str(exc), headers={"Retry-After": str(max(1, round(exc.retry_after_s)))})


async def _job_not_found(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(404, str(exc), code="job_not_found")


async def _job_not_ready(request: Request, exc: Exception) -> ErrorResponse:
    return error_response(409, str(exc), code="job_not_finished")


async def _http_error(request: Request, exc: Exception) -> ErrorResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    return error_response(exc.status_code, message, headers=dict(exc.headers or {}))


def install_error_handlers(app: FastAPI) -> None:
    """Register the mapping on `app`; `CatchAllMiddleware` answers what none of these handles."""
    app.add_exception_handler(RequestValidationError, _request_invalid)
    for error in ANSWERS:
        app.add_exception_handler(error, _answered)
    app.add_exception_handler(BundleRoomError, _retry_later)
    app.add_exception_handler(JobNotFoundError, _job_not_found)
    app.add_exception_handler(JobNotReadyError, _job_not_ready)
    app.add_exception_handler(HTTPException, _http_error)


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
