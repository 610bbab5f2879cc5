"""The service's write path on one box: Redis and `memoryos worker`, MiniLM on CPU or a GPU.

- ingest to searchable, as deployed: `bench.serving.ingest` (the worker as its own process or processes, a round
  queued before the clock, the queue kept full for `--seconds`, the workers' CPU seconds per turn);
- acknowledged-write latency (XADD until Redis holds it) at fixed offered rates, open loop;
- takeover: a worker dies without releasing its leases; time until another owns every shard;
- the raw sentence-transformers `model.encode` of the same page texts (fp16 on CUDA) at batch 1, per
  chunk of the engine's batch size, and at its best batch size, in texts/s and real tokens/s; on CUDA,
  the worker's page vectors against the same model on the CPU in fp32.

    python -m bench.serving.service [--users 100 --turns 20] [--processes 1] [--seconds 30] [--instant-embedder]
        [--device auto|cpu|cuda] [--model PATH] [--write-run 64] [--only-ingest]
"""

import argparse
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.corpus import dev_conversations, exchanges, page_texts
from bench.gpu.models import load_named_model, parse_model_spec
from bench.output import emit
from bench.serving.ingest import free_ports, raw_model_rows, run_from_args, worker_environment
from memoryos import MemoryConfig
from memoryos.embedding.shared import shared_embedder
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.worker.main import Worker
from tests.support.redis_server import running_redis


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(samples_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(samples_ms, 99)), 2),
    }


def vector_agreement(config: MemoryConfig, location: str, texts: list[str]) -> float:
    """Lowest cosine between the worker's stored-page vectors (its embedder: fp16 on CUDA) and the same
    model's fp32 vectors on the CPU."""
    worker_vectors = shared_embedder(config).encode(texts)
    cpu = load_named_model(location, "cpu").encode(texts, normalize_embeddings=True)
    return round(float((worker_vectors * cpu).sum(axis=1).min()), 5)


def ack_latency(settings: QueueSettings, rates: list[int], seconds: float) -> list[dict[str, Any]]:
    """Open loop: writes sent at a fixed rate whatever the replies; latency of each XADD."""
    client = connect(settings)
    queue = WriteQueue(client, settings.model_copy(update={"queue_max_entries": 10**9}))
    op = plan_write([{"user_input": "hello", "agent_response": "hi"}], max_text_chars=100, at=time.time())
    rows = []
    for rate in rates:
        samples: list[float] = []
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for i in range(int(rate * seconds)):
            now = time.perf_counter()
            if now < next_at:
                time.sleep(next_at - now)
            queue.enqueue(SpaceKey("ack", f"user{i % 100}", "helper"), op)
            samples.append((time.perf_counter() - next_at) * 1000)  # from when it was due: open loop
            next_at += interval
        rows.append({"offered_per_s": rate, **_percentiles(samples)})
    return rows


def takeover(settings: QueueSettings, config: MemoryConfig) -> float:
    """Seconds from a worker's death (leases not released) until another owns every shard."""
    client = connect(settings)
    keys = Keys(settings.redis_namespace)
    dying = Worker(settings, config, worker_id="dying")
    dying.spaces.warm_up()
    dying.leases.release_all = lambda: None  # type: ignore[method-assign]
    stop_dying = threading.Event()
    dying_thread = threading.Thread(target=dying.run, args=(stop_dying,), daemon=True)
    dying_thread.start()
    while len(dying.leases.owned) < settings.shard_count:
        time.sleep(0.05)
    heir = Worker(settings, config, worker_id="heir")
    stop_heir = threading.Event()
    heir_thread = threading.Thread(target=heir.run, args=(stop_heir,), daemon=True)
    heir_thread.start()
    while len(heir.leases.owned) < settings.shard_count // 2:
        time.sleep(0.05)
    stop_dying.set()  # dies holding its leases
    died = time.perf_counter()
    while any(client.get(keys.lease(s)) != b"heir" for s in range(settings.shard_count)):
        time.sleep(0.01)
    elapsed = time.perf_counter() - died
    stop_heir.set()
    for thread in (dying_thread, heir_thread):
        thread.join(timeout=30)
    return round(elapsed, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--processes", type=int, default=1, help="worker processes (memoryos worker)")
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="how long the ingest keeps the queue full"
    )
    parser.add_argument(
        "--instant-embedder", action="store_true", help="ingest with no model: applying alone"
    )
    parser.add_argument("--rates", type=int, nargs="+", default=[250, 500, 1000])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="a name or a model directory")
    parser.add_argument("--raw-texts", type=int, default=512, help="texts for the raw model rows (0: none)")
    parser.add_argument("--write-run", type=int, default=64, help="writes of a space in one transaction")
    parser.add_argument("--only-ingest", action="store_true", help="skip ack latency, takeover, raw rows")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory() as workdir, running_redis(Path(workdir) / "redis") as server:
        settings = QueueSettings(
            redis_url=server.url, shard_count=16, lease_ttl_s=2.0, write_run=args.write_run
        )
        config = MemoryConfig(
            data_dir=Path(workdir) / "data",
            embedding_model_name=args.model,
            embedding_device=args.device,
            faiss_use_gpu="auto",
        )
        ingest_settings = QueueSettings(
            redis_url=server.url, write_run=args.write_run, queue_max_entries=10**9
        )
        env = worker_environment(
            ingest_settings, config.data_dir, args.model, args.device, False, free_ports(args.processes)
        )
        report: dict[str, Any] = {
            "ingest": run_from_args(args, ingest_settings, env, Path(workdir) / "worker.log")
        }
        if args.only_ingest:
            emit(report, args.out)
            return
        report["ack_latency"] = ack_latency(
            settings.model_copy(update={"redis_namespace": "ack"}), args.rates, 5.0
        )
        report["takeover_s"] = takeover(settings.model_copy(update={"redis_namespace": "takeover"}), config)
        report["lease_ttl_s"] = 2.0
        if args.raw_texts:
            import torch

            device = (
                "cuda"
                if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                else "cpu"
            )
            location = parse_model_spec(args.model)[1]
            texts = page_texts(exchanges(args.raw_texts, dev_conversations()))
            report["raw_model"] = raw_model_rows(location, device, texts, config.embedding_batch_size)
            if device == "cuda":
                report["cuda_vs_cpu_fp32_min_cosine"] = vector_agreement(config, location, texts[:256])
    emit(report, args.out)


if __name__ == "__main__":
    main()
