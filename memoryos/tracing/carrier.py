"""Trace context in a plain field: what carries a write's trace from the API across Redis to the worker
that applies it, and a batch's texts across the embedding engine's Unix socket.

W3C Trace Context (`traceparent`, `tracestate`), through the process's configured propagators, held as
one compact JSON string so it fits one field of a stream entry (or a socket message) beside the op, never
inside the op's JSON or its content id: the same write carries the same op, traced or not. With no span
in progress (tracing off, or nothing started) there is nothing to carry: `current_carrier` is None and the
entry gets no field at all.

The sampled flag travels in `traceparent`, so a receiver that starts its span under `context_of(...)`
with a parent-based sampler (the default) keeps the API's decision: a write the API did not sample makes
no span downstream either, and one it sampled is traced end to end.
"""

import json
from collections.abc import Iterable

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link

MAX_CARRIER_BYTES = 1024
"""A carrier longer than this is ignored when read: a `traceparent` is 55 bytes and a `tracestate` at most
512 (W3C), so anything longer was not written by `current_carrier`."""


def current_carrier(context: Context | None = None) -> str | None:
    """The trace context of `context` (default: the current one) as the field's value, or None when it
    holds no valid span (tracing off: the caller writes no field)."""
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers, context=context)
    return json.dumps(headers, separators=(",", ":"), sort_keys=True) if headers else None


def context_of(carrier: str | bytes | None) -> Context | None:
    """The context a receiver starts its span under (`tracer.start_as_current_span(name,
    context=context_of(field))`), or None when the field is absent, malformed or holds no valid span:
    then the span starts where the receiver is (a new trace), never orphaned under an empty context.
    A malformed field is never an error: tracing must not refuse a write."""
    if not carrier or len(carrier) > MAX_CARRIER_BYTES:
        return None
    try:
        headers = json.loads(carrier)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return None
    context = propagate.extract(headers)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def link_to(carrier: str | bytes | None) -> Link | None:
    """A link to the span a carrier names (a batch span links each write it applied), or None."""
    context = context_of(carrier)
    return None if context is None else Link(trace.get_current_span(context).get_span_context())


def links_to(carriers: Iterable[str | bytes | None]) -> list[Link]:
    """Links to every span the carriers name, absent and malformed ones skipped. A batch of 256 writes
    makes 256 links: `configure_tracing` raises the SDK's link limit (128 by default) above that."""
    return [link for link in map(link_to, carriers) if link is not None]
