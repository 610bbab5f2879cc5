"""Fault loops: a process killed at random instants while a client writes; then every acknowledged
write is counted in the stores: lost (0 expected) and applied twice (0).

- `--target worker` (default): the real `memoryos worker` SIGKILLed at random instants while a client
  writes through the Redis queue, with Redis restarted (AOF) along the way; one last worker drains.
- `--target takeover`: two workers serve the shards; each round one of them is SIGKILLed and the other
  takes its shards over (lease TTL), while a new one starts in its place.
- `--target rollout`: two workers; each round one gets SIGTERM (a Kubernetes rollout: it drains and
  releases its leases) and a new one replaces it.
- `--target api`: the embedded `memoryos serve` (no Redis: writes acknowledged by SQLite) SIGKILLed at
  random instants while a client writes over HTTP, retrying a failed write with the same write id;
  restarted each round.

A round lasts `--writes-per-round` acknowledged writes; its fault falls after a random number of them.

    python -m bench.serving.faults [--target worker|takeover|rollout|api] [--rounds 50] [--redis-restarts 3]
        [--writes-per-round 500]

CI runs a short form (`tests/integration/test_worker_process.py`: 10 worker rounds, one restart).
"""

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import redis

from bench.serving.api import free_port, start_server
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.redis_server import RedisServer, running_redis

NAMESPACE = "faults"
SHARDS = 4
SPACES = [SpaceKey("default", f"user{i}", "helper") for i in range(SHARDS)]
DRAIN_LIMIT_S = 900
"""How long a process told to stop (SIGTERM) may take: it embeds the pages it applied but did not embed
yet before it exits, minutes of work on 2 busy cores after a round of 500 writes."""


@dataclass
class FaultReport:
    rounds: int
    redis_restarts: int
    acknowledged: int
    applied_before_last_worker: int
    lost: int
    applied_twice: int
    unacknowledged_applied: int
    """Writes whose acknowledgement the client never got (Redis restarted mid-call) but that applied:
    allowed, once."""
    workers_alive_after_redis_restarts: int = 0
    """Of the Redis restarts (each under a running worker and writer), how many the worker outlived: it
    was still running when its round's SIGKILL came."""


def worker_env(
    redis_url: str, data_dir: Path, namespace: str = NAMESPACE, shards: int = SHARDS
) -> dict[str, str]:
    """A test worker's environment: small shards and lease, CPU index, metrics and health off, never a real
    LLM."""
    env = {
        **os.environ,
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_REDIS_URL": redis_url,
        "MEMORYOS_REDIS_NAMESPACE": namespace,
        "MEMORYOS_SHARD_COUNT": str(shards),
        "MEMORYOS_LEASE_TTL_S": "1.0",
        "MEMORYOS_FAISS_USE_GPU": "never",
        "MEMORYOS_WORKER_METRICS_PORT": "0",
        "MEMORYOS_WORKER_HEALTH_PORT": "0",
    }
    env.pop("MEMORYOS_OPENAI_API_KEY", None)
    env.pop("MEMORYOS_OPENAI_BASE_URL", None)
    return env


def start_worker(server: RedisServer, data_dir: Path, name: str) -> subprocess.Popen[bytes]:
    """A test `memoryos worker` process (`worker_env`), returned once it serves."""
    return start_worker_process(worker_env(server.url, data_dir), name)


def start_worker_process(env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    """A `memoryos worker` process with `env`, returned once it says it serves (its model loaded)."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "memoryos.cli.main", "worker", "--worker-id", name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if b"serving shards" not in line:
        raise RuntimeError(f"worker {name} did not start: {line!r}")
    return worker


def stored_texts(data_dir: Path) -> Counter[str]:
    """Every page's user_input over the spaces, read from their stores directly."""
    texts: Counter[str] = Counter()
    for store in data_dir.glob("*/*/*/memory.sqlite"):
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            texts.update(row[0] for row in db.execute("SELECT user_input FROM pages"))
    return texts


class Client:
    """Writes until stopped, each with its own write id; a write is acknowledged when `send` returns. A
    failed call is retried with the same write id (the engine stores it once)."""

    def __init__(self, send: Callable[[int, str], None], retry_on: tuple[type[Exception], ...]) -> None:
        self.send = send
        self.retry_on = retry_on
        self.acknowledged: list[str] = []
        self.attempted: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            text = f"write {i}"
            self.attempted.append(text)
            while not self.stop.is_set():
                try:
                    self.send(i, text)
                    self.acknowledged.append(text)
                    break
                except self.retry_on:
                    time.sleep(0.05)
            i += 1
            time.sleep(0.005)

    def wait_for(self, acknowledged: int, limit_s: float = 600) -> None:
        """Until `acknowledged` writes are acknowledged in all."""
        deadline = time.monotonic() + limit_s
        while len(self.acknowledged) < acknowledged:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.acknowledged)} of {acknowledged} writes acknowledged")
            time.sleep(0.01)


def queue_client(settings: QueueSettings) -> Client:
    """A client writing through the Redis queue, acknowledged once Redis holds the write."""
    queue = WriteQueue(connect(settings), settings)

    def send(i: int, text: str) -> None:
        op = plan_write(
            [{"user_input": text, "agent_response": "ok"}],
            max_text_chars=100,
            at=time.time(),
            write_id=f"w{i}",
        )
        queue.enqueue(SPACES[i % len(SPACES)], op)

    return Client(send, (redis.ConnectionError,))


def http_client(url: str) -> Client:
    """A client writing over HTTP, acknowledged by the API's 201."""
    http = httpx.Client(base_url=url, timeout=10)

    def send(i: int, text: str) -> None:
        key = SPACES[i % len(SPACES)]
        path = f"/v1/users/{key.user_id}/assistants/{key.assistant_id}/memories"
        body = {"user_input": text, "agent_response": "ok", "write_id": f"w{i}"}
        if http.post(path, json=body).status_code != 201:
            raise httpx.TransportError("not stored")

    return Client(send, (httpx.HTTPError,))


def run_fault_loop(
    server: RedisServer,
    data_dir: Path,
    rounds: int,
    redis_restarts: int,
    seed: int = 7,
    writes_per_round: int = 0,
) -> FaultReport:
    """SIGKILL one worker per round (`writes_per_round` 0: after 0.2-1.5 s, else after a random number
    of that round's acknowledged writes), restarting Redis `redis_restarts` times along the way, each
    time under the round's running worker and the writing client (before its SIGKILL)."""
    settings = QueueSettings(redis_url=server.url, redis_namespace=NAMESPACE, shard_count=SHARDS)
    client = queue_client(settings)
    client.thread.start()
    rng = random.Random(seed)
    restart_at = {int(rounds * (k + 1) / (redis_restarts + 1)) for k in range(redis_restarts)}
    outlived = 0
    try:
        for round_ in range(rounds):
            worker = start_worker(server, data_dir, f"w-{round_}")
            if round_ in restart_at:
                fault_after(client, rng, writes_per_round)
                server.restart()  # the worker and the client ride it out
            fault_after(client, rng, writes_per_round)
            outlived += round_ in restart_at and worker.poll() is None
            worker.kill()  # SIGKILL: mid-batch, mid-apply, mid-commit
            worker.wait()
            if writes_per_round:
                client.wait_for((round_ + 1) * writes_per_round)
    finally:
        client.stop.set()
        client.thread.join(timeout=10)
    before_last = sum(stored_texts(data_dir).values())
    drain_with_last_worker(server, data_dir, settings)
    report = count(client, data_dir, rounds, len(restart_at), before_last)
    report.workers_alive_after_redis_restarts = outlived
    return report


def fault_after(client: Client, rng: random.Random, writes_per_round: int) -> None:
    """Wait for the fault's random instant: a random number of this round's writes, or 0.2-1.5 s."""
    if writes_per_round:
        round_start = len(client.acknowledged) // writes_per_round * writes_per_round
        client.wait_for(round_start + rng.randint(1, writes_per_round))
    else:
        time.sleep(rng.uniform(0.2, 1.5))


def drain_with_last_worker(server: RedisServer, data_dir: Path, settings: QueueSettings) -> None:
    last = start_worker(server, data_dir, "w-last")
    try:
        queue = WriteQueue(connect(settings), settings)
        deadline = time.monotonic() + 300
        while queue.depth() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        last.send_signal(signal.SIGTERM)
        last.wait(timeout=DRAIN_LIMIT_S)


def count(client: Client, data_dir: Path, rounds: int, restarts: int, before_last: int) -> FaultReport:
    applied = stored_texts(data_dir)
    acknowledged = set(client.acknowledged)
    return FaultReport(
        rounds=rounds,
        redis_restarts=restarts,
        acknowledged=len(acknowledged),
        applied_before_last_worker=before_last,
        lost=sum(1 for text in acknowledged if applied[text] == 0),
        applied_twice=sum(1 for count in applied.values() if count > 1),
        unacknowledged_applied=sum(1 for text in applied if text not in acknowledged),
    )


def run_pair_loop(
    server: RedisServer, data_dir: Path, rounds: int, writes_per_round: int, stop_signal: int, seed: int = 7
) -> FaultReport:
    """Two workers serve the shards; each round one of them gets `stop_signal` (SIGKILL: the other takes
    its shards when its leases expire; SIGTERM: it drains and hands them over) and a new one replaces it."""
    settings = QueueSettings(redis_url=server.url, redis_namespace=NAMESPACE, shard_count=SHARDS)
    client = queue_client(settings)
    client.thread.start()
    rng = random.Random(seed)
    workers = [start_worker(server, data_dir, "w-a"), start_worker(server, data_dir, "w-b")]
    try:
        for round_ in range(rounds):
            fault_after(client, rng, writes_per_round)
            stopped = workers.pop(rng.randrange(2))
            stopped.send_signal(stop_signal)
            stopped.wait(timeout=DRAIN_LIMIT_S)
            workers.append(start_worker(server, data_dir, f"w-{round_}"))
            client.wait_for((round_ + 1) * writes_per_round)
    finally:
        client.stop.set()
        client.thread.join(timeout=10)
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=DRAIN_LIMIT_S)
    before_last = sum(stored_texts(data_dir).values())
    drain_with_last_worker(server, data_dir, settings)
    return count(client, data_dir, rounds, 0, before_last)


def run_api_loop(data_dir: Path, rounds: int, writes_per_round: int, seed: int = 7) -> FaultReport:
    """The embedded API SIGKILLed at a random instant of each round while a client writes over HTTP."""
    port = free_port()
    client = http_client(f"http://127.0.0.1:{port}")
    rng = random.Random(seed)
    api = start_server(data_dir, port, unbounded=False)
    client.thread.start()
    try:
        for round_ in range(rounds):
            fault_after(client, rng, writes_per_round)
            api.kill()  # SIGKILL: mid-request, mid-commit, mid-embedding
            api.wait()
            api = start_server(data_dir, port, unbounded=False)
            client.wait_for((round_ + 1) * writes_per_round)
    finally:
        client.stop.set()
        client.thread.join(timeout=20)
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=DRAIN_LIMIT_S)
    return count(client, data_dir, rounds, 0, sum(stored_texts(data_dir).values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["worker", "takeover", "rollout", "api"], default="worker")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--redis-restarts", type=int, default=3, help="--target worker only")
    parser.add_argument("--writes-per-round", type=int, default=0, help="0: a fault every 0.2-1.5 s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, running_redis(Path(workdir) / "redis") as server:
        started = time.perf_counter()
        data_dir = Path(workdir) / "data"
        if args.target == "api":
            report = run_api_loop(data_dir, args.rounds, args.writes_per_round or 500)
        elif args.target == "worker":
            report = run_fault_loop(
                server, data_dir, args.rounds, args.redis_restarts, writes_per_round=args.writes_per_round
            )
        else:
            stop_signal = signal.SIGKILL if args.target == "takeover" else signal.SIGTERM
            report = run_pair_loop(server, data_dir, args.rounds, args.writes_per_round or 500, stop_signal)
    summary = {"target": args.target, **asdict(report), "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
