"""The MCP server over streamable HTTP inside the API, at `/mcp`, behind the API's keys.

`mount_mcp(app)` adds the route to an app made by `services.api.main.create_app` (`services/serve.py`): the same `Spaces` (embedded:
one pool of open spaces and one scheduler; or the Redis queue and its workers) serve REST and MCP. Every HTTP request to `/mcp` is
authenticated like a REST call — the Bearer key names the tenant (401 otherwise), within the key's rate
(429) — before the MCP transport sees it; the caller rides in the ASGI scope to the tools, so each
JSON-RPC message is scoped by the key of the request that carried it. No tool argument names a tenant,
and a key bound to one user reaches that user only.

Stateless transport (`stateless_http`): no session lives in one replica's memory, so API replicas behind a
load balancer serve any request; responses are plain JSON rather than SSE streams.
"""

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from services.api.deps import ApiState, caller_with_key
from services.mcp.access import MemoryAccess
from services.mcp.scope import Caller, Defaults
from services.mcp.server import build_server

CALLER_SCOPE_KEY = "memoryos.mcp_caller"
"""Where `BearerGate` leaves the authenticated `Caller` in the ASGI scope for the tools."""


def caller_of_request(ctx: Context) -> Caller:
    """The caller `BearerGate` authenticated for the HTTP request that carried this message."""
    request = ctx.request_context.request
    caller = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
    if not isinstance(caller, Caller):  # only reachable if the route were served without its gate
        raise PermissionError("unauthenticated MCP request")
    return caller


class BearerGate:
    """ASGI wrapper: the API's key check and rate limit, then the MCP app with the caller in the scope."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            found = caller_with_key(self.state, Headers(scope=scope).get("authorization"))
        except HTTPException as refused:
            await _refuse(send, refused.status_code, str(refused.detail), refused.headers)
            return
        caller = Caller(found.tenant, found.user_id)  # a key bound to one user reaches that user only
        await self.app({**scope, CALLER_SCOPE_KEY: caller}, receive, send)


async def _refuse(send: Send, status: int, message: str, headers: Mapping[str, str] | None) -> None:
    """The API's error body (`{"error", "message", "field"}`), before the MCP transport is involved."""
    code = {401: "unauthorized", 429: "rate_limited"}[status]
    body = json.dumps({"error": code, "message": message, "field": None}).encode()
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    content = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": content + raw})
    await send({"type": "http.response.body", "body": body})


def mount_mcp(app: FastAPI, path: str = "/mcp") -> None:
    """Serve MCP at `path` of an app from `create_app`, with its keys, rate limits and spaces. Its
    session manager runs inside the app's lifespan."""
    state: ApiState = app.state.api
    access = MemoryAccess(
        state.spaces, caller_of_request, Defaults(), read_vector_wait_s=state.settings.read_vector_wait_s
    )
    server = build_server(access)
    # DNS-rebinding protection (Host and Origin checks) guards a loopback server without keys, as the SDK
    # sets it up; with keys a rebound page has no key, and the checks would refuse a reverse proxy's Host.
    unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mcp_app = server.streamable_http_app(
        streamable_http_path=path,
        stateless_http=True,
        json_response=True,
        host=state.settings.host,
        transport_security=unchecked if state.settings.authenticated else None,
    )
    app.router.routes.append(Route(path, BearerGate(mcp_app, state), methods=["GET", "POST", "DELETE"]))
    api_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        async with server.session_manager.run(), api_lifespan(app_) as inner:
            yield inner

    app.router.lifespan_context = lifespan
