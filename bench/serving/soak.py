"""The soak: many users writing and reading at once against `memoryos serve` for ten minutes or more.

`--users` users each write `--turns` exchanges (turn-major, so every user advances together) at an
offered `--write-rate`, while reads (`/retrieve` of a user already written to) go at `--read-rate`; both
open loop, from one asyncio client (aiohttp). A 429/503 is backpressure: the write waits its
`Retry-After` and is sent again with the same write id (counted as a retry, not an error). Every
`--sample-s` seconds the window's requests/s, write and read p50/p99, the server's queue depth and write
lag (its `/metrics`) and RSS (`/proc`) are recorded. After the last write: every user's page count must
be `--turns` (none lost, none twice), and RSS growth over the soak's second half is reported.

    python -m bench.serving.soak --users 1000 --turns 50 --write-rate 40 --read-rate 10 --min-duration-s 600
"""

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench.corpus import dev_conversations, exchanges
from bench.output import emit
from bench.serving.api import _space, free_port, start_server


@dataclass
class Window:
    """What one sampling window saw."""

    writes_ms: list[float] = field(default_factory=list)
    reads_ms: list[float] = field(default_factory=list)
    retries: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    """Errors by kind: "write 500", "read ServerDisconnectedError"..."""


def _p(samples: list[float], q: float) -> float | None:
    return round(float(np.percentile(samples, q)), 1) if samples else None


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def _gauges(client: aiohttp.ClientSession) -> dict[str, float]:
    async with client.get("/metrics") as response:
        text = await response.text()
    names = ("memoryos_queue_depth", "memoryos_write_lag_seconds", "memoryos_open_spaces")
    return {
        name: float(line.split()[1])
        for line in text.splitlines()
        for name in names
        if line.startswith(name + " ")
    }


class Soak:
    def __init__(self, client: aiohttp.ClientSession, users: int, turns: int) -> None:
        self.client = client
        self.turns = turns
        self.texts = exchanges(users * turns, dev_conversations())
        self.order = [(user, turn) for turn in range(turns) for user in range(users)]
        self.window = Window()
        self.written_users: list[int] = []
        self.total_errors: Counter[str] = Counter()
        self.total_retries = 0

    async def write(self, n: int) -> None:
        user, turn = self.order[n]
        body = {**self.texts[user * self.turns + turn], "write_id": f"soak-{user}-{turn}"}
        started = time.perf_counter()
        while True:
            try:
                async with self.client.post(f"{_space(f'soak{user}')}/memories", json=body) as response:
                    await response.read()
                    if response.status in (429, 503):
                        self.window.retries += 1
                        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                        continue
                    if response.status != 201:
                        self.window.errors[f"write {response.status}"] += 1
                    break
            except (aiohttp.ClientError, TimeoutError) as error:
                self.window.errors[f"write {type(error).__name__}"] += 1
                break
        self.window.writes_ms.append((time.perf_counter() - started) * 1000)
        if turn == 0:
            self.written_users.append(user)

    async def read(self, rng: random.Random) -> None:
        if not self.written_users:
            return
        user = rng.choice(self.written_users)
        query = {
            "query": rng.choice(["What did I say about my family?", "When was the trip?", "What do I like?"])
        }
        started = time.perf_counter()
        try:
            async with self.client.post(f"{_space(f'soak{user}')}/retrieve", json=query) as response:
                await response.read()
                if response.status != 200:
                    self.window.errors[f"read {response.status}"] += 1
        except (aiohttp.ClientError, TimeoutError) as error:
            self.window.errors[f"read {type(error).__name__}"] += 1
        self.window.reads_ms.append((time.perf_counter() - started) * 1000)


async def _paced(rate: float, count: int | None, stop: asyncio.Event, make: Any) -> None:
    """Start `make(i)` at `rate` per second (open loop), `count` times or until `stop`."""
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    i = 0
    while (count is None or i < count) and not stop.is_set():
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        task = asyncio.create_task(make(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    if tasks:
        await asyncio.gather(*tasks)


async def soak(url: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=512)
    async with aiohttp.ClientSession(
        url, connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as client:
        run = Soak(client, args.users, args.turns)
        rng = random.Random(11)
        stop_reads = asyncio.Event()
        samples: list[dict[str, Any]] = []
        started = time.perf_counter()

        async def sampler() -> None:
            while True:
                await asyncio.sleep(args.sample_s)
                window, run.window = run.window, Window()
                run.total_errors.update(window.errors)
                run.total_retries += window.retries
                samples.append(
                    {
                        "t_s": round(time.perf_counter() - started),
                        "requests_per_s": round(
                            (len(window.writes_ms) + len(window.reads_ms)) / args.sample_s, 1
                        ),
                        "write_p50_ms": _p(window.writes_ms, 50),
                        "write_p99_ms": _p(window.writes_ms, 99),
                        "read_p50_ms": _p(window.reads_ms, 50),
                        "read_p99_ms": _p(window.reads_ms, 99),
                        "retries": window.retries,
                        "errors": sum(window.errors.values()),
                        "error_kinds": dict(window.errors),
                        "rss_mb": _rss_mb(pid),
                        **(await _gauges(client)),
                    }
                )
                if args.out:  # as it goes: a soak cut short still leaves its windows
                    with args.out.with_suffix(".samples.jsonl").open("a") as trace:
                        trace.write(json.dumps(samples[-1]) + "\n")

        sampling = asyncio.create_task(sampler())
        reads = asyncio.create_task(_paced(args.read_rate, None, stop_reads, lambda i: run.read(rng)))
        await _paced(args.write_rate, len(run.order), asyncio.Event(), run.write)
        while time.perf_counter() - started < args.min_duration_s:
            await asyncio.sleep(1)
        stop_reads.set()
        await reads
        await asyncio.sleep(args.sample_s)  # the last window sampled
        sampling.cancel()
        elapsed = time.perf_counter() - started
        counts = []
        for user in range(args.users):
            async with client.get(f"{_space(f'soak{user}')}/memories", params={"limit": 1}) as response:
                counts.append(int((await response.json())["total"]))
    half = [s["rss_mb"] for s in samples if s["t_s"] >= elapsed / 2]
    all_writes = len(run.order)
    return {
        "users": args.users,
        "turns": args.turns,
        "writes": all_writes,
        "duration_s": round(elapsed),
        "requests_per_s": round(sum(s["requests_per_s"] for s in samples) / max(1, len(samples)), 1),
        "errors": sum(run.total_errors.values()),
        "error_kinds": dict(run.total_errors),
        "backpressure_retries": run.total_retries,
        "users_with_all_turns": sum(1 for c in counts if c == args.turns),
        "pages_stored": sum(counts),
        "rss_second_half_growth_pct": round(100 * (half[-1] - half[0]) / half[0], 2)
        if len(half) > 1
        else None,
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--write-rate", type=float, default=40.0)
    parser.add_argument("--read-rate", type=float, default=10.0)
    parser.add_argument("--min-duration-s", type=float, default=600.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="memoryos-soak-"))
    port = free_port()
    server = start_server(data_dir, port, unbounded=False)
    try:
        report = asyncio.run(soak(f"http://127.0.0.1:{port}", server.pid, args))
    finally:
        server.terminate()
        server.wait(120)
    emit(report, args.out)


if __name__ == "__main__":
    main()
