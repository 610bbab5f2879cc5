"""Each rq job in its own span, in the trace of whoever queued it.

`enqueue_space_job` puts the queuing side's trace context (the API request's span, say) in the job's meta
under `TRACE_META`, and `traced_job` runs the job in a CONSUMER span under it: `GET /v1/jobs/{id}` and the
job's work share one trace. A job queued with no span in progress (the CLI, the cron schedule) starts a
trace of its own. rq runs a job in a forked work-horse that leaves through `os._exit`, skipping the exit
hooks that would export the last spans, so the span is flushed before the job returns. The job process
turns tracing on itself (`configure_tracing`, once per process: the rq worker is rq's own command), by the
same standard variables as every other process.
"""

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from opentelemetry.trace import SpanKind
from rq.job import get_current_job

from memoryos.tracing import configure_tracing, context_of, flush_spans, space_attributes, tracer

P = ParamSpec("P")
T = TypeVar("T")

TRACE_META = "trace_context"
"""The job meta key holding the queuing side's trace context (`memoryos.tracing.current_carrier`)."""
RQ_SERVICE_NAME = "memoryos-rq-worker"
"""The rq worker's `service.name` in traces, unless `OTEL_SERVICE_NAME` names another."""


def job_attributes(meta: dict[str, Any], queue: str, job_id: str) -> dict[str, Any]:
    """What the job's span says: the messaging conventions' queue and message id, the job's kind, and
    its space's ids pseudonymised (`space_attributes`)."""
    attributes: dict[str, Any] = {
        "messaging.system": "rq",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
    }
    if isinstance(meta.get("kind"), str):
        attributes["memoryos.job.kind"] = meta["kind"]
    ids = (meta.get("tenant"), meta.get("user_id"), meta.get("assistant_id"))
    if all(isinstance(value, str) for value in ids):
        attributes.update(space_attributes(*ids))  # type: ignore[arg-type]
    return attributes


def traced_job(func: Callable[P, T]) -> Callable[P, T]:
    """`func` as an rq job that runs in its span (`process <function>`); called outside a job (a test),
    the span has no queue to name and no parent."""

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        configure_tracing(RQ_SERVICE_NAME)
        job = get_current_job()
        meta = job.meta if job is not None else {}
        attributes = job_attributes(meta, job.origin, job.id) if job is not None else {}
        try:
            with tracer().start_as_current_span(
                f"process {func.__name__}",
                context=context_of(meta.get(TRACE_META)),
                kind=SpanKind.CONSUMER,
                attributes=attributes,
            ):
                return func(*args, **kwargs)
        finally:
            flush_spans()

    return run
