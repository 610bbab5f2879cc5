"""MCP server figures (issue 15): `python -m bench.serving.mcp [--starts 5] [--calls 50]`.

- stdio, start to `initialize`: wall time from spawning `memoryos mcp` (the console script beside this
  interpreter, else `python -m memoryos.cli.main`) to the handshake's answer, as Claude Desktop sees it;
  `--starts` new processes, median and max. The model is not loaded by then.
- stdio, first tool call: the first `add_memory` of a new process, which loads the embedding model.
- stdio and streamable HTTP, round trip of `add_memory` and `retrieve_memory`: `--calls` calls each on
  one warm session after one untimed call, p50 and p95. Adds go to one user (short-term memory fills and
  is consolidated along the way, as in use); retrieves ask varied questions of that user.
- HTTP: the served app (`create_served_app`, MCP mounted at /mcp, one API key) under uvicorn on a loopback port in
  this process; the handshake time is a new session on the running server, not a process start.

Every `MEMORYOS_*` variable but the model cache is cleared: the embedded default (bundled MiniLM, offline
LLM) on a temporary data directory. Prints a Markdown table and the JSON figures.
"""

import argparse
import functools
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx2
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

USER = "bench"
API_KEY = "bench-key"
FIRST_TURN = {"user_input": "I moved to Lisbon.", "agent_response": "Exciting!"}


class ToolCaller(Protocol):
    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any: ...


def command() -> list[str]:
    script = Path(sys.executable).parent / "memoryos"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "memoryos.cli.main"]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYOS_")}
    if "MEMORYOS_MODEL_CACHE_DIR" in os.environ:
        env["MEMORYOS_MODEL_CACHE_DIR"] = os.environ["MEMORYOS_MODEL_CACHE_DIR"]
    return env


def stdio_client(data_dir: Path) -> Client:
    args = [*command()[1:], "--data-dir", str(data_dir), "mcp", "--user", USER]
    return Client(StdioServerParameters(command=command()[0], args=args, env=clean_env()), mode="legacy")


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
    }


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    result = await call()
    if getattr(result, "is_error", False):
        raise RuntimeError(f"tool call failed: {result.content}")
    return time.perf_counter() - started


async def round_trips(client: ToolCaller, calls: int) -> dict[str, dict[str, float]]:
    """p50/p95 of `calls` adds, then `calls` retrieves, after one untimed call of each."""

    def add(i: int) -> Callable[[], Awaitable[Any]]:
        turn = {"user_input": f"Day {i}: I practised piano and cooked dish {i}.", "agent_response": "Lovely!"}
        return lambda: client.call_tool("add_memory", turn)

    def retrieve(i: int) -> Callable[[], Awaitable[Any]]:
        return lambda: client.call_tool("retrieve_memory", {"query": f"What did I cook on day {i}?"})

    await add(-1)()
    await retrieve(-1)()
    adds = [await timed(add(i)) for i in range(calls)]
    retrieves = [await timed(retrieve(i)) for i in range(calls)]
    return {"add_memory": percentiles(adds), "retrieve_memory": percentiles(retrieves)}


async def bench_stdio(starts: int, calls: int) -> dict[str, Any]:
    initialize_s: list[float] = []
    first_add_s: list[float] = []
    for _ in range(starts):
        with tempfile.TemporaryDirectory(prefix="memoryos-bench-mcp-") as data_dir:
            started = time.perf_counter()
            async with stdio_client(Path(data_dir)) as client:
                initialize_s.append(time.perf_counter() - started)
                first_add_s.append(await timed(functools.partial(client.call_tool, "add_memory", FIRST_TURN)))
    with tempfile.TemporaryDirectory(prefix="memoryos-bench-mcp-") as data_dir:
        async with stdio_client(Path(data_dir)) as client:
            trips = await round_trips(client, calls)
    return {
        "initialize_ms": {
            "median": round(1000 * statistics.median(initialize_s), 1),
            "max": round(1000 * max(initialize_s), 1),
        },
        "first_add_ms": {
            "median": round(1000 * statistics.median(first_add_s), 1),
            "max": round(1000 * max(first_add_s), 1),
        },
        **trips,
    }


def bench_http(calls: int) -> dict[str, Any]:
    from memoryos import MemoryConfig
    from services.api.settings import ApiSettings
    from services.serve import create_served_app

    with tempfile.TemporaryDirectory(prefix="memoryos-bench-mcp-") as data_dir:
        config = MemoryConfig(data_dir=Path(data_dir), openai_api_key=None, openai_base_url=None)
        app = create_served_app(ApiSettings(keys={API_KEY: "bench"}, port=0), config)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            return anyio.run(_http_session, url, calls)
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()


async def _http_session(url: str, calls: int) -> dict[str, Any]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    started = time.perf_counter()
    async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        initialize_ms = round(1000 * (time.perf_counter() - started), 1)
        trips = await round_trips(ScopedClient(client), calls)
    return {"initialize_ms": {"median": initialize_ms, "max": initialize_ms}, **trips}


class ScopedClient:
    """Over HTTP a call names its user (there is no server default): add it to every call."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self.client.call_tool(name, {**arguments, "user_id": USER})


def markdown(results: dict[str, Any]) -> str:
    rows = [
        "| transport | initialize (median / max) | first add (model load) | add p50 / p95 | retrieve p50 / p95 |"
    ]
    rows.append("|---|---|---|---|---|")
    for transport, figures in results["transports"].items():
        first = figures.get("first_add_ms")
        rows.append(
            f"| {transport} | {figures['initialize_ms']['median']} / {figures['initialize_ms']['max']} ms | "
            + (f"{first['median']} ms |" if first else "— |")
            + f" {figures['add_memory']['p50_ms']} / {figures['add_memory']['p95_ms']} ms |"
            f" {figures['retrieve_memory']['p50_ms']} / {figures['retrieve_memory']['p95_ms']} ms |"
        )
    return f"{results['machine']}; {results['calls']} calls each\n\n" + "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--starts", type=int, default=5, help="stdio processes started for the handshake time"
    )
    parser.add_argument("--calls", type=int, default=50, help="timed calls of each tool per transport")
    args = parser.parse_args()
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "calls": args.calls,
        "transports": {
            "stdio": anyio.run(bench_stdio, args.starts, args.calls),
            "streamable HTTP": bench_http(args.calls),
        },
    }
    print(markdown(results))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
