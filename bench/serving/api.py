"""`python -m bench.serving.api`: the HTTP API's figures, embedded mode (`memoryos serve` in a subprocess, MiniLM on
CPU, offline LLM), load from this process over real HTTP (aiohttp: httpx spent ~9 ms of CPU per request
here, so at a few hundred requests/s the generator, not the server, set the latency).

- Acknowledged-write latency, open loop: writes sent at a fixed offered rate (250, 500, 1000/s) whatever
  the answers, each timed from its *scheduled* send time (so a stalled server is charged for the queue
  it causes, no coordinated omission); p50 and p99.
- Highest sustained write rate, closed loop: 64 clients each sending its next write when the previous is
  acknowledged.
- Retrieve through the API at 1k and 10k pages per space (filled through the batch route, embedded by the
  server), p50 / p99, next to the engine's own figure on the same space (in-process, after the server
  stops). Each size gets a server and data directory of its own, and every load starts once the last
  one's pages are embedded (`memoryos_queue_depth` 0; how long that took is reported), so no figure
  meets another phase's backlog.

Writes go to 64 users round-robin. The load generator shares the machine's cores with the server: on
2 cores the figures include its cost.
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.output import emit
from memoryos import MemoryConfig, Memoryos

USERS = 64
WORDS = [
    "garden",
    "river",
    "piano",
    "coffee",
    "bicycle",
    "mountain",
    "letter",
    "window",
    "market",
    "violin",
    "lantern",
    "harbor",
    "kitchen",
    "meadow",
    "novel",
    "camera",
    "ticket",
    "forest",
    "island",
    "pepper",
    "candle",
    "museum",
    "basket",
    "rocket",
    "tunnel",
    "castle",
    "pillow",
    "orchard",
]


def _text(i: int) -> str:
    pick = [WORDS[(i * k + k) % len(WORDS)] for k in (3, 5, 7, 11)]
    return f"Note {i}: I bought a {pick[0]} near the {pick[1]} and talked about the {pick[2]} and {pick[3]}."


def _turn(i: int) -> dict[str, str]:
    return {"user_input": _text(i), "agent_response": f"Noted, entry {i}."}


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_command(data_dir: Path, port: int, redis_url: str | None = None) -> list[str]:
    """`memoryos serve` on `data_dir` and `port` (with `redis_url`: the API of a Redis deployment), run by
    this interpreter."""
    return [
        sys.executable,
        "-m",
        "memoryos.cli.main",
        "--data-dir",
        str(data_dir),
        "serve",
        "--port",
        str(port),
        *(["--redis-url", redis_url] if redis_url else []),
    ]


def start_server(
    data_dir: Path, port: int, unbounded: bool = True, redis_url: str | None = None
) -> subprocess.Popen[bytes]:
    """`memoryos serve` on `data_dir` (with `redis_url`: the API of a Redis deployment), once ready. No rate
    limit; `unbounded`: no backpressure either, so latency figures measure acknowledgement alone (the soak
    and the mixed load keep the shipped bounds)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEMORYOS_OPENAI")}
    env |= {"MEMORYOS_API_RATE_LIMIT_PER_S": "0", "MEMORYOS_FAISS_USE_GPU": "never"}  # offline LLM
    if unbounded:
        env["MEMORYOS_API_MAX_PENDING_PAGES"] = "1000000"
        env["MEMORYOS_API_MAX_WRITE_LAG_S"] = "0"
    server = subprocess.Popen(serve_command(data_dir, port, redis_url), env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not become ready")


def _space(user: str) -> str:
    return f"/v1/users/{user}/assistants/bench"


async def open_loop(
    client: aiohttp.ClientSession, rate_per_s: float, duration_s: float, offset: int
) -> dict[str, Any]:
    total = int(rate_per_s * duration_s)
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    start = time.perf_counter() + 0.2

    async def one(i: int) -> None:
        nonlocal errors
        scheduled = start + i / rate_per_s
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        try:
            async with client.post(f"{_space(f'u{i % USERS}')}/memories", json=_turn(offset + i)) as response:
                await response.read()
                errors += response.status != 201
        except aiohttp.ClientError as error:
            kinds[type(error).__name__] = kinds.get(type(error).__name__, 0) + 1
            errors += 1
        latencies.append(time.perf_counter() - scheduled)

    await asyncio.gather(*(one(i) for i in range(total)))
    return {
        "offered_per_s": rate_per_s,
        "writes": total,
        "errors": errors,
        "error_kinds": kinds,
        **_percentiles(latencies),
    }


async def closed_loop(
    client: aiohttp.ClientSession, clients: int, duration_s: float, offset: int
) -> dict[str, Any]:
    latencies: list[float] = []
    deadline = time.perf_counter() + duration_s

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            async with client.post(
                f"{_space(f'u{w}')}/memories", json=_turn(offset + w * 100000 + i)
            ) as answer:
                await answer.read()
            latencies.append(time.perf_counter() - sent)
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    elapsed = time.perf_counter() - started
    return {"clients": clients, "writes_per_s": round(len(latencies) / elapsed, 1), **_percentiles(latencies)}


async def fill(client: aiohttp.ClientSession, user: str, pages: int) -> float:
    started = time.perf_counter()
    write_id = ""
    for first in range(0, pages, 256):
        turns = [_turn(i) for i in range(first, min(pages, first + 256))]
        write_id = f"fill-{user}-{first}"
        async with client.post(
            f"{_space(user)}/memories/batch", json={"turns": turns, "write_id": write_id}
        ) as response:
            response.raise_for_status()
    while not await _searchable(client, user, write_id):
        await asyncio.sleep(0.2)
    return time.perf_counter() - started


async def _searchable(client: aiohttp.ClientSession, user: str, write_id: str) -> bool:
    async with client.get(f"{_space(user)}/writes/{write_id}") as response:
        return bool((await response.json())["searchable"])


async def retrieve_latency(client: aiohttp.ClientSession, user: str, queries: int) -> dict[str, float]:
    samples = []
    for i in range(queries):
        started = time.perf_counter()
        query = {"query": f"Where did I buy the {WORDS[i % len(WORDS)]}?"}
        async with client.post(f"{_space(user)}/retrieve", json=query) as response:
            await response.read()
            response.raise_for_status()
        samples.append(time.perf_counter() - started)
    return _percentiles(samples)


def engine_retrieve_latency(data_dir: Path, user: str, queries: int) -> dict[str, float]:
    config = MemoryConfig(data_dir=data_dir, openai_api_key=None, openai_base_url=None)
    with Memoryos.from_config(user, config, "bench", create=False) as memory:
        memory.retrieve("warm up")
        samples = []
        for i in range(queries):
            started = time.perf_counter()
            memory.retrieve(f"Where did I buy the {WORDS[i % len(WORDS)]}?")
            samples.append(time.perf_counter() - started)
    return _percentiles(samples)


def _session(url: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        url, connector=aiohttp.TCPConnector(limit=256), timeout=aiohttp.ClientTimeout(total=120)
    )


async def drained(client: aiohttp.ClientSession, limit_s: float) -> float:
    """Seconds until the server reports no page waiting to be embedded (`memoryos_queue_depth` 0), so the
    next load does not meet the last one's backlog; `limit_s` at most."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        async with client.get("/metrics") as response:
            text = await response.text()
        if "\nmemoryos_queue_depth 0.0" in text:
            break
        await asyncio.sleep(0.5)
    return round(time.perf_counter() - started, 1)


async def write_loads(url: str, duration_s: float) -> dict[str, Any]:
    async with _session(url) as client:
        for user in range(USERS):  # spaces created, model warm
            async with client.post(f"{_space(f'u{user}')}/memories", json=_turn(user)) as answer:
                answer.raise_for_status()
        await drained(client, 120)
        results: dict[str, Any] = {"open_loop": []}
        for n, rate in enumerate((250, 500, 1000)):
            figures = await open_loop(client, rate, duration_s, offset=(n + 1) * 1_000_000)
            figures["embedded_after_s"] = await drained(client, 600)
            results["open_loop"].append(figures)
        results["closed_loop"] = await closed_loop(client, 64, duration_s, offset=9_000_000)
        results["closed_loop"]["embedded_after_s"] = await drained(client, 600)
    return results


async def retrieve_at(url: str, size: int, queries: int) -> dict[str, Any]:
    async with _session(url) as client:
        fill_s = await fill(client, f"r{size}", size)
        await drained(client, 600)  # consolidation's texts too
        await retrieve_latency(client, f"r{size}", 5)  # warm
        return {
            "pages": size,
            "fill_s": round(fill_s, 1),
            "api": await retrieve_latency(client, f"r{size}", queries),
        }


def serving(data_dir: Path, work: Any) -> Any:
    """`work(url)` against a fresh `memoryos serve` on `data_dir`, stopped after."""
    port = free_port()
    server = start_server(data_dir, port)
    try:
        return asyncio.run(work(f"http://127.0.0.1:{port}"))
    finally:
        server.terminate()  # a graceful stop waits for the embedding backlog: bounded here
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=10.0, help="seconds per write load")
    parser.add_argument("--sizes", default="1000,10000", help="pages per space for retrieve")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memoryos-bench-api-"))
    results = serving(root / "writes", lambda url: write_loads(url, args.duration_s))
    results["retrieve"] = []
    for size in (int(s) for s in args.sizes.split(",")):
        data_dir = root / f"retrieve-{size}"  # a server of its own: no other space's backlog in the way
        try:
            entry = serving(
                data_dir, lambda url, size=size: asyncio.wait_for(retrieve_at(url, size, args.queries), 1800)
            )
        except (aiohttp.ClientError, TimeoutError) as error:  # recorded, not lost with the figures before it
            results["retrieve"].append({"pages": size, "error": f"{type(error).__name__}: {error}"})
            continue
        entry["engine"] = engine_retrieve_latency(data_dir, f"r{size}", args.queries)
        results["retrieve"].append(entry)
    emit(results, args.out)


if __name__ == "__main__":
    main()
