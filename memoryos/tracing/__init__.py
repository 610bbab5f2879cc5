"""Traces of memory operations, shared by the engine and the services: what a span may say, how a trace
crosses a process, and turning the SDK on (docs/service.md, "Tracing").

- `tracer()`: the one tracer every module starts its spans from (a no-op until `configure_tracing`).
- `setup`: `configure_tracing(service_name)` at a process's start, on only when `OTEL_EXPORTER_OTLP_*`
  asks; `flush_spans` before a process leaves without its exit hooks.
- `attributes`: attribute names (GenAI's `gen_ai.*`, ours `memoryos.*`), ids pseudonymised, memory text
  only when `MEMORYOS_TRACE_MEMORY_TEXT` allows.
- `carrier`: W3C trace context in a plain field (a stream entry's, a socket message's), and links to it.
- `logs`: trace and span ids on log lines while tracing is on.

Only the OpenTelemetry API is imported here; the SDK is imported by `configure_tracing` when it turns
tracing on.
"""

from opentelemetry import trace

from memoryos.tracing.attributes import memory_text_allowed, pseudonym, space_attributes, with_memory_text
from memoryos.tracing.carrier import context_of, current_carrier, link_to, links_to
from memoryos.tracing.setup import configure_tracing, flush_spans, tracing_enabled, tracing_requested

TRACER_NAME = "memoryos"

_TRACER = trace.get_tracer(TRACER_NAME)
"""The API's proxy tracer: it answers with no-op spans until a provider is installed, then delegates to
that provider's tracer, so it may be taken at import time, before `configure_tracing` runs."""


def tracer() -> trace.Tracer:
    """The tracer of MemoryOS's own spans, the same object on every call (nothing to create per span)."""
    return _TRACER


__all__ = [
    "TRACER_NAME",
    "configure_tracing",
    "context_of",
    "current_carrier",
    "flush_spans",
    "link_to",
    "links_to",
    "memory_text_allowed",
    "pseudonym",
    "space_attributes",
    "tracer",
    "tracing_enabled",
    "tracing_requested",
    "with_memory_text",
]
