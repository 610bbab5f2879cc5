"""The Kubernetes Redis as the manifests start it, against a real `redis-server`: the shipped redis.conf
with the StatefulSet's arguments (requirepass from the Secret's password), and a client with the URL a
MemoryOS container puts together from memoryos-config and that Secret. The password is asked and the URL
carries it; the AOF headroom's maxmemory is the one in force.

Only what cannot run here is changed: redis.conf's `dir /data` (Redis enters it while it reads the file)
in a copy, and the port, the bind address and the log file, given after the manifest's arguments (Redis
takes the last value of a setting).
"""

import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from services.queue.connection import connect
from services.queue.settings import QueueSettings, redacted_url
from tests.support.deploy_files import DEPLOY, configmap_literals, load_yaml_documents
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

SERVICE_ADDRESS = "memoryos-redis:6379"
"""The in-cluster Service in REDIS_ADDRESS, which this test replaces with its own server's address."""


def expand(text: str, variables: dict[str, str]) -> str:
    """Kubernetes' $(VAR) from `variables`; a name not there stays literal, as Kubernetes leaves it."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: variables.get(m[1], m[0]), text)


def container(workload: str, name: str, path: Path) -> dict[str, Any]:
    (found,) = [
        c for d in load_yaml_documents(path) if d["kind"] in ("Deployment", "StatefulSet")
        and d["metadata"]["name"] == workload
        for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]  # fmt: skip
    return found


def environment(spec: dict[str, Any], config: dict[str, str], secret: dict[str, str]) -> dict[str, str]:
    """A container's environment as the kubelet makes it: envFrom first, then each env entry in order,
    its value's $(VAR) expanded from what came before, a secretKeyRef read from `secret`."""
    env = dict(config) if spec.get("envFrom") else {}
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
        elif item["valueFrom"].get("secretKeyRef", {}).get("name") == "memoryos-redis":
            env[item["name"]] = secret[item["valueFrom"]["secretKeyRef"]["key"]]
    return env


@pytest.fixture(scope="module")
def password() -> str:
    """As the kustomization's comment makes it (hex: nothing in it needs escaping in a URL)."""
    return secrets.token_hex(32)


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory, password: str) -> Iterator[int]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (.ci/run installs it with apt)")
    directory = tmp_path_factory.mktemp("k8s-redis")
    server = container("memoryos-redis", "redis", DEPLOY / "base" / "redis.yaml")
    env = environment(server, {}, {"password": password})
    args = [expand(arg, env) for arg in server["args"]]
    assert args[0] == "/etc/redis/redis.conf", "the ConfigMap's redis.conf, mounted there"
    shipped = (DEPLOY / "base" / "redis.conf").read_text()
    assert re.search(r"^dir /data$", shipped, re.M), "the StatefulSet's volume"
    conf = directory / "redis.conf"
    conf.write_text(re.sub(r"^dir /data$", f"dir {directory}", shipped, flags=re.M))
    port = free_port()
    argv = ["redis-server", str(conf), *args[1:], "--port", str(port), "--bind", "127.0.0.1"]
    argv += ["--logfile", str(directory / "redis.log")]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, password=password)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert process.poll() is None, f"redis-server exited {process.returncode}: {argv}"
                assert time.monotonic() < deadline, "redis-server did not answer in 10 s"
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize(
    ("workload", "name", "file"),
    [
        ("memoryos-api", "api", "api.yaml"),
        ("memoryos-worker", "worker", "worker.yaml"),
        ("memoryos-rq-worker", "rq-worker", "maintenance.yaml"),
        ("memoryos-rq-cron", "rq-cron", "maintenance.yaml"),
    ],
)
def test_each_container_s_url_reaches_the_redis_behind_its_password(
    redis_port: int, password: str, workload: str, name: str, file: str
) -> None:
    config = configmap_literals()
    assert SERVICE_ADDRESS in config["REDIS_ADDRESS"]
    config["REDIS_ADDRESS"] = config["REDIS_ADDRESS"].replace(SERVICE_ADDRESS, f"127.0.0.1:{redis_port}")
    env = environment(container(workload, name, DEPLOY / "base" / file), config, {"password": password})
    url = env["MEMORYOS_REDIS_URL"]
    assert "$(" not in url and password in url
    client = connect(QueueSettings(redis_url=url))
    assert client.ping() is True
    client.set(f"k8s-url-{name}", "1")
    assert password not in redacted_url(url), "what the services print"


def test_redis_refuses_a_client_without_the_password(redis_port: int, password: str) -> None:
    """The refusal is Redis's first answer, so the clients ask once: redis-py 8 retries every
    `ConnectionError` (`AuthenticationError` is one) three times with backoff by default, seconds spent
    hearing the same refusal again."""
    once = Retry(NoBackoff(), 0)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=redis_port, retry=once).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=redis_port, username="default", password=password[:-1] + "x", retry=once).ping()


def test_the_maxmemory_in_force_is_redis_conf_s(redis_port: int, password: str) -> None:
    """The headroom the StatefulSet's limit is sized for (tests/unit/test_deploy_files.py): what the
    running server holds to, with `noeviction`, so a full Redis refuses writes rather than dropping them."""
    client = redis.Redis(port=redis_port, password=password, decode_responses=True)
    assert client.config_get("maxmemory") == {"maxmemory": str(1024**3)}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert client.config_get("appendonly") == {"appendonly": "yes"}
