"""A real OTLP/HTTP trace receiver: `POST /v1/traces` with a protobuf body, decoded with the official
`opentelemetry-proto` messages, as a collector's OTLP/HTTP receiver would.

The tests point a process's `OTEL_EXPORTER_OTLP_ENDPOINT` at `receiver.endpoint` and read back what the
SDK's own exporter sent over the wire: a span the exporter could not serialise, a wrong content type or a
wrong path would fail here as it would at a collector. Each span is kept flat (`ReceivedSpan`): ids as hex,
attributes as Python values, links as (trace id, span id) pairs, the resource's `service.name`.
"""

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.threaded_http import ScriptedHandler, StatefulServer, ThreadedTestServer

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    """"" for a root span."""
    kind: int
    """The protobuf's `Span.SpanKind` (2 server, 3 client, 4 producer, 5 consumer, 1 internal)."""
    attributes: dict[str, Any]
    links: list[tuple[str, str]]
    status_code: int
    """The protobuf's `Status.StatusCode` (0 unset, 1 ok, 2 error)."""
    service_name: str
    scope: str


def attribute_value(value: AnyValue) -> Any:
    """An OTLP attribute's value as Python: arrays as lists, key-value lists as dicts, unset as None."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [attribute_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {item.key: attribute_value(item.value) for item in value.kvlist_value.values}
    return None if which is None else getattr(value, which)


def spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found = []
    for resource_spans in request.resource_spans:
        resource = {item.key: attribute_value(item.value) for item in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={item.key: attribute_value(item.value) for item in span.attributes},
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        status_code=span.status.code,
                        service_name=str(resource.get("service.name", "")),
                        scope=scope_spans.scope.name,
                    )
                )
    return found


@dataclass
class _State:
    requests: list[ReceivedSpan] = field(default_factory=list)
    """Every span received, in arrival order (`ThreadedTestServer.requests` reads this)."""
    refused: list[str] = field(default_factory=list)
    """Why each request that was not a valid OTLP/HTTP protobuf export was refused."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)


class _Handler(ScriptedHandler):
    server: "_Server"

    def do_POST(self) -> None:
        state = self.server.state
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        content_type = self.headers.get("content-type", "")
        if self.path != "/v1/traces" or content_type != PROTOBUF:
            with state.lock:
                state.refused.append(f"{self.path} {content_type}")
            self._send(404 if self.path != "/v1/traces" else 415, b"", "text/plain")
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)  # a body that is not the message raises: the test sees a 500
        with state.arrived:
            state.requests.extend(spans_of(request))
            state.arrived.notify_all()
        self._send(200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF)


class _Server(StatefulServer):
    state: _State


class OtlpReceiver(ThreadedTestServer[ReceivedSpan]):
    """`with OtlpReceiver() as receiver:` serving on a free loopback port until the block exits."""

    def __init__(self) -> None:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.state = _State()
        super().__init__(server, "otlp-receiver")
        self._state = server.state

    @property
    def endpoint(self) -> str:
        """The value for `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`)."""
        return self.base_url.removesuffix("/v1")

    @property
    def refused(self) -> list[str]:
        with self._state.lock:
            return list(self._state.refused)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 30.0
    ) -> list[ReceivedSpan]:
        """The spans received once `found(spans)` holds; `AssertionError` with what did arrive when it
        does not within `timeout_s` (a bound on a hang, not a timed assert: the exporter sends when its
        batch's delay runs out, and the tests set that delay short)."""
        deadline = time.monotonic() + timeout_s
        with self._state.arrived:
            while not found(self._state.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({span.name for span in self._state.requests})
                    raise AssertionError(f"the spans awaited never arrived; received: {names}")
                self._state.arrived.wait(left)
            return list(self._state.requests)

    def __enter__(self) -> "OtlpReceiver":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
