"""Trace and span ids on log lines while tracing is on, so a log line leads to its trace and back.

Every record gets `trace_id` and `span_id` (32 and 16 hex digits, or "" outside a span) from a record
factory, so any handler's format may name them (`%(trace_id)s`) and structured handlers see them as fields.
The handlers the process already has (the root logger's, and `logging.lastResort`, which prints WARNING
and above when none is configured) also get them appended to each line that is inside a span:
`... trace_id=<hex> span_id=<hex>`. Installed once by `configure_tracing`; a process that never traces
keeps Python's own factory and formats.
"""

import logging

from opentelemetry import trace

_installed = False


class TraceIdsFormatter(logging.Formatter):
    """Another formatter's line, with the record's trace and span ids appended when it has them."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self._inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        line = self._inner.format(record)
        trace_id = getattr(record, "trace_id", "")
        if not trace_id:
            return line
        return f"{line} trace_id={trace_id} span_id={getattr(record, 'span_id', '')}"


def install_log_correlation() -> None:
    """Ids on every record from now on, and on the lines of the handlers configured so far (once per
    process: configure logging first, then tracing)."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def record_with_ids(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            record.trace_id = trace.format_trace_id(span_context.trace_id)
            record.span_id = trace.format_span_id(span_context.span_id)
        else:
            record.trace_id = record.span_id = ""
        return record

    logging.setLogRecordFactory(record_with_ids)
    handlers = list(logging.getLogger().handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if not isinstance(handler.formatter, TraceIdsFormatter):
            handler.setFormatter(TraceIdsFormatter(handler.formatter))
