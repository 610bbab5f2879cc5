"""Reads under load: many clients writing and reading their own writes at once, both modes.

    python -m bench.serving.mixed_load [--mode embedded|redis|both] [--clients 64] [--seconds 60]
        [--writes-per-read 4] [--noisy-writers 16] [--max-vector-wait S] [--start-s 5] [--out FILE]

Each client is one user: it writes `--writes-per-read` turns, then retrieves with `wait_for_write_ids`
naming its last accepted write (read-your-writes), and again. A write refused with 429 is retried after
its Retry-After, as a well-behaved client does; the refusals are counted apart from errors. With
`--noisy-writers N`, a second phase adds one more user written flat out by N tasks (no reads, retrying
429s after 50 ms), and reports the other users' read latency beside the quiet phase's.

What it reports per mode and phase: requests/s, accepted writes/s, writes refused (429) and their share,
reads refused (any 4xx/5xx on a retrieve: the target is none), reads answered before all their pages
had vectors (their bounded wait, the server's `read_vector_wait_s`, ended first: `pages_without_vectors`)
and their share, other 5xx, retrieve p50/p99 (seconds, answered reads) — over the whole phase, and again
leaving out the reads sent in its first `--start-s` seconds (`*_after_start`: every client is a new user
whose first writes and first read arrive in the same instant, a burst the rest of the phase does not
see; both are reported, the whole phase's first) — write p50/p99. The embedded mode is `memoryos serve` with its shipped bounds; the Redis
mode is a `redis-server`, `memoryos serve --redis-url` and one `memoryos worker`. Both embed with the
bundled MiniLM on the CPU and the offline LLM. Figures go to docs/reliability.md ("Reads under load").
"""

import argparse
import asyncio
import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.output import emit
from bench.serving.api import free_port, start_server
from bench.serving.faults import start_worker_process, worker_env
from services.queue.settings import QueueSettings
from tests.support.redis_server import running_redis

NOISY_RETRY_S = 0.05
"""How soon a noisy writer retries a refused write: flat out, barely honouring Retry-After."""


@dataclass
class Tally:
    """What one phase's clients saw."""

    write_s: list[float] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    read_at: list[float] = field(default_factory=list)
    """When each answered read was sent, in seconds since the phase began (`read_s` in the same order)."""
    began: float = 0.0
    """`time.perf_counter()` when the phase's clients started."""
    writes_refused: int = 0
    reads_refused: int = 0
    reads_without_vectors: int = 0
    """Answered reads whose bounded wait for vectors ended first (`pages_without_vectors` > 0)."""
    other_5xx: int = 0
    other_4xx: int = 0
    requests: int = 0

    def count(self, status: int, is_read: bool) -> None:
        self.requests += 1
        if status == 429 and not is_read:
            self.writes_refused += 1
        elif is_read and status >= 400:
            self.reads_refused += 1
        elif status >= 500:
            self.other_5xx += 1
        elif status >= 400:
            self.other_4xx += 1


def percentile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def summary(tally: Tally, seconds: float, start_s: float) -> dict[str, Any]:
    writes_tried = len(tally.write_s) + tally.writes_refused
    after_start = [s for s, at in zip(tally.read_s, tally.read_at, strict=True) if at >= start_s]
    return {
        "requests_per_s": round(tally.requests / seconds, 1),
        "accepted_writes_per_s": round(len(tally.write_s) / seconds, 1),
        "writes_refused_429": tally.writes_refused,
        "refused_share": round(tally.writes_refused / writes_tried, 3) if writes_tried else 0.0,
        "reads_answered": len(tally.read_s),
        "reads_refused": tally.reads_refused,
        "reads_without_vectors": tally.reads_without_vectors,
        "reads_without_vectors_share": (
            round(tally.reads_without_vectors / len(tally.read_s), 3) if tally.read_s else 0.0
        ),
        "other_5xx": tally.other_5xx,
        "other_4xx": tally.other_4xx,
        "retrieve_p50_s": percentile(tally.read_s, 0.50),
        "retrieve_p99_s": percentile(tally.read_s, 0.99),
        "retrieve_p50_s_after_start": percentile(after_start, 0.50),
        "retrieve_p99_s_after_start": percentile(after_start, 0.99),
        "start_s": start_s,
        "write_p50_s": percentile(tally.write_s, 0.50),
        "write_p99_s": percentile(tally.write_s, 0.99),
    }


def turn(user: str, n: int) -> dict[str, str]:
    return {
        "user_input": f"{user} note {n}: I walked to the market and bought {n % 7 + 2} lemons for a tart.",
        "agent_response": f"Lovely, lemon tart number {n}.",
        "write_id": f"{user}-{n}",
    }


async def write(session: aiohttp.ClientSession, user: str, n: int, tally: Tally, noisy: bool) -> bool:
    """One write, retried after each 429 until accepted; whether it was (False: an error)."""
    while True:
        started = time.perf_counter()
        async with session.post(f"/v1/users/{user}/assistants/bench/memories", json=turn(user, n)) as reply:
            await reply.read()
            tally.count(reply.status, is_read=False)
            if reply.status in (200, 201, 202):
                tally.write_s.append(time.perf_counter() - started)
                return True
            if reply.status != 429:
                return False
            await asyncio.sleep(NOISY_RETRY_S if noisy else float(reply.headers.get("Retry-After", "1")))


async def read(
    session: aiohttp.ClientSession, user: str, last_write: str, vector_wait_s: float | None, tally: Tally
) -> None:
    body: dict[str, Any] = {
        "query": "What did I buy at the market?",
        "wait_for_write_ids": [last_write],
        "wait_timeout_s": 30,
    }
    if vector_wait_s is not None:
        body["max_vector_wait_s"] = vector_wait_s
    started = time.perf_counter()
    async with session.post(f"/v1/users/{user}/assistants/bench/retrieve", json=body) as reply:
        answer = await reply.read()
        tally.count(reply.status, is_read=True)
        if reply.status == 200:
            tally.read_s.append(time.perf_counter() - started)
            tally.read_at.append(started - tally.began)
            if json.loads(answer)["pages_without_vectors"]:
                tally.reads_without_vectors += 1


async def client(
    session: aiohttp.ClientSession, user: str, args: argparse.Namespace, until: float, tally: Tally
) -> None:
    n = 0
    while time.monotonic() < until:
        last = None
        for _ in range(args.writes_per_read):
            if await write(session, user, n, tally, noisy=False):
                last = f"{user}-{n}"
            n += 1
        if last is not None and time.monotonic() < until:
            await read(session, user, last, args.max_vector_wait, tally)


async def noisy_writer(
    session: aiohttp.ClientSession, user: str, first: int, until: float, tally: Tally
) -> None:
    n = first
    while time.monotonic() < until:
        await write(session, user, n, tally, noisy=True)
        n += 1_000


async def phase(url: str, args: argparse.Namespace, noisy: int, tag: str) -> dict[str, Any]:
    quiet, loud = Tally(), Tally()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        url, connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:
        until = time.monotonic() + args.seconds
        quiet.began = loud.began = time.perf_counter()
        tasks = [client(session, f"{tag}u{i}", args, until, quiet) for i in range(args.clients)]
        tasks += [noisy_writer(session, f"{tag}noisy", i, until, loud) for i in range(noisy)]
        await asyncio.gather(*tasks)
    result = {"clients": summary(quiet, args.seconds, args.start_s)}
    if noisy:
        result["noisy_tenant"] = summary(loud, args.seconds, args.start_s)
    return result


@contextlib.contextmanager
def deployment(mode: str, data_dir: Path) -> Iterator[str]:
    """The API's URL for `mode`, with what it needs running; everything stopped after."""
    with contextlib.ExitStack() as stack:
        redis_url = None
        if mode == "redis":
            redis_url = stack.enter_context(running_redis(data_dir / "redis")).url
            shipped = QueueSettings(redis_url=redis_url)  # the shipped namespace, shards and lease
            env = worker_env(redis_url, data_dir / "spaces", shipped.redis_namespace, shipped.shard_count)
            env.pop("MEMORYOS_LEASE_TTL_S")
            worker = start_worker_process(env, "mixed-load")
            stack.callback(stop, worker)
        port = free_port()
        stack.callback(stop, start_server(data_dir / "spaces", port, unbounded=False, redis_url=redis_url))
        yield f"http://127.0.0.1:{port}"


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch, deployment(mode, Path(scratch)) as url:
        report: dict[str, Any] = {"mode": mode, "quiet": asyncio.run(phase(url, args, 0, "q"))}
        if args.noisy_writers:
            report["noisy_neighbour"] = asyncio.run(phase(url, args, args.noisy_writers, "n"))
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["embedded", "redis", "both"], default="both")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--writes-per-read", type=int, default=4)
    parser.add_argument("--noisy-writers", type=int, default=16, help="0: no noisy-neighbour phase")
    parser.add_argument(
        "--max-vector-wait",
        type=float,
        default=None,
        help="each read's max_vector_wait_s (default: the server's read_vector_wait_s; 30: wait for all)",
    )
    parser.add_argument(
        "--start-s",
        type=float,
        default=5.0,
        help="a second retrieve p50/p99 leaves out reads sent in a phase's first seconds, when every "
        "client's first writes (new users) and first read arrive together",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    modes = ["embedded", "redis"] if args.mode == "both" else [args.mode]
    emit(
        {"settings": vars(args) | {"out": str(args.out)}, "runs": [run(mode, args) for mode in modes]},
        args.out,
    )


if __name__ == "__main__":
    main()
