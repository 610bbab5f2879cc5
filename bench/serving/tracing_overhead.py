"""Tracing's cost on the write path in Redis mode: the API's acknowledgement latency (p50/p99) and a
worker's applying rate (turns/s), with tracing off, on at 100% sampling, and on at 1%, runs interleaved.

    python -m bench.serving.tracing_overhead [--rounds 3] [--ack-seconds 8] [--clients 4] [--writes 3000]
        [--out FILE]

Every run starts its own `memoryos serve --redis-url` and worker (`bench.serving.instant_worker`: the
worker's code with the tests' hash embedder, so what is timed is the worker's own applying, not a model)
on one `redis-server`, with the mode's variables, as a deployment sets them:

- `off`: no `OTEL_*` variable; nothing is installed;
- `on-100%`: `OTEL_EXPORTER_OTLP_ENDPOINT` at a local sink (`bench.serving.otlp_sink`, its own process,
  which decodes and counts what it receives), the default sampler: every write traced;
- `on-1%`: the same, the API sampling new traces with `parentbased_traceidratio` 0.01; the worker keeps
  the default (parent-based), so it records the writes the API sampled.

Ack: `--clients` threads each `POST .../memories` in a closed loop for `--ack-seconds`; the latency of
each, from sending to the 201 (Redis holds the write), while the worker applies them, as deployed.
Applying: the worker is stopped (SIGSTOP), `--writes` single-turn writes of 50 users are queued straight
into the streams by the API's own script, each with the `trace` field the API writes in that mode (none
off; a sampled context at 100%; one in a hundred sampled at 1%), and the clock runs from SIGCONT until the
streams are empty. On a shared machine the wall-clock figures move with the other work; the CPU time
of the processes does much less: the API's CPU per acknowledged write over the ack phase
(`api_cpu_ms_per_ack`), the worker's (its process and children, from /proc) per turn applied
(`worker_cpu_ms_per_turn`). The spans the sink received in each run are reported with it; the medians of
each mode's runs come first.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.output import emit
from bench.serving.api import serve_command
from bench.serving.ingest import cpu_seconds, free_ports, worker_processes
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.redis_server import running_redis

MODES = ("off", "on-100%", "on-1%")
SAMPLED_SHARE = {"off": 0.0, "on-100%": 1.0, "on-1%": 0.01}
SHARDS = 16
USERS = 50
PIPELINE_WRITES = 500
READY_TIMEOUT_S = 60.0


def tracing_variables(mode: str, sink_url: str) -> tuple[dict[str, str], dict[str, str]]:
    """The API's and the worker's tracing variables in `mode`."""
    if mode == "off":
        return {}, {}
    common = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink_url}
    if mode == "on-1%":
        api = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
        return common | api, common
    return common, common


def base_env(settings: QueueSettings, data_dir: Path) -> dict[str, str]:
    """The processes' environment: this one's, without any tracing or MemoryOS setting of the machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEMORYOS_", "OPENAI_"))}
    return env | {
        "MEMORYOS_REDIS_URL": settings.redis_url,
        "MEMORYOS_REDIS_NAMESPACE": settings.redis_namespace,
        "MEMORYOS_SHARD_COUNT": str(settings.shard_count),
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_FAISS_USE_GPU": "never",
        "MEMORYOS_WORKER_HEALTH_PORT": "0",
        "MEMORYOS_API_PRELOAD_MODEL": "false",
        "MEMORYOS_API_MAX_WRITE_LAG_S": "0",  # no 429 for lag: every write is timed
        "MEMORYOS_API_RATE_LIMIT_PER_S": "0",
        "PYTHONUNBUFFERED": "1",
    }


@contextmanager
def otlp_sink() -> Iterator[str]:
    """`bench.serving.otlp_sink` on a free port; its URL."""
    port = free_ports(1)
    sink = subprocess.Popen(
        [sys.executable, "-m", "bench.serving.otlp_sink", str(port)], stdout=subprocess.PIPE
    )
    try:
        assert sink.stdout is not None and b"serving" in sink.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        sink.terminate()
        sink.wait(timeout=30)


def spans_received(sink_url: str) -> int:
    return int(httpx.get(f"{sink_url}/count", timeout=10).text)


@contextmanager
def served_api(env: dict[str, str], data_dir: Path, log: Path) -> Iterator[tuple[str, int]]:
    """`memoryos serve --redis-url` with `env`; its URL and pid once ready."""
    port = free_ports(1)
    with log.open("wb") as log_file:
        api = subprocess.Popen(
            serve_command(data_dir, port, env["MEMORYOS_REDIS_URL"]),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if api.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API did not become ready; its log: {log}")
            time.sleep(0.1)
        yield url, api.pid
    finally:
        api.terminate()
        api.wait(timeout=30)


def ack_latencies(url: str, clients: int, seconds: float, tag: str) -> tuple[list[float], int]:
    """Closed loop: each client writes one exchange after another for `seconds`; each 201's latency
    (ms), and how many answers were not 201."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    refused = [0] * clients
    end = time.monotonic() + seconds

    def client(index: int) -> None:
        with httpx.Client(timeout=30) as http:
            n = 0
            while time.monotonic() < end:
                space = f"{url}/v1/users/{tag}-c{index}-u{n % 8}/assistants/bot/memories"
                body = {"user_input": f"turn {n} of client {index}", "agent_response": "noted"}
                began = time.perf_counter()
                answer = http.post(space, json=body)
                elapsed = (time.perf_counter() - began) * 1000
                if answer.status_code == 201:
                    latencies[index].append(elapsed)
                else:
                    refused[index] += 1
                n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [ms for per_client in latencies for ms in per_client], sum(refused)


def carrier(rng: random.Random, sampled_share: float) -> str | None:
    """The `trace` field the API writes in a mode sampling `sampled_share` of new traces (None: off)."""
    if not sampled_share:
        return None
    flags = "01" if rng.random() < sampled_share else "00"
    parent = f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-{flags}"
    return json.dumps({"traceparent": parent}, separators=(",", ":"))


def queue_writes(settings: QueueSettings, writes: int, sampled_share: float, tag: str) -> None:
    """`writes` single-turn writes of `USERS` users, each user's in order, queued as the API queues them."""
    client = connect(settings)
    queue = WriteQueue(client, settings.model_copy(update={"queue_max_entries": 10**9}))
    rng = random.Random(7)
    pipe = client.pipeline(transaction=False)
    for n in range(writes):
        key = SpaceKey("default", f"{tag}-u{n % USERS}", "bot")
        op = plan_write(
            [{"user_input": f"queued turn {n}", "agent_response": "noted"}],
            max_text_chars=200,
            at=time.time(),
        )
        queue.enqueue_on(pipe, key, op, trace=carrier(rng, sampled_share))
        if len(pipe) >= PIPELINE_WRITES:
            pipe.execute()
    pipe.execute()


def drained_after(settings: QueueSettings, limit_s: float = 600.0) -> float:
    """Seconds until every shard's stream is empty (applied entries are deleted)."""
    client, keys = connect(settings), Keys(settings.redis_namespace)
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        pipe = client.pipeline(transaction=False)
        for shard in range(settings.shard_count):
            pipe.xlen(keys.writes(shard))
        if sum(int(n) for n in pipe.execute()) == 0:
            return time.monotonic() - began
        time.sleep(0.01)
    raise RuntimeError(f"the worker did not drain the streams in {limit_s} s")


def one_run(
    mode: str, run: int, settings: QueueSettings, root: Path, sink_url: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One mode's ack and applying figures, on a fresh API and worker."""
    api_vars, worker_vars = tracing_variables(mode, sink_url)
    data_dir = root / f"run{run}"
    env = base_env(settings, data_dir / "worker")
    spans_before = spans_received(sink_url)
    worker_env = env | worker_vars | {"MEMORYOS_WORKER_METRICS_PORT": str(free_ports(1))}
    log = root / f"run{run}-worker.log"
    with worker_processes(settings, worker_env, 1, True, log) as worker:
        with served_api(env | api_vars, data_dir / "api", root / f"run{run}-api.log") as (url, api_pid):
            api_cpu_s = cpu_seconds([api_pid])
            latencies, refused = ack_latencies(url, args.clients, args.ack_seconds, f"r{run}")
            api_cpu_s = cpu_seconds([api_pid]) - api_cpu_s
        drained_after(settings)
        worker.signal(signal.SIGSTOP)
        try:
            queue_writes(settings, args.writes, SAMPLED_SHARE[mode], f"q{run}")
        finally:
            worker_cpu_s = worker.cpu_seconds()
            worker.signal(signal.SIGCONT)
        applied_s = drained_after(settings)
        worker_cpu_s = worker.cpu_seconds() - worker_cpu_s
    return {
        "mode": mode,
        "acks": len(latencies),
        "refused": refused,
        "ack_p50_ms": round(float(np.percentile(latencies, 50)), 2),
        "ack_p99_ms": round(float(np.percentile(latencies, 99)), 2),
        "api_cpu_ms_per_ack": round(api_cpu_s * 1000 / len(latencies), 3),
        "applied_turns": args.writes,
        "applying_turns_per_s": round(args.writes / applied_s, 1),
        "worker_cpu_ms_per_turn": round(worker_cpu_s * 1000 / args.writes, 3),
        "spans_exported": spans_received(sink_url) - spans_before,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mode, the median over its runs of each figure."""
    found: dict[str, dict[str, float]] = {}
    for mode in MODES:
        mine = [run for run in runs if run["mode"] == mode]
        found[mode] = {
            name: round(float(np.median([run[name] for run in mine])), 2)
            for name in (
                "ack_p50_ms",
                "ack_p99_ms",
                "api_cpu_ms_per_ack",
                "applying_turns_per_s",
                "worker_cpu_ms_per_turn",
            )
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode, interleaved")
    parser.add_argument("--ack-seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--writes", type=int, default=3000, help="writes queued for the applying figure")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    for flag in ("rounds", "clients", "writes"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1")
    if args.ack_seconds <= 0:
        parser.error("--ack-seconds must be above 0")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memoryos-tracing-bench-") as tmp, otlp_sink() as sink_url:
        root = Path(tmp)
        with running_redis(root / "redis") as redis_server:
            settings = QueueSettings(
                redis_url=redis_server.url, redis_namespace="tracing", shard_count=SHARDS
            )
            for round_ in range(args.rounds):
                for mode in MODES:
                    run = one_run(mode, len(runs), settings, root, sink_url, args)
                    print(json.dumps({"round": round_, **run}), file=sys.stderr, flush=True)
                    runs.append(run)
    report = {
        "bench": "tracing_overhead",
        "clients": args.clients,
        "ack_seconds": args.ack_seconds,
        "writes": args.writes,
        "median_by_mode": summary(runs),
        "runs": runs,
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
