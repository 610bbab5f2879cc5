"""The API's server spans: FastAPI's maintained instrumentation, installed on the app only when the
process turned tracing on (`memoryos.tracing.configure_tracing`), so with tracing off no request pays for
it.

Each request is one SERVER span named by its route template (`POST /v1/users/{user_id}/assistants/
{assistant_id}/turns`), the parent of what the request does (the enqueue, an owner call, an LLM call); a
`traceparent` header sent by the caller makes it a child of the caller's trace. The instrumentation
records the raw path and URL, which hold the user's id and, for a retrieve, the query text: the request
hook rewrites them (`redact_url_attributes`) and adds the path's ids pseudonymised. Probes and metrics
scrapes make no span. The ASGI `receive`/`send` sub-spans are left out: one span per request.
"""

from typing import Any

from fastapi import FastAPI
from opentelemetry.trace import Span

from memoryos.tracing.attributes import path_ids, redact_url_attributes

UNTRACED_PATHS = "/healthz,/readyz,/metrics"
"""Paths that make no span (the instrumentation's `excluded_urls`: probes every few seconds, scrapes)."""


def _on_request(span: Span, scope: dict[str, Any]) -> None:
    if span.is_recording():
        redact_url_attributes(span)
        span.set_attributes(path_ids(str(scope.get("path", ""))))


def instrument_api(app: FastAPI) -> None:
    """Give every request to `app` (the MCP app mounted on it included) its server span."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app,
        server_request_hook=_on_request,
        excluded_urls=UNTRACED_PATHS,
        exclude_spans=["receive", "send"],
    )
