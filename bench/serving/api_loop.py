"""`python -m bench.serving.api_loop`: the event loop's CPU time per acknowledged write, embedded mode.

On 2 cores the API's event loop bounds the write rate (docs/api.md): every request's parsing, routing,
validation and hand-off runs on that one thread, under the GIL. This measures that cost alone: the real
app from `create_app` (the default engine: MiniLM, offline LLM, its scheduler embedding in the background,
as `memoryos serve` runs it), called in-process through ASGI by `--clients` concurrent writers to 64
users, with the loop thread's CPU time (`time.thread_time`) divided by the writes acknowledged. No HTTP
server or client shares the measurement, and CPU time, unlike latency, moves little with the machine's
other load, so figures from different moments compare. uvicorn's HTTP parsing and the socket come on top
(about 0.1 ms per request here: the bare FastAPI app through uvicorn against in-process).
"""

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.output import emit
from memoryos import MemoryConfig
from services.api.lifespan import lifespan
from services.api.main import create_app
from services.api.settings import ApiSettings

USERS = 64


def _request(path: str, body: bytes) -> tuple[dict[str, Any], Any]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"bench"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "state": {},
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return scope, receive


async def _writes(app: Any, clients: int, writes: int, first: int, statuses: dict[int, int]) -> None:
    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] = statuses.get(message["status"], 0) + 1

    async def client(c: int) -> None:
        for i in range(first + c, first + writes, clients):
            body = json.dumps(
                {"user_input": f"Entry {i}: the garden needs water.", "agent_response": f"Noted {i}."}
            )
            scope, receive = _request(f"/v1/users/u{i % USERS}/assistants/bench/memories", body.encode())
            await app(scope, receive, send)

    await asyncio.gather(*(client(c) for c in range(clients)))


async def measure(clients: int, writes: int, rounds: int) -> dict[str, Any]:
    settings = ApiSettings(rate_limit_per_s=0, max_pending_pages=10**7)
    with tempfile.TemporaryDirectory() as data:
        app = create_app(settings, MemoryConfig(data_dir=Path(data)))
        statuses: dict[int, int] = {}
        per_write_us: list[float] = []
        async with lifespan(app):
            await _writes(app, clients, clients * 20, 0, statuses)  # warm: spaces open, code paths hot
            for r in range(rounds):
                cpu, wall = time.thread_time(), time.perf_counter()
                await _writes(app, clients, writes, (r + 1) * writes, statuses)
                per_write_us.append((time.thread_time() - cpu) / writes * 1e6)
                print(
                    f"round {r + 1}: {per_write_us[-1]:.0f} µs of loop CPU per write, "
                    f"{writes / (time.perf_counter() - wall):.0f} writes/s",
                    flush=True,
                )
    return {
        "clients": clients,
        "writes_per_round": writes,
        "loop_cpu_us_per_write": {
            "min": round(min(per_write_us)),
            "median": round(sorted(per_write_us)[len(per_write_us) // 2]),
        },
        "statuses": statuses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--writes", type=int, default=2000, help="writes per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    emit(asyncio.run(measure(args.clients, args.writes, args.rounds)), args.out)


if __name__ == "__main__":
    main()
