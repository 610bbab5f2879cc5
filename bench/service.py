"""The service's write path on one box: Redis + one worker, MiniLM on CPU or a GPU (issue 14's figures).

- ingest to searchable: `--users` clients write `--turns` exchanges each at once through the Redis queue;
  one worker applies and embeds them. Throughput against the engine's embedder alone on the same texts
  at the same batch size and threads, and the batcher's mean batch size; beside it the raw
  sentence-transformers `model.encode` of the same page texts (fp16 on CUDA) at batch 1, per chunk of the
  engine's batch size, and at its best batch size (all texts in one call), in texts/s and real tokens/s.
  On CUDA, the worker's page vectors are checked against the same model on the CPU in fp32.
- acknowledged-write latency (XADD until Redis holds it) at fixed offered rates, open loop.
- takeover: a worker dies without releasing its leases; time until another owns every shard.

    python -m bench.service [--users 100 --turns 20] [--device auto|cpu|cuda] [--model PATH]
        [--write-run 64] [--instant-embedder | --worker-process] [--only-ingest]

`--write-run 1` applies each queued write in its own transaction (as before runs); `--instant-embedder`
takes the model out, leaving the worker's applying alone; `--worker-process` runs the real `memoryos
worker` as a process of its own (as deployed) instead of a thread beside the bench's 100 writer threads
and its reader, which share one interpreter lock with it.
"""

import argparse
import logging
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.api import free_port
from bench.corpus import dev_conversations, exchanges, page_texts
from bench.faults import start_worker_process, worker_env
from bench.gpu_embedding import count_tokens
from bench.gpu_models import load_named_model, parse_model_spec
from bench.output import emit
from memoryos import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.embedding.shared import shared_embedder
from memoryos.scheduler import shared_scheduler
from memoryos.space_pool import SpaceKey
from memoryos.writes import plan_write
from services.queue.calls import WRITE_STATUS
from services.queue.connection import connect
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.reads import ReadClient, ReadUnavailableError
from services.queue.settings import QueueSettings
from services.worker.main import Worker
from tests.support.fakes import HashEmbedder
from tests.support.redis_server import running_redis

SEARCHABLE_POLL_S = 0.2
"""How often the bench asks whether a user's last write is searchable. Each answer is a read the worker
serves: asked every 20 ms, as before 2026-11-27, the polling took about a tenth of a core from the worker
it measures; 0.2 s adds at most that much to a minute-long ingest."""


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(samples_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(samples_ms, 99)), 2),
    }


def raw_encode_rate(config: MemoryConfig, texts: list[str], tag: str = "raw") -> float:
    """Texts per second of the embedder alone, in batches of the batcher's size; each text prefixed with
    `tag`, so that neither the ingest nor another measurement finds it in the embedder's cache."""
    embedder = shared_embedder(config)
    embedder.encode(texts[:8])
    started = time.perf_counter()
    size = config.embedding_batch_size
    for start in range(0, len(texts), size):
        embedder.encode([f"{tag} {t}" for t in texts[start : start + size]])  # uncached copies
    return len(texts) / (time.perf_counter() - started)


def raw_model_rows(location: str, device: str, texts: list[str], engine_batch: int) -> list[dict[str, Any]]:
    """The bare sentence-transformers model on the same texts: batch 1 (the first 256), one call per
    `engine_batch` texts in arrival order (padded to each chunk's longest, as the batcher's batches are),
    and all texts in one call at several batch sizes (sorted by length: the best case)."""
    import torch

    model = load_named_model(location, device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def row(label: str, batch: int, subset: list[str], per_call: int) -> dict[str, Any]:
        tokens = count_tokens(model, subset)
        with torch.inference_mode():  # the shape's first call picks its kernels: not timed
            model.encode(subset[: min(batch, per_call)], batch_size=batch, show_progress_bar=False)
        sync()
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(subset), per_call):
                model.encode(subset[start : start + per_call], batch_size=batch, show_progress_bar=False)
        sync()
        seconds = time.perf_counter() - started
        return {
            "call": label,
            "batch_size": batch,
            "texts": len(subset),
            "texts_per_s": round(len(subset) / seconds, 1),
            "tokens_per_s": round(tokens / seconds),
        }

    model.encode(texts[:engine_batch], batch_size=engine_batch, show_progress_bar=False)  # warm-up
    rows = [
        row("batch 1", 1, texts[:256], 1),
        row(f"per {engine_batch} texts", engine_batch, texts, engine_batch),
    ]
    for batch in sorted({64, 256, 1024} - {engine_batch}):
        rows.append(row("all texts in one call", batch, texts, len(texts)))
    best = max(rows, key=lambda r: r["tokens_per_s"])
    return [{**r, "best": r is best} for r in rows]


def vector_agreement(config: MemoryConfig, location: str, texts: list[str]) -> float:
    """Lowest cosine between the worker's stored-page vectors (its embedder: fp16 on CUDA) and the same
    model's fp32 vectors on the CPU."""
    worker_vectors = shared_embedder(config).encode(texts)
    cpu = load_named_model(location, "cpu").encode(texts, normalize_embeddings=True)
    return round(float((worker_vectors * cpu).sum(axis=1).min()), 5)


def searchable(reads: ReadClient, key: SpaceKey, write_id: str) -> bool:
    """Whether the write is searchable; False while the owner is still applying the backlog before it
    (no answer within the read timeout: the API's 503, retried)."""
    try:
        return bool(getattr(reads.ask(key, WRITE_STATUS, {"write_id": write_id}), "searchable", False))
    except ReadUnavailableError:
        return False


@dataclass
class BatchFigures:
    """The worker's embedding batches so far."""

    batches: int
    mean_batch_size: float


@contextmanager
def worker_in_thread(
    settings: QueueSettings, config: MemoryConfig, embedder: Embedder | None
) -> Iterator[Callable[[], BatchFigures]]:
    """A worker in a thread of this process (`embedder` injected, or the configured model), once it owns
    every shard; yields how to read its batch figures."""
    worker = Worker(settings, config, worker_id="bench", **({"embedder": embedder} if embedder else {}))
    worker.spaces.warm_up()
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        while len(worker.leases.owned) < settings.shard_count:
            time.sleep(0.05)

        def figures() -> BatchFigures:
            stats = shared_scheduler(config).batcher(worker.spaces.embedder()).stats()
            return BatchFigures(stats.batches, stats.mean_batch_size)

        yield figures
    finally:
        stop.set()
        thread.join(timeout=60)


@contextmanager
def worker_in_process(settings: QueueSettings, config: MemoryConfig) -> Iterator[Callable[[], BatchFigures]]:
    """The real `memoryos worker` as a process of its own, as deployed: the writers and the reader of this
    bench then share no interpreter (no GIL) with it. Batch figures come from its /metrics."""
    port = free_port()
    env = {
        **worker_env(settings.redis_url, config.data_dir, settings.redis_namespace, settings.shard_count),
        "MEMORYOS_EMBEDDING_MODEL_NAME": config.embedding_model_name,
        "MEMORYOS_EMBEDDING_DEVICE": config.embedding_device,
        "MEMORYOS_FAISS_USE_GPU": config.faiss_use_gpu,
        "MEMORYOS_LEASE_TTL_S": str(settings.lease_ttl_s),
        "MEMORYOS_WRITE_RUN": str(settings.write_run),
        "MEMORYOS_WORKER_METRICS_PORT": str(port),
    }
    worker = start_worker_process(env, "bench")
    try:
        client, keys = connect(settings), Keys(settings.redis_namespace)
        while any(client.get(keys.lease(s)) != b"bench" for s in range(settings.shard_count)):
            time.sleep(0.05)

        def figures() -> BatchFigures:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                families = text_string_to_metric_families(answer.read().decode())
            value = {sample.name: sample.value for family in families for sample in family.samples}
            batches = value.get("memoryos_embed_batches_total", 0.0)
            texts = value.get("memoryos_embed_texts_total", 0.0)
            return BatchFigures(int(batches), texts / batches if batches else 0.0)

        yield figures
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def ingest(
    settings: QueueSettings,
    config: MemoryConfig,
    users: int,
    turns: int,
    instant: bool = False,
    own_process: bool = False,
) -> dict[str, Any]:
    """`instant`: the tests' hash embedder instead of the model, so the figure is the worker's applying
    alone (Redis, the engine's transactions, the scheduler), with no model time. `own_process`: the
    worker runs as its own process rather than a thread of this one."""
    fill = exchanges(users * turns, dev_conversations())
    texts = page_texts(fill)
    raw_before = None if instant else raw_encode_rate(config, texts)
    client = connect(settings)
    keys = [SpaceKey("bench", f"user{u}", "helper") for u in range(users)]
    running = (
        worker_in_process(settings, config)
        if own_process
        else worker_in_thread(settings, config, HashEmbedder() if instant else None)
    )

    def write_all(u: int) -> None:
        queue = WriteQueue(client, settings)
        for i in range(turns):
            turn = fill[u * turns + i]
            op = plan_write([turn], max_text_chars=20_000, at=time.time(), write_id=f"u{u}t{i}")
            queue.enqueue(keys[u], op)

    with running as batch_figures:
        started = time.perf_counter()
        writers = [threading.Thread(target=write_all, args=(u,)) for u in range(users)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        reads = ReadClient(client, settings)
        for u, key in enumerate(keys):
            while not searchable(reads, key, f"u{u}t{turns - 1}"):
                time.sleep(SEARCHABLE_POLL_S)
        elapsed = time.perf_counter() - started
        batches = batch_figures()
    rate = users * turns / elapsed
    # Measured again after the ingest: on a shared machine the model's own rate drifts by tens of percent
    # between minutes, so the share is taken against the mean of the two measurements around it.
    raw_rates = None if raw_before is None else (raw_before, raw_encode_rate(config, texts, "again"))
    raw = None if raw_rates is None else sum(raw_rates) / 2
    return {
        "users": users,
        "turns_per_user": turns,
        "searchable_s": round(elapsed, 2),
        "turns_per_s": round(rate, 1),
        "write_run": settings.write_run,
        "worker": "own process" if own_process else "thread of the bench",
        "embedder": "hash (instant)" if instant else config.embedding_model_name,
        "raw_encode_texts_per_s": None if raw is None else round(raw, 1),
        "raw_encode_before_after": None if raw_rates is None else [round(r, 1) for r in raw_rates],
        "share_of_raw_encode": None if raw is None else round(rate / raw, 3),
        "mean_batch_size": round(batches.mean_batch_size, 1),
        "batches": batches.batches,
    }


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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rates", type=int, nargs="+", default=[250, 500, 1000])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="a name or a model directory")
    parser.add_argument("--raw-texts", type=int, default=512, help="texts for the raw model rows (0: none)")
    parser.add_argument("--write-run", type=int, default=64, help="writes of a space in one transaction")
    worker = parser.add_mutually_exclusive_group()  # the hash embedder can only be injected in a thread
    worker.add_argument(
        "--instant-embedder", action="store_true", help="ingest with no model: applying alone"
    )
    worker.add_argument(
        "--worker-process", action="store_true", help="ingest through a `memoryos worker` process"
    )
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
        report: dict[str, Any] = {
            "ingest": ingest(
                settings, config, args.users, args.turns, args.instant_embedder, args.worker_process
            )
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
