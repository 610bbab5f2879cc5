"""A real `redis-server` for one test module: started on a free port in a temp directory, stopped after.

Tests never share state with the machine's Redis or with each other. `appendonly` is on (fsync every
write) so restart tests see what a deployment with AOF keeps.
"""

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def redis_command(directory: Path, port: int, bind: str) -> list[str]:
    """`redis-server` with the durability settings docs/service.md asks for (AOF, fsync every write, no
    eviction), its files in `directory`."""
    return [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        bind,
        "--dir",
        str(directory),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
        "--maxmemory-policy",
        "noeviction",
        "--logfile",
        str(directory / "redis.log"),
    ]


class RedisServer:
    """One redis-server process; `restart()` stops and starts it on the same port and directory."""

    def __init__(self, directory: Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail("redis-server is not installed (.ci/run installs it with apt)")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            redis_command(self.directory, self.port, "127.0.0.1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def running_redis(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
