"""What the OpenAPI schema says beyond what FastAPI infers: the Bearer scheme, and the error responses.

Routes authenticate in one plain dependency (`deps.caller_of`), not through FastAPI's security dependency,
so the schema would not say so by itself; clients and the /docs "Authorize" button read it from here.
Every operation under `API_PREFIX` authenticates (`tests/integration/test_api_auth.py` asks each one
without a key); the probes and `/metrics` outside it do not.

Errors are answered by handlers (`errors.py`), not returned by routes, so FastAPI cannot see them either:
each router and route names the statuses it can answer with `error_responses`, every one an `ErrorBody`
(FastAPI's own 422 schema, `HTTPValidationError`, is not what this API sends). A generated client then
knows every error's shape (`tests/integration/test_api_openapi.py`).
"""

from typing import Any

from fastapi import FastAPI

from services.api.deps import BEARER_SCHEME
from services.api.models import ErrorBody
from services.api.routes import API_PREFIX

ERROR_CASES: dict[int, str] = {
    401: "No key, or an unknown or revoked one (`unauthorized`); `WWW-Authenticate: Bearer`.",
    403: "The key is bound to another user (`forbidden`).",
    404: "No memory for that user in this key's tenant (`space_not_found`); no such page, fact or write "
    "(`item_not_found`, `not_found`); no such job for this key, or its bundle expired (`job_not_found`).",
    409: "Conflicts with what is held: the write id was used for a write with other content "
    "(`write_id_conflict`); the space was embedded with another model (`embedding_model_mismatch`); an "
    "import into a space that holds memory (`conflict`); a job's bundle before it finished "
    "(`job_not_finished`).",
    413: "The body is over the limit (`body_too_large`).",
    422: "A field the schema or the engine refused; `field` names it (`invalid_input`).",
    429: "Over the key's request rate (`rate_limited`); `Retry-After`.",
    500: "A bug or a failing disk (`internal`, `storage_error`).",
    502: "The LLM failed after its retries (`llm_failed`).",
    503: "Nothing was done, retry after `Retry-After`: backpressure, the space held by another process "
    "(`space_busy`), Redis not answering or no worker owning the space (`unavailable`), Redis full at its "
    "`maxmemory` (`queue_full`), too many bundles held, shutting down.",
}
"""When each error status is answered, with its `error` codes (docs/api.md, Errors)."""


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a router or route: each status with its `ErrorBody` and when it is answered."""
    return {status: {"model": ErrorBody, "description": ERROR_CASES[status]} for status in statuses}


RETRY_AFTER_HEADER = {
    "Retry-After": {"description": "Seconds to wait before asking again.", "schema": {"type": "integer"}}
}

WRITE_WAIT_ERRORS: dict[int | str, dict[str, Any]] = {
    422: {
        "model": ErrorBody,
        "description": ERROR_CASES[422] + " A retrieve also answers it at once, `field` "
        "`wait_for_write_ids`, for a write id the space never acknowledged: none stored under it, and "
        "none acknowledged and still to be stored (with Redis: among the write ids callers chose that the "
        "API recorded for the space in the last `write_digest_ttl_s`, an hour by default; an id the "
        "server chose is stored before a read can name it). Nothing could end such a wait.",
    },
    503: {
        "model": ErrorBody,
        "description": ERROR_CASES[503] + " A retrieve also answers it (`unavailable`) when writes "
        "it waits for, acknowledged to the space, were not stored within `wait_timeout_s`, or the worker "
        "owning the space did not apply the writes before the read in time: ask again after `Retry-After`.",
        "headers": RETRY_AFTER_HEADER,
    },
}
"""The answers of a retrieve's wait for `wait_for_write_ids` (services/api/routes/retrieve.py): a write
id never acknowledged is a client error at once; only a real wait can run out, and that is a retry."""

KEYED_ERRORS = error_responses(401, 422, 429, 500, 503)
"""What every operation under `API_PREFIX` can answer: the key and its rate, its parameters, a failure,
Redis away (with `--redis-url`)."""
SPACE_ERRORS = {**KEYED_ERRORS, **error_responses(403, 409)}
"""And on a space: a key bound to another user, a space embedded with another model (when it is opened)."""
SPACE_READ_ERRORS = {**SPACE_ERRORS, **error_responses(404)}
"""And on a space that must exist already: every route but the writes that create one."""

BEARER_DESCRIPTION = "An API key, as `Authorization: Bearer <key>`."


def declare_bearer_auth(app: FastAPI) -> None:
    """Wrap `app.openapi` so the schema declares the Bearer scheme and each operation under `API_PREFIX`
    requires it (built once and cached by FastAPI, as before)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[BEARER_SCHEME] = {"type": "http", "description": BEARER_DESCRIPTION, "scheme": "bearer"}
        for path, operations in schema.get("paths", {}).items():
            if path.startswith(API_PREFIX + "/"):
                for operation in operations.values():
                    operation["security"] = [{BEARER_SCHEME: []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
