"""The spans of memory operations, and what they cost with tracing off: nothing but one flag read.

A memory operation (`create_memory`, `search_memory`, `delete_memory_store`, ...) is named by the GenAI
memory conventions' `gen_ai.operation.name` and names its space by `space_attributes` (the store id and
the tenant, user and assistant ids, pseudonymised unless allowed). The API's routes, the enqueue and the
owner call's client each start one through `operation_span`, which with tracing off returns one shared
do-nothing context: no span (not even the API's no-op one, 10 to 15 µs), no hashing of ids, no
attribute dict.

The stream entry's id is Redis's clock in milliseconds when it accepted the write (`<ms>-<seq>`):
`queue_wait_s` reads a write's time in its stream from it, with no field of its own.
"""

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from memoryos.tracing import tracer, tracing_enabled
from memoryos.tracing.attributes import ERROR_TYPE, GEN_AI_OPERATION, space_attributes
from memoryos.tracing.carrier import links_to

NO_SPAN: AbstractContextManager[None] = nullcontext()
"""What `operation_span` gives with tracing off: reusable, allocated once."""


def operation_span(
    name: str,
    operation: str,
    space: tuple[str, str, str],
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Context | None = None,
    links: list[Link] | None = None,
) -> AbstractContextManager[Span | None]:
    """A current span `name` for one memory `operation` on `space` (tenant, user id, assistant id), with
    `attributes` beside the operation's and the space's; `NO_SPAN` when tracing is off. `context` (a
    carrier's, `context_of`) makes it the child of a span in another process."""
    if not tracing_enabled():
        return NO_SPAN
    return _current_span(
        name,
        context=context,
        kind=kind,
        links=links,
        attributes={GEN_AI_OPERATION: operation, **space_attributes(*space), **(attributes or {})},
    )


def linked_span(
    name: str,
    carriers: Iterable[str],
    attributes: Mapping[str, AttributeValue],
    *,
    kind: SpanKind = SpanKind.INTERNAL,
) -> AbstractContextManager[Span | None]:
    """A current span for work done at once for many traces (an embedding batch of many runs' pages), in
    a trace of its own that links the span each carrier names, once each. `NO_SPAN` when tracing is off
    or no carrier names a sampled span: a batch of only writes the API did not sample is not traced
    either, as the worker's `apply batch` is not."""
    if not tracing_enabled():
        return NO_SPAN
    links = links_to(dict.fromkeys(carriers))
    if not any(link.context.trace_flags.sampled for link in links):
        return NO_SPAN
    return _current_span(name, context=Context(), kind=kind, links=links, attributes=attributes)


@contextmanager
def _current_span(
    name: str,
    *,
    context: Context | None,
    kind: SpanKind,
    links: list[Link] | None,
    attributes: Mapping[str, AttributeValue],
) -> Iterator[Span]:
    """A current span that an exception ends in error, named by its type alone: the SDK's own recording
    keeps the exception's message, which may quote the input (memory text)."""
    with tracer().start_as_current_span(
        name,
        context=context,
        kind=kind,
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as error:
            mark_failed(span, type(error).__name__)
            raise


def mark_failed(span: Span, error_type: str) -> None:
    """Mark `span` as failed: its status and `error.type`, the error's class name (never its message)."""
    span.set_status(Status(StatusCode.ERROR, error_type))
    span.set_attribute(ERROR_TYPE, error_type)


def queue_wait_s(entry_id: bytes | str, now_s: float | None = None) -> float:
    """Seconds since Redis accepted the stream entry `entry_id` (its id's millisecond part), by this
    host's clock (`now_s`, default now): 0 for an id that is not a stream id, and never below 0 (the
    clocks of Redis's host and this one may differ by a little)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    millis, _, _ = text.partition("-")
    if not millis.isdigit():
        return 0.0
    now = time.time() if now_s is None else now_s
    return max(0.0, now - int(millis) / 1000)
