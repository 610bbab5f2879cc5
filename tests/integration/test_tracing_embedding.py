"""A queued write's trace reaches its embedding, received for real: `memoryos serve --redis-url`, and a
worker whose pages go to its embedding engine process over the engine's Unix socket
(`tests.support.engine_worker`: the worker's code with the tests' hash embedder in the engine, so no
model loads). Three worker-side processes export over OTLP/HTTP to `tests/support/otlp_receiver.py`: the
supervisor's applying child, the engine child, and the API.

The path a trace viewer follows: the write's `apply create_memory` <-> its run's `apply batch` (linked
both ways) <- the batcher's `embed` (links the run) <- the engine's `embedding batch` (links the `embed`
span whose request it served).
"""

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from services.queue.keys import Keys
from tests.integration.test_tracing_export import assert_no_memory_text
from tests.integration.test_tracing_queue import (
    NAMESPACE,
    ROOT,
    SHARDS,
    caller,
    one,
    queue_env,
    served_api,
    space_url,
    trace_id,
)
from tests.support.fakes import HashEmbedder
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

INTERNAL = 1


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, OtlpReceiver]]:
    """The API in Redis mode and a worker with its embedding engine, all tracing to one receiver; the
    API's URL once the worker owns every shard."""
    root = tmp_path_factory.mktemp("traced-engine")
    with OtlpReceiver() as receiver, running_redis(root / "redis") as server:
        worker_log = root / "worker.log"
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.support.engine_worker", "--worker-id", "w-engine"],
            env=queue_env(
                receiver,
                server.url,
                MEMORYOS_DATA_DIR=str(root / "worker"),
                MEMORYOS_FAISS_USE_GPU="never",
                MEMORYOS_WORKER_METRICS_PORT="0",
                MEMORYOS_WORKER_HEALTH_PORT="0",
                MEMORYOS_WORKER_EMBEDDING_ENGINE="true",
            ),
            stdout=subprocess.DEVNULL,
            stderr=worker_log.open("wb"),
            cwd=ROOT,
        )
        try:
            with served_api(receiver, server.url, root) as url:
                client, keys = redis.Redis.from_url(server.url), Keys(NAMESPACE)
                deadline = time.monotonic() + 60
                while not all(client.get(keys.lease(shard)) for shard in range(SHARDS)):
                    assert worker.poll() is None, worker_log.read_text()
                    assert time.monotonic() < deadline, "the worker never took every shard"
                    time.sleep(0.05)
                yield url, receiver
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def linking(spans: list[ReceivedSpan], name: str, target: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name and (target.trace_id, target.span_id) in s.links]


def test_a_queued_write_links_to_its_embedding_in_the_engine_process(
    deployment: tuple[str, OtlpReceiver],
) -> None:
    url, receiver = deployment
    trace = trace_id(59)
    written = httpx.post(
        f"{space_url(url)}/memories",
        json={"user_input": "The lemon orchard is behind the mill.", "agent_response": "Noted."},
        headers=caller(trace),
    )
    assert written.status_code == 201, written.text

    def embedded(spans: list[ReceivedSpan]) -> bool:
        applies = [s for s in spans if s.name == "apply create_memory" and s.trace_id == trace]
        batches = [b for a in applies for b in linking(spans, "apply batch", a)]
        embeds = [e for b in batches for e in linking(spans, "embed", b)]
        return any(linking(spans, "embedding batch", e) for e in embeds)

    spans = receiver.wait_for(embedded)
    apply = one(spans, "apply create_memory", trace)
    (batch,) = linking(spans, "apply batch", apply)
    (embed,) = linking(spans, "embed", batch)
    (engine,) = linking(spans, "embedding batch", embed)
    # Each batch is a trace of its own, reached from the write's by links: write <-> run <- embed <- engine.
    assert (batch.trace_id, batch.span_id) in apply.links
    assert len({trace, batch.trace_id, embed.trace_id, engine.trace_id}) == 4
    assert embed.parent_span_id == engine.parent_span_id == ""
    assert (embed.service_name, engine.service_name) == ("memoryos-worker", "memoryos-embedding-engine")
    assert embed.kind == engine.kind == INTERNAL
    model = HashEmbedder().name
    for span in (embed, engine):
        assert span.attributes["gen_ai.operation.name"] == "embeddings"
        assert span.attributes["gen_ai.request.model"] == model
        assert span.attributes["memoryos.batch.size"] >= 1
        assert span.attributes["memoryos.batch.tokens"] >= 1
    assert engine.attributes["memoryos.batch.padded_tokens"] >= engine.attributes["memoryos.batch.tokens"]
    assert receiver.refused == []
    assert_no_memory_text(spans)
