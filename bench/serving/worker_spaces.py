"""One worker holding many spaces (issue 14's figure): RSS within its pool budget, and cold-space reads.

`--spaces` spaces of `--pages` pages each are laid out on disk, then a real `memoryos worker` process
(MiniLM on CPU, the offline LLM) serves them from a real `redis-server`. This process asks each space one
retrieve through the queue (`OwnerCallClient`, as the API does), in random order: every first read opens a
cold space from its files. Reported: read p50/p99 over those first reads, the worker's RSS and open-space
count (its own `/metrics`) as they go, and p50 of a second pass over random spaces (open, or reopened
after the pool evicted them).

The spaces are copies of one template space filled through the engine (`bench/corpus.py`'s LoCoMo
exchanges, vectors of the real model reused for copies): encoding a million pages would take hours on
2 cores and measures nothing of opening or reading. Copies have identical contents, which changes no
cost measured here (each is its own SQLite file and index snapshot).

    python -m bench.serving.worker_spaces --spaces 10000 --pages 100 [--budget-mb 4096]
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

from bench.corpus import ReusingEmbedder, dev_conversations, exchanges
from bench.output import emit
from memoryos import MemoryConfig, Memoryos
from memoryos.embedding.shared import shared_embedder
from memoryos.space.pool import SpaceKey
from services.queue.owner_calls import OwnerCallClient
from services.queue.settings import QueueSettings
from services.spaces.calls import RETRIEVE
from tests.support.redis_server import running_redis

TENANT = "bench"
ASSISTANT = "helper"
QUESTIONS = ["What did Caroline research?", "When did Melanie paint a sunrise?", "Where did Jon travel?"]


def build_template(data_dir: Path, pages: int) -> Path:
    """One space of `pages` exchanges, consolidated as the engine does, closed; its directory."""
    config = MemoryConfig(data_dir=data_dir, tenant=TENANT, faiss_use_gpu="never")
    embedder = ReusingEmbedder(shared_embedder(config))
    with Memoryos.from_config("template", config, ASSISTANT, embedder=embedder) as memory:
        memory.add_memories(exchanges(pages, dev_conversations()))
        memory.flush()
    return config.space_dir("template", ASSISTANT)


def lay_out(template: Path, data_dir: Path, spaces: int) -> float:
    """`spaces` copies of the template under the worker's tenant; seconds taken."""
    started = time.perf_counter()
    for i in range(spaces):
        shutil.copytree(template, data_dir / TENANT / f"user{i}" / ASSISTANT)
    return time.perf_counter() - started


def start_worker(
    redis_url: str, data_dir: Path, budget_mb: int, metrics_port: int
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_REDIS_URL": redis_url,
        "MEMORYOS_WORKER_MEMORY_BUDGET_MB": str(budget_mb),
        "MEMORYOS_WORKER_METRICS_PORT": str(metrics_port),
        "MEMORYOS_WORKER_HEALTH_PORT": "0",  # not asked here; its default 9399 may be taken
        "MEMORYOS_SHARD_COUNT": "16",
    }
    command = [sys.executable, "-m", "memoryos.cli.main", "worker", "--redis-url", redis_url]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)


def worker_figures(metrics_port: int, pid: int) -> dict[str, float]:
    """The worker's RSS (from /proc) and open spaces (from its own /metrics)."""
    rss_kb = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    open_spaces = next(
        float(line.split()[1]) for line in text.splitlines() if line.startswith("memoryos_open_spaces ")
    )
    return {"rss_mb": round(rss_kb / 1024, 1), "open_spaces": open_spaces}


def read_pass(reads: OwnerCallClient, users: list[int]) -> list[float]:
    samples = []
    for n, user in enumerate(users):
        started = time.perf_counter()
        reads.ask(
            SpaceKey(TENANT, f"user{user}", ASSISTANT), RETRIEVE, {"query": QUESTIONS[n % len(QUESTIONS)]}
        )
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(samples_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(samples_ms, 99)), 2),
    }


def run(spaces: int, pages: int, budget_mb: int, workdir: Path) -> dict[str, Any]:
    data_dir = workdir / "data"
    template = build_template(workdir / "template", pages)
    layout_s = lay_out(template, data_dir, spaces)
    disk_mb = sum(p.stat().st_size for p in template.rglob("*") if p.is_file()) * spaces / 2**20
    metrics_port = 9400 + random.randrange(500)
    with running_redis(workdir / "redis") as server:
        worker = start_worker(server.url, data_dir, budget_mb, metrics_port)
        try:
            settings = QueueSettings(redis_url=server.url, shard_count=16, read_timeout_s=60)
            reads = OwnerCallClient(redis.Redis.from_url(server.url), settings)
            deadline = time.monotonic() + 180
            while True:  # the worker owns every shard and has its model loaded
                try:
                    read_pass(reads, [0])
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            order = list(range(spaces))
            random.Random(7).shuffle(order)
            cold: list[float] = []
            trace = []
            step = max(1, spaces // 10)
            for start in range(0, spaces, step):
                cold += read_pass(reads, order[start : start + step])
                trace.append({"spaces_read": start + step, **worker_figures(metrics_port, worker.pid)})
            again = read_pass(reads, random.Random(8).choices(range(spaces), k=min(1000, spaces)))
            final = worker_figures(metrics_port, worker.pid)
        finally:
            worker.terminate()
            worker.wait(60)
    return {
        "spaces": spaces,
        "pages_per_space": pages,
        "disk_mb": round(disk_mb, 1),
        "layout_s": round(layout_s, 1),
        "worker_memory_budget_mb": budget_mb,
        "first_reads_cold": _percentiles(cold),
        "second_pass_random": _percentiles(again),
        "worker_after": final,
        "trace": trace,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spaces", type=int, default=10_000)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--budget-mb", type=int, default=4096, help="MEMORYOS_WORKER_MEMORY_BUDGET_MB")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryos-bench-spaces-") as workdir:
        report = run(args.spaces, args.pages, args.budget_mb, Path(workdir))
    emit(report, args.out)


if __name__ == "__main__":
    main()
