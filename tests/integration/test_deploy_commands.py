"""Every command the compose files run, read from the files themselves and started against a real
`redis-server` until it serves: the API in Redis mode (/readyz answers), the worker (says it serves, and
/metrics and /healthz answer), the rq maintenance worker and rq cron (rq says it listens / registered the
schedule), and `memoryos mcp` (answers an MCP initialize). The Kubernetes manifests run the same commands (checked
below), so this covers them too.

Each command runs from the environment of its image: `.ci/deploy-check` installs the API's and the CPU
worker's requirement sets into fresh venvs (requirements/install.sh, as the Dockerfile does) and passes
their bin directories as DEPLOY_CHECK_API_BIN and DEPLOY_CHECK_WORKER_BIN; without them (the plain test
run) both are this interpreter's. The API image has no torch: the API and rq run from the API venv.

Container paths (/data, /models) become temporary directories, the API binds 127.0.0.1 on a free port,
and a GPU worker's `cuda` becomes `cpu` when torch sees no GPU (same command and code path otherwise).
A worker from the image venv starts on an empty models volume, as a new container does, and builds the
model's export without PyTorch; a worker from this interpreter starts on a volume holding this run's
export (`seed_models_volume`).
"""

import contextlib
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memoryos.cli.main import main
from memoryos.config import MemoryConfig
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder
from tests.support.deploy_files import (
    COMPOSE_FILES,
    Container,
    compose_containers,
    interpolate,
    k8s_expand,
    kubernetes_containers,
)
from tests.support.redis_server import RedisServer, free_port, running_redis

pytestmark = pytest.mark.integration

API_KEY = "deploy-check-key"
START_TIMEOUT_S = 180.0


def bin_dir(variable: str) -> Path:
    configured = os.environ.get(variable)
    return Path(configured) if configured else Path(sys.executable).parent


API_BIN = bin_dir("DEPLOY_CHECK_API_BIN")
WORKER_BIN = bin_dir("DEPLOY_CHECK_WORKER_BIN")


@functools.cache
def built_export() -> Path:
    """The `onnx` directory of this run's model cache (tests/conftest.py) once it holds the default model's
    verified export and manifest, made here when no earlier test made them."""
    cache = Path(os.environ["MEMORYOS_MODEL_CACHE_DIR"])
    SentenceTransformerEmbedder(
        MemoryConfig(embedding_device="cpu", embedding_cache_size=0, model_cache_dir=cache)
    ).encode(["a page"])
    return cache / "onnx"


def seed_models_volume(env: dict[str, str]) -> None:
    """When the worker runs from this interpreter: its models volume (`MEMORYOS_MODEL_CACHE_DIR` in `env`)
    as a restarted container finds it, holding the export its first start made. This interpreter has
    PyTorch, which no CPU worker image has, so its first start would export with PyTorch as the e2e tests
    do (tests/e2e/test_onnx_queries.py): seconds of CPU for nothing these tests check. The image venv's
    worker (.ci/deploy-check) starts on an empty volume and builds the export without PyTorch, as a new
    container does."""
    if Path(sys.executable).parent == WORKER_BIN:
        shutil.copytree(built_export(), Path(env["MEMORYOS_MODEL_CACHE_DIR"]) / "onnx")


@dataclass(frozen=True)
class Case:
    """One distinct command of the compose files, and the venv of the image that runs it."""

    argv: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    bin: Path
    sources: str


def cases() -> list[Case]:
    found: dict[tuple[tuple[str, ...], Path], Case] = {}
    for path in COMPOSE_FILES:
        for container in compose_containers(path):
            image_bin = API_BIN if container.image.endswith(":api") else WORKER_BIN
            key = (tuple(container.argv), image_bin)
            if key in found:
                found[key] = Case(
                    key[0], found[key].environment, image_bin, f"{found[key].sources}, {container.source}"
                )
            else:
                env = tuple(sorted(container.environment.items()))
                found[key] = Case(key[0], env, image_bin, container.source)
    return list(found.values())


CASES = cases()


def case_id(case: Case) -> str:
    return " ".join(case.argv[:2])


def supports(bin: Path, argv: list[str], flag: str | None) -> str | None:
    """Why the installed CLI cannot run this command yet (a part still being built), or None."""
    if argv[0] != "memoryos":
        return None
    text = command_help(bin, argv[1])
    if text is None:
        return f"`memoryos {argv[1]}` does not exist yet in this tree"
    if flag and flag not in text:
        return f"`memoryos {argv[1]}` has no {flag} yet (the API's Redis mode is being added)"
    return None


def command_help(bin: Path, command: str) -> str | None:
    """`memoryos <command> --help`'s output from the CLI in `bin`, or None when it fails. This interpreter's
    CLI answers in this process (the console script runs the same `main`): an interpreter start for each
    command's help took about a second."""
    if bin != Path(sys.executable).parent:
        run = subprocess.run(
            [str(bin / "memoryos"), command, "--help"], capture_output=True, text=True, timeout=120
        )
        return run.stdout if run.returncode == 0 else None
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code: object = main([command, "--help"])
        except SystemExit as exited:  # argparse, after printing the help or an error
            code = exited.code
    return out.getvalue() if code in (0, None) else None


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


def container_env(case: Case, tmp: Path, redis_url: str) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """The command and environment as compose would give them, mapped onto this machine."""
    variables = {"MEMORYOS_REDIS_URL": redis_url, "MEMORYOS_API_KEYS": json.dumps({API_KEY: "default"})}
    argv = [interpolate(part, variables) for part in case.argv]
    env = {name: interpolate(value, variables) for name, value in case.environment}
    for name, value in list(env.items()):  # container paths -> temporary directories
        for container_path in ("/data", "/models"):
            if value == container_path or value.startswith(container_path + "/"):
                env[name] = str(tmp / value.lstrip("/"))
    ports = {"api": free_port(), "metrics": free_port(), "health": free_port()}
    env.update(
        MEMORYOS_API_HOST="127.0.0.1",
        MEMORYOS_API_PORT=str(ports["api"]),
        MEMORYOS_WORKER_METRICS_PORT=str(ports["metrics"]),
        MEMORYOS_WORKER_HEALTH_PORT=str(ports["health"]),
    )
    env.setdefault("MEMORYOS_DATA_DIR", str(tmp / "data"))
    env.setdefault("MEMORYOS_REDIS_URL", redis_url)
    env.setdefault("HF_HOME", str(tmp / "models" / "hf"))
    if env.get("MEMORYOS_EMBEDDING_DEVICE") == "cuda" and shutil.which("nvidia-smi") is None:
        env["MEMORYOS_EMBEDDING_DEVICE"] = "cpu"
    keep = {
        k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "XDG_CACHE_HOME")
    }
    full_env = {**keep, **env, "PATH": f"{case.bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv[0] = str(case.bin / argv[0])
    return argv, full_env, ports


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Output:
    """A process's merged output, read without blocking (a thread per process)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_command_serves_against_redis(case: Case, redis_server: RedisServer, tmp_path: Path) -> None:
    argv, env, ports = container_env(case, tmp_path, redis_server.url)
    reason = supports(case.bin, list(case.argv), "--redis-url" if case.argv[1:2] == ("serve",) else None)
    if reason:
        pytest.skip(f"{reason}: {case.sources}")
    is_mcp = case.argv[:2] == ("memoryos", "mcp")
    if case.argv[:2] == ("memoryos", "worker"):
        seed_models_volume(env)
    process = subprocess.Popen(
        argv,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if is_mcp else subprocess.STDOUT,  # mcp: stdout is protocol only
        text=True,
    )
    output = Output(process)
    try:
        if is_mcp:
            assert process.stdin is not None
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "deploy-check", "version": "0"},
                },
            }
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
        ready = readiness(case, ports)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready(output.text()):
            assert process.poll() is None, (
                f"{case.sources} exited {process.returncode}:\n{output.text()[-3000:]}"
            )
            assert time.monotonic() < deadline, (
                f"{case.sources} not serving after {START_TIMEOUT_S}s:\n{output.text()[-3000:]}"
            )
            time.sleep(0.2)
        assert process.poll() is None
    finally:
        if process.stdin:
            process.stdin.close()
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if not is_mcp and case.argv[:2] in (("memoryos", "worker"), ("memoryos", "serve")):
        assert process.returncode in (0, -15), f"{case.sources}: SIGTERM exit {process.returncode}"


def readiness(case: Case, ports: dict[str, int]) -> Callable[[str], bool]:
    """What 'serving' means for each command."""
    head = case.argv[:2]
    if head == ("memoryos", "serve"):
        return lambda _text: http_ok(f"http://127.0.0.1:{ports['api']}/readyz")
    if head == ("memoryos", "worker"):
        return lambda text: (
            "serving shards" in text
            and http_ok(f"http://127.0.0.1:{ports['metrics']}/metrics")
            and http_ok(f"http://127.0.0.1:{ports['health']}/healthz")  # what the healthchecks ask
        )
    if head == ("rq", "worker"):
        return lambda text: "Listening on memoryos-maintenance" in text
    if head == ("rq", "cron"):
        return lambda text: re.search(r"Successfully registered [1-9]\d* cron job", text) is not None
    if head == ("memoryos", "mcp"):
        return lambda text: '"id":1' in text.replace(" ", "") and '"result"' in text
    raise AssertionError(f"no readiness rule for {case.argv}")


def test_the_manifests_run_the_commands_compose_runs() -> None:
    """deploy/ runs nothing that the test above did not start: each container's argv, with Kubernetes'
    $(VAR) read as ${VAR}, is one of the compose commands (whose ${VAR:-default} gives the same value)."""
    variables = {"MEMORYOS_REDIS_URL": "redis://example:6379/0"}
    compose = {tuple(interpolate(part, variables) for part in case.argv) for case in CASES}
    containers: list[Container] = kubernetes_containers()
    started = 0
    for container in containers:
        if container.argv == ["memoryos"]:  # a patch that sets no args (gpu overlay): the base's argv runs
            continue
        argv = tuple(interpolate(part, variables) for part in k8s_expand(container.argv))
        assert argv in compose, f"{container.source} runs {argv}, which no compose service runs"
        started += 1
    assert started >= 4
