"""Typed dependencies of the routes: the app's state, the caller from its Bearer key, and the space a
request names — the tenant always from the key, never from the request, so a key cannot reach another
tenant's memory whatever path it asks for."""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security.utils import get_authorization_scheme_param

from memoryos.space.pool import SpaceKey
from memoryos.validation import validate_id
from services.api.auth import Caller, KeyStore
from services.api.metrics import ApiMetrics
from services.api.models import ID_SCHEMA
from services.api.rate_limit import RateLimiter
from services.api.settings import ApiSettings
from services.spaces.protocol import NotInThisModeError, Spaces
from services.spaces.queued import QueuedSpaces


@dataclass
class ApiState:
    """Everything a request may need, built once by `create_app` and kept on `app.state.api`."""

    settings: ApiSettings
    spaces: Spaces
    keys: KeyStore
    limiter: RateLimiter
    metrics: ApiMetrics
    ready: bool = False


async def get_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


StateDep = Annotated[ApiState, Depends(get_state)]

BEARER_SCHEME = "HTTPBearer"
"""The OpenAPI security scheme every authenticated operation names (`openapi.declare_bearer_auth`)."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header's value (scheme in any case), else None."""
    scheme, token = get_authorization_scheme_param(authorization)
    return token if scheme.lower() == "bearer" and token else None


def caller_of(request: Request) -> Caller:
    """The caller of a REST request (`caller_with_key`).

    A plain function, not a chain of FastAPI dependencies (state, bearer scheme, caller): each dependency
    FastAPI solves costs the event loop time on every request, and on a few cores the loop is what bounds
    the write rate (docs/api.md, "The loop's share of a write"). The OpenAPI schema still declares the
    Bearer scheme."""
    return caller_with_key(request.app.state.api, request.headers.get("authorization"))


def caller_with_key(state: ApiState, authorization: str | None) -> Caller:
    """The caller the `Authorization` header's key names (401 otherwise), within its rate (429 with
    Retry-After otherwise): the one check of REST requests and of MCP over HTTP (`BearerGate`)."""
    token = bearer_token(authorization)
    caller = state.keys.caller_for(token)
    if caller is None:
        message = "missing API key" if token is None else "invalid API key"
        raise HTTPException(
            401, f"{message}: send 'Authorization: Bearer <key>'", {"WWW-Authenticate": "Bearer"}
        )
    retry_after = state.limiter.retry_after_s(caller.key_id)
    if retry_after is not None:
        raise HTTPException(429, "request rate over this key's limit", {"Retry-After": str(retry_after)})
    return caller


async def authenticate(request: Request) -> Caller:
    return caller_of(request)


CallerDep = Annotated[Caller, Depends(authenticate)]

UserId = Annotated[
    str,
    Path(
        description="The user's id: letters, digits and . _ @ + -, no '..'",
        examples=["maya"],
        json_schema_extra=ID_SCHEMA,
    ),
]
AssistantId = Annotated[
    str,
    Path(
        description="The assistant's id (the CLI's default: default_assistant_profile)",
        examples=["support-bot"],
        json_schema_extra=ID_SCHEMA,
    ),
]


async def space_key(request: Request, user_id: UserId, assistant_id: AssistantId) -> SpaceKey:
    """The space the path names, in the caller's tenant; ids checked by the engine's rule (no path
    separators, no `..`: 422 before any file is touched). A key bound to one user reaches that user only
    (403 otherwise)."""
    caller = caller_of(request)
    user = validate_id("user_id", user_id)
    if caller.user_id is not None and user != caller.user_id:
        raise HTTPException(403, f"this API key may reach user {caller.user_id!r} only")
    return SpaceKey(caller.tenant, user, validate_id("assistant_id", assistant_id))


SpaceDep = Annotated[SpaceKey, Depends(space_key)]


async def queued_spaces(state: StateDep) -> QueuedSpaces:
    """The Redis side of the API, for the job routes (mounted with Redis only; 501 should one be reached
    embedded)."""
    if not isinstance(state.spaces, QueuedSpaces):
        raise NotInThisModeError(
            "jobs run in a deployment with Redis (memoryos serve --redis-url); embedded, use GET .../export "
            "and POST .../import, and `memoryos reindex` on the data directory"
        )
    return state.spaces


QueuedDep = Annotated[QueuedSpaces, Depends(queued_spaces)]
