"""A second `memoryos worker` on a host whose ports are taken (by a first one, or any program): one line
naming the port, the setting and its variable, exit 1, before any process starts. It used to die with
`error: address already in use`, naming neither."""

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.serving.faults import worker_env
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

TIMEOUT_S = 120.0


@contextmanager
def listening(port: int) -> Iterator[None]:
    """A server on `port` of every address, as a first worker's health or metrics server is."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("", port))
        server.listen()
        yield


def run_worker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryos.cli.main", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_a_taken_health_port_is_named_with_its_setting(tmp_path: Path) -> None:
    health_port, metrics_port = free_port(), free_port()
    env = worker_env("redis://127.0.0.1:1/0", tmp_path / "data") | {
        "MEMORYOS_WORKER_HEALTH_PORT": str(health_port),
        "MEMORYOS_WORKER_METRICS_PORT": str(metrics_port),
    }
    with listening(health_port):
        ended = run_worker(env)
    assert ended.returncode == 1
    assert ended.stderr.strip().splitlines() == [
        f"memoryos worker: port {health_port} (worker_health_port) is already in use on this host, by another "
        "`memoryos worker` or another program; set MEMORYOS_WORKER_HEALTH_PORT to a free port (0: not served)"
    ]
    assert ended.stdout == ""  # refused before anything started


def test_a_taken_metrics_port_of_a_later_process_is_named_with_its_offset(tmp_path: Path) -> None:
    """With `--processes 2` process 1 serves on the metrics port + 1: that port, taken, is said as such,
    before the engine or either worker process starts."""
    health_port = free_port()
    with socket.socket() as probe:  # two free ports in a row, the second taken below
        probe.bind(("", 0))
        metrics_port = probe.getsockname()[1]
    env = worker_env("redis://127.0.0.1:1/0", tmp_path / "data") | {
        "MEMORYOS_WORKER_PROCESSES": "2",
        "MEMORYOS_WORKER_HEALTH_PORT": str(health_port),
        "MEMORYOS_WORKER_METRICS_PORT": str(metrics_port),
    }
    with listening(metrics_port + 1):
        ended = run_worker(env)
    assert ended.returncode == 1
    assert ended.stderr.strip().splitlines() == [
        f"memoryos worker: port {metrics_port + 1} (worker_metrics_port + 1) is already in use on this host, by "
        "another `memoryos worker` or another program; set MEMORYOS_WORKER_METRICS_PORT to a free port (0: not "
        "served)"
    ]
