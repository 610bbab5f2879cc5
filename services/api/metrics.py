"""Prometheus metrics of one API process, on a registry of its own (several apps in one test process do
not collide).

- `memoryos_http_request_duration_seconds{method, route, status}`: latency by route *template*
  (`/v1/users/{user_id}/...`), never the raw path: one series per route, not per user.
- `memoryos_queue_depth`: writes acknowledged but not yet searchable — embedded: pages not yet embedded
  over the open spaces (the backlog that backpressure bounds); with Redis: entries not yet applied over
  every shard stream (what worker autoscaling reads).
- `memoryos_write_lag_seconds`: age of the oldest acknowledged write not yet searchable (0 when none).
- `memoryos_embed_batch_size`: texts per embedding batch, as a summary (`_count` batches, `_sum` texts)
  from the batcher's counters; `memoryos_embed_batch_largest`: the largest batch so far. (The batcher keeps
  totals only, so there are no per-batch buckets.)
- `memoryos_open_spaces`: spaces held open by this process.
- `memoryos_retrieves_total` and `memoryos_retrieves_without_vectors_total`: retrieves answered, and those
  that answered before every page stored before them had its vector (their bounded wait ended; those pages
  were ranked by words and date alone). The second over the first is the share the read-latency bound
  costs (docs/api.md, Read-your-writes).
"""

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memoryos.types import RetrievedContext

if TYPE_CHECKING:
    from services.spaces.protocol import Spaces

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""From a cached read (~1 ms) to a write waiting on a busy disk or a generated answer (seconds)."""


class _EngineCollector(Collector):
    """Reads the spaces' figures at scrape time."""

    def __init__(self, spaces: "Spaces") -> None:
        self._spaces = spaces

    def collect(self) -> Iterator[Metric]:
        figures = self._spaces.figures()
        yield GaugeMetricFamily(
            "memoryos_queue_depth",
            "Writes acknowledged but not yet searchable (embedded: pages to embed; Redis: entries to apply).",
            value=figures.queue_depth,
        )
        yield GaugeMetricFamily(
            "memoryos_write_lag_seconds",
            "Age of the oldest acknowledged write not yet searchable.",
            value=figures.write_lag_s,
        )
        yield GaugeMetricFamily(
            "memoryos_open_spaces",
            "Memory spaces held open by this process.",
            value=figures.open_spaces,
        )
        yield GaugeMetricFamily(
            "memoryos_forgets_failing",
            "Spaces whose forget failed and is being retried (never dead-lettered); /readyz names the count.",
            value=figures.forgets_failing,
        )
        stats = figures.batcher
        yield SummaryMetricFamily(
            "memoryos_embed_batch_size",
            "Texts per embedding batch (count: batches, sum: texts).",
            count_value=stats.batches if stats else 0,
            sum_value=stats.texts if stats else 0,
        )
        yield GaugeMetricFamily(
            "memoryos_embed_batch_largest",
            "The largest embedding batch so far.",
            value=stats.largest_batch if stats else 0,
        )


class ApiMetrics:
    """The registry and the request-latency histogram of one app."""

    def __init__(self, spaces: "Spaces") -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "memoryos_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.retrieves = Counter("memoryos_retrieves", "Retrieves answered.", registry=self.registry)
        self.retrieves_without_vectors = Counter(
            "memoryos_retrieves_without_vectors",
            "Retrieves answered while pages stored before them still had no vector (bounded wait).",
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(spaces))

    def read_answered(self, context: RetrievedContext) -> None:
        """Count a retrieve, and apart the ones that answered without some of their pages' vectors."""
        self.retrieves.inc()
        if context.pages_without_vectors:
            self.retrieves_without_vectors.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class LatencyMiddleware:
    """Times every HTTP request and records it under its route template (after routing has set it)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.request_seconds.labels(scope.get("method", "?"), route, str(status)).observe(
                time.perf_counter() - started
            )
