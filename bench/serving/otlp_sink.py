"""An OTLP/HTTP trace receiver in a process of its own: a collector's cost left out of a tracing bench
(its decoding takes no interpreter time from the bench), or the spans of one real run kept as JSON.

    python -m bench.serving.otlp_sink PORT [--keep]

`POST /v1/traces` (protobuf, gzip or not) is decoded with the official messages and counted; `GET
/count` answers the spans received so far. With `--keep`, `GET /spans` answers every span received, flat
(`flat_spans`: ids in hex, times in ns since the epoch, attributes and links decoded). The exporter under
test sends what it sends to a collector.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.otlp_receiver import attribute_value

PROTOBUF = "application/x-protobuf"
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_received = 0
_kept: list[dict[str, Any]] | None = None
"""Every span received, with `--keep`."""
_lock = threading.Lock()


def flat_spans(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Each span of an export request as a flat JSON-able record: its service, name, kind, ids (hex),
    start and end (ns since the epoch), attributes, links (trace and span ids) and status code."""
    found = []
    for resource_spans in request.resource_spans:
        resource = {item.key: attribute_value(item.value) for item in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    {
                        "service": resource.get("service.name", ""),
                        "scope": scope_spans.scope.name,
                        "name": span.name,
                        "kind": KINDS.get(span.kind, str(span.kind)),
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": {item.key: attribute_value(item.value) for item in span.attributes},
                        "links": [
                            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                            for link in span.links
                        ],
                        "status_code": span.status.code,
                    }
                )
    return found


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        global _received
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
        with _lock:
            _received += spans
            if _kept is not None:
                _kept.extend(flat_spans(request))
        self._answer(ExportTraceServiceResponse().SerializeToString(), PROTOBUF)

    def do_GET(self) -> None:
        with _lock:
            if self.path == "/spans":
                self._answer(json.dumps(_kept or []).encode(), "application/json")
                return
            count = _received
        self._answer(str(count).encode(), "text/plain")

    def _answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a line per export would be most of its work."""


def main() -> None:
    global _kept
    if "--keep" in sys.argv[2:]:
        _kept = []
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Sink)
    print("otlp sink serving", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
