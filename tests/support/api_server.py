"""The real API app under uvicorn on a free loopback port, in a thread of the test process, for tests
that speak HTTP to it (`with running_api(settings, config) as api: httpx.get(api.url + "/healthz")`)."""

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.serve import create_served_app


def offline_config(data_dir: Path, **overrides: Any) -> MemoryConfig:
    """The embedded default on `data_dir`: bundled MiniLM, offline LLM whatever the environment says."""
    return MemoryConfig(data_dir=data_dir, openai_api_key=None, openai_base_url=None, **overrides)


@dataclass
class RunningApi:
    url: str
    app: FastAPI
    data_dir: Path
    http: httpx.Client
    """A client for the test's requests to this server. `httpx.get` and its kin build a client per call,
    and each loads the CA bundle into a new SSL context (about 30 ms, here with plain HTTP): tests that
    make hundreds of requests spent seconds on it. Idle connections are dropped after 1 s, well before
    uvicorn closes them (5 s), so a request never goes out on a connection the server is closing."""

    def space_url(self, user_id: str, assistant_id: str = "bot") -> str:
        return f"{self.url}/v1/users/{user_id}/assistants/{assistant_id}"


@contextlib.contextmanager
def running_api(settings: ApiSettings, config: MemoryConfig, **parts: Any) -> Iterator[RunningApi]:
    """Serve `create_served_app(settings, config, **parts)` (the API, MCP at /mcp) until the block exits;
    ready (`/readyz` 200) on entry.

    Unless a test sets `max_write_lag_s` itself (the backpressure tests do), the write-lag bound is off: its
    0.5 s is often exceeded on a 2-core CI machine running the suite, and a 429 there would fail tests about
    something else (a forget racing reads, say)."""
    if "max_write_lag_s" not in settings.model_fields_set:
        settings = settings.model_copy(update={"max_write_lag_s": 0.0})
    app = create_served_app(settings, config, **parts)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    http = httpx.Client(limits=httpx.Limits(keepalive_expiry=1.0))
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if http.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the API did not become ready")
            time.sleep(0.05)
        yield RunningApi(url, app, config.data_dir, http)
    finally:
        http.close()
        server.should_exit = True
        thread.join(30)
        sock.close()
