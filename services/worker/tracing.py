"""The worker's spans of applying writes: one per write, in the write's own trace, and one per run of a
space's writes (the batch the engine stores in one transaction), which links every write it applied
(docs/service.md, "Tracing").

A write's span (`apply <operation>`, CONSUMER) is the child of the enqueue span whose context its stream
entry carries (`services/queue/tracing.TRACE_FIELD`), so the caller's request, the API, the enqueue and
the apply are one trace across the processes; it says the shard, the run's size, the write's wait in its
stream (`memoryos.queue.wait_s`, from the entry id's millisecond clock), its id and, once applied, its
pages' ids (`gen_ai.memory.record.id`). The run's span (`apply batch`) starts a trace of its own, since
it serves many writes of many traces: it links each write's span, each write's span links it back, and it
is the current span while the engine applies the run, so what the engine does for the run (its commit,
`SpaceWork.pages_written`, the pages handed to the embedding batcher) happens in its context.

The API's sampling decision holds: a write whose carried context was not sampled gets no span here, and a
run of only such writes gets no batch span, so with the default (parent-based) sampler a worker records
exactly the writes the API sampled. A write that carries no context (queued with tracing off at the API,
or held for a reindex, whose held copy keeps only the op) starts a trace of its own by the worker's
sampler.

With tracing off the consumer never builds any of this: it reads one flag per run (`tracing_enabled`)
and applies with `UNTRACED`, which does nothing.
"""

from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

from memoryos.space.ops import AddTurns
from memoryos.tracing import context_of, space_attributes, tracer
from memoryos.tracing.attributes import (
    BATCH_SIZE,
    GEN_AI_OPERATION,
    MEMORY_RECORD_ID,
    MESSAGING_MESSAGE_ID,
    QUEUE_WAIT_S,
)
from memoryos.tracing.spans import mark_failed, queue_wait_s
from services.queue.tracing import TRACE_FIELD, operation_of, stream_attributes, write_attributes
from services.worker.runs import Delivered


class Untraced:
    """What the consumer applies with when tracing is off: nothing to start, nothing to record."""

    def __enter__(self) -> "Untraced":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def applied(self, result: object) -> None:
        """Nothing to record."""


UNTRACED = Untraced()
"""Shared: with tracing off no object is made per run."""


def _write_context(entry: Delivered) -> tuple[bool, Context | None]:
    """Whether the write is traced here, and the context its span starts under (None: a trace of its
    own). A carried context the API did not sample is not traced: its decision holds downstream."""
    context = context_of(entry.fields.get(TRACE_FIELD))
    if context is None:
        return True, None
    return trace.get_current_span(context).get_span_context().trace_flags.sampled, context


def page_ids_of(result: object, count: int) -> list[list[int]] | None:
    """Each write's page ids from what the worker's apply returned for a run of `count` writes: a list of
    page-id lists (`Memoryos.apply_writes`), or one `{"created": [...]}` per op (`apply_queued`); None
    when it is neither."""
    if not isinstance(result, list) or len(result) != count:
        return None
    found: list[list[int]] = []
    for item in result:
        ids: Any = item.get("created") if isinstance(item, dict) else item
        if not isinstance(ids, list) or not all(isinstance(page, int) for page in ids):
            return None
        found.append(ids)
    return found


class ApplySpans:
    """`with ApplySpans(stream, shard, run) as spans: spans.applied(apply(run))`: the run's spans, open
    while it is applied; an exception out of the block ends them in error (`error.type`)."""

    def __init__(self, stream: str, shard: int, run: Sequence[Delivered]) -> None:
        self._stream, self._shard, self._run = stream, shard, run
        self._writes: list[tuple[int, Span]] = []
        """(index in the run, its span) of each write traced here."""
        self._batch: AbstractContextManager[Span] | None = None
        """The batch span's context manager (`start_as_current_span`), once entered."""
        self._batch_span: Span | None = None

    def __enter__(self) -> "ApplySpans":
        first = self._run[0]
        space = (first.space.tenant, first.space.user_id, first.space.assistant_id)
        shared = {
            **space_attributes(*space),
            **stream_attributes(self._stream, self._shard, "process"),
            BATCH_SIZE: len(self._run),
        }
        for index, entry in enumerate(self._run):
            traced, context = _write_context(entry)
            if not traced:
                continue
            operation = operation_of(entry.op)
            span = tracer().start_span(
                f"apply {operation}",
                context=context,
                kind=SpanKind.CONSUMER,
                attributes={
                    GEN_AI_OPERATION: operation,
                    **shared,
                    **write_attributes(entry.op),
                    MESSAGING_MESSAGE_ID: entry.entry_id.decode(),
                    QUEUE_WAIT_S: round(queue_wait_s(entry.entry_id), 6),
                },
            )
            self._writes.append((index, span))
        if not self._writes:
            return self
        links = [Link(span.get_span_context()) for _, span in self._writes]
        self._batch = tracer().start_as_current_span(
            "apply batch",
            kind=SpanKind.INTERNAL,
            links=links,
            attributes=shared,
            record_exception=False,  # an exception's message may quote the input: its type alone, below
            set_status_on_exception=False,
        )
        self._batch_span = self._batch.__enter__()
        for _, span in self._writes:
            span.add_link(self._batch_span.get_span_context())
        return self

    def applied(self, result: object) -> None:
        """Record each write's page ids from the run's result (writes only: an edit or a forget has none)."""
        if not self._writes:
            return
        pages = page_ids_of(result, len(self._run))
        if pages is None:
            return
        for index, span in self._writes:
            if isinstance(self._run[index].op, AddTurns):
                span.set_attribute(MEMORY_RECORD_ID, [str(page) for page in pages[index]])

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        spans = [span for _, span in self._writes]
        if self._batch_span is not None:
            spans.append(self._batch_span)
        if kind is not None:
            for span in spans:
                mark_failed(span, kind.__name__)
        if self._batch is not None:
            self._batch.__exit__(kind, error, tb)
        for _, span in self._writes:
            span.end()
