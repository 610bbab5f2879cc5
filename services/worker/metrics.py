"""The worker's Prometheus metrics, read from the worker and the engine's scheduler at scrape time (a
collector, not counters updated on the hot path): shards and leases, queue depth of owned shards, open
spaces, spaces with writes held for a reindex, whether the host's embedding engine answers, embedding
batches and tokens, LLM calls in flight, dead letters."""

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.scheduler import Scheduler

if TYPE_CHECKING:
    from services.worker.main import Worker


class WorkerCollector(Collector):
    """Register with a `CollectorRegistry`; `prometheus_client.start_http_server` serves it."""

    def __init__(self, worker: "Worker", scheduler: Scheduler) -> None:
        self.worker = worker
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        worker = self.worker
        owned = sorted(worker.leases.owned)
        yield GaugeMetricFamily(
            "memoryos_shards_owned", "Shards whose lease this worker holds.", value=len(owned)
        )
        yield GaugeMetricFamily(
            "memoryos_shards_total", "Shards of the deployment.", value=worker.settings.shard_count
        )
        yield GaugeMetricFamily(
            "memoryos_lease_ttl_seconds",
            "Lease TTL: a dead worker's shards move after it.",
            value=worker.settings.lease_ttl_s,
        )
        yield GaugeMetricFamily(
            "memoryos_queue_depth",
            "Unapplied writes in the shards this worker owns.",
            value=worker.owned_queue_depth(),
        )
        yield GaugeMetricFamily(
            "memoryos_held_spaces",
            "Spaces whose writes wait for their reindex (stored on another embedding model), owned shards.",
            value=worker.consumer.held.count(),
        )
        yield GaugeMetricFamily("memoryos_open_spaces", "Spaces held open.", value=len(worker.spaces.pool))
        yield GaugeMetricFamily(
            "memoryos_forgets_failing",
            "Spaces whose forget failed and is being retried, over the deployment (never dead-lettered).",
            value=int(worker.client.hlen(worker.consumer.keys.forgets_failing())),
        )
        embedder = worker.spaces.embedder()
        if isinstance(embedder, EngineEmbedder):
            yield from _engine_families(embedder)
        stats = self.scheduler.batcher_stats()
        yield CounterMetricFamily(
            "memoryos_embed_tokens",
            "Tokens embedded (estimated), every model.",
            value=sum(s.tokens_estimated for s in stats),
        )
        yield CounterMetricFamily(
            "memoryos_embed_batches",
            "Embedding batches (encode calls of pages and texts).",
            value=sum(s.batches for s in stats),
        )
        yield CounterMetricFamily(
            "memoryos_embed_texts", "Texts embedded in batches.", value=sum(s.texts for s in stats)
        )
        yield GaugeMetricFamily(
            "memoryos_llm_requests_in_flight",
            "LLM calls running now, every space.",
            value=self.scheduler.llm_requests_in_flight,
        )
        yield CounterMetricFamily(
            "memoryos_dead_letters",
            "Writes moved to the dead-letter list by this worker.",
            value=worker.consumer.dead_letters,
        )


def _engine_families(embedder: EngineEmbedder) -> Iterator[Metric]:
    """The host's embedding engine as its health answer says (`EngineEmbedder.health`): whether it
    answers, whether it embeds (a model failing every batch answers and embeds nothing), its batches and
    its last success. Asked at scrape time, at most a second."""
    said, health = embedder.health()
    yield GaugeMetricFamily(
        "memoryos_embedding_engine_up",
        "1 while the host's embedding engine answers; 0 while it is unreachable (its pages wait).",
        value=float(health is not None),
    )
    yield GaugeMetricFamily(
        "memoryos_embedding_engine_stalled",
        "1 while the engine answers and embeds nothing (texts waiting, or every batch failing, for "
        "embedding_engine_stall_s), or accepts and answers nothing; the supervisor restarts it.",
        value=float(said in ("stalled", "unresponsive")),
    )
    if health is not None:
        yield CounterMetricFamily(
            "memoryos_embedding_engine_batches",
            "Model batches the engine completed.",
            value=health.batches_total,
        )
        yield CounterMetricFamily(
            "memoryos_embedding_engine_failures",
            "Model calls that raised (a batch, or a request of a failed batch retried alone).",
            value=health.failures_total,
        )
        if health.last_success_unix is not None:
            yield GaugeMetricFamily(
                "memoryos_embedding_engine_last_success_timestamp_seconds",
                "When the engine's last batch succeeded (Unix time).",
                value=health.last_success_unix,
            )
