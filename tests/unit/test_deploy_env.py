"""The deployment files give MemoryOS only environment variables its settings read.

A misspelt `MEMORYOS_*` name in compose or Kubernetes is silently ignored by pydantic-settings: the
process runs on the default (say, a worker on `./memoryos_data` instead of the shared volume). So every
`MEMORYOS_*` name in docker-compose*.yml, .env.example, the Dockerfile and deploy/ must be a field of
MemoryConfig, QueueSettings or ApiSettings under that class's env prefix, read from `model_fields`.
"""

import re

import pytest

from memoryos.config import MemoryConfig
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.deploy_files import (
    COMPOSE_FILES,
    ROOT,
    compose_containers,
    compose_variables,
    configmap_literals,
    dockerfile_env_names,
    env_example,
    kubernetes_containers,
    pod_specs,
)

SETTINGS_CLASSES = (MemoryConfig, QueueSettings, ApiSettings)

# Names outside MemoryOS's settings that the deployment sets on purpose, each read by something named.
OTHER_NAMES = {
    "HF_HOME": "huggingface_hub: where the model cache is (/models/hf)",
    "HF_HUB_OFFLINE": "huggingface_hub: never download at run time",
    "TRANSFORMERS_OFFLINE": "transformers: the same, for older code paths",
    "PYTHONDONTWRITEBYTECODE": "Python",
    "PYTHONUNBUFFERED": "Python: log lines reach `docker logs` at once",
    "PIP_DISABLE_PIP_VERSION_CHECK": "pip, at image build",
    "PIP_CONFIG_FILE": "pip, at image build: the `pipconf` build secret (build stages only)",
    "PATH": "the venv's bin first",
    "NVIDIA_VISIBLE_DEVICES": "NVIDIA container toolkit (the CUDA worker image: void, none of its own)",
    "REDIS_SCHEME": "Kubernetes: MEMORYOS_REDIS_URL's scheme, $(REDIS_SCHEME) in its value (redis, rediss)",
    "REDIS_USER": "Kubernetes: MEMORYOS_REDIS_URL's ACL user, $(REDIS_USER) in its value",
    "REDIS_ADDRESS": "Kubernetes: MEMORYOS_REDIS_URL's host:port/db?options, $(REDIS_ADDRESS) in its value",
    "REDIS_PASSWORD": "Kubernetes: the Secret memoryos-redis's password, $(REDIS_PASSWORD) in the URL",
    "NVIDIA_DRIVER_CAPABILITIES": "NVIDIA container toolkit",
}
# Compose-only knobs (interpolation into the compose files, never read by MemoryOS).
COMPOSE_PREFIXES = ("DEPLOY_", "VLLM_", "TEI_", "REDIS_", "POSTGRES_")


def setting_names() -> set[str]:
    names = set()
    for cls in SETTINGS_CLASSES:
        prefix = cls.model_config.get("env_prefix", "")
        for name, info in cls.model_fields.items():
            alias = info.validation_alias if isinstance(info.validation_alias, str) else None
            names.add((alias or f"{prefix}{name}").upper())
    return names


SETTINGS = setting_names()


def check(names: set[str], where: str, *, compose_knobs: bool = False) -> None:
    unknown = []
    for name in sorted(names):
        if name in SETTINGS or name in OTHER_NAMES:
            continue
        if compose_knobs and name.startswith(COMPOSE_PREFIXES):
            continue
        unknown.append(name)
    assert not unknown, f"{where}: {unknown} are not read by MemoryConfig, QueueSettings or ApiSettings"


def test_the_settings_classes_are_read_with_the_prefixes_the_files_use() -> None:
    assert {
        "MEMORYOS_REDIS_URL",
        "MEMORYOS_DATA_DIR",
        "MEMORYOS_API_KEYS_FILE",
        "MEMORYOS_API_PORT",
    } <= SETTINGS
    assert "MEMORYOS_NO_SUCH_SETTING" not in SETTINGS


def test_the_check_refuses_a_misspelt_name() -> None:
    with pytest.raises(AssertionError, match="MEMORYOS_REDIS_URI"):
        check({"MEMORYOS_REDIS_URI"}, "example")


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda path: path.name)
def test_compose_sets_only_settings(path) -> None:
    containers = compose_containers(path)
    assert {c.source.split(":")[1] for c in containers} >= {"api", "worker", "rq-worker", "rq-cron"}
    for container in containers:
        check(container.env_names, container.source)
    # Interpolated names are either settings (passed on) or compose knobs.
    check(compose_variables(path.read_text()), f"{path.name} interpolation", compose_knobs=True)


def test_env_example_sets_only_settings_and_compose_knobs() -> None:
    example = env_example()
    assert "MEMORYOS_API_KEYS" not in example  # a secret: in .env.api, read by the API alone
    check(set(example), ".env.example", compose_knobs=True)
    # Every variable the compose files interpolate without a default is documented in .env.example.
    for path in COMPOSE_FILES:
        required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", path.read_text()))
        assert required <= set(example), f"{path.name}: {required - set(example)} missing in .env.example"


@pytest.mark.parametrize("name", [".env.api.example", ".env.llm.example"])
def test_the_secrets_examples_set_only_settings(name: str) -> None:
    names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / name).read_text(), re.M))
    assert names
    check(names, name)


def test_dockerfile_sets_only_settings() -> None:
    check(dockerfile_env_names(), "Dockerfile")


def test_kubernetes_sets_only_settings() -> None:
    check(set(configmap_literals()), "deploy/base memoryos-config")
    containers = kubernetes_containers()
    assert len(containers) >= 4  # api, worker (+ gpu patch), rq worker, rq cron
    for container in containers:
        check(container.env_names, container.source)
        # $(VAR) in args expands only from the container's own env: a missing name stays literal.
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", " ".join(container.argv)):
            assert var in container.env_names, f"{container.source}: $({var}) is not in its env"


def test_every_variable_an_env_value_names_is_defined_before_it() -> None:
    """Kubernetes expands $(VAR) in an env value from envFrom and the env entries above it only; any other
    name stays literal, and MEMORYOS_REDIS_URL would be `$(REDIS_SCHEME)://...`, which no client reads."""
    config = set(configmap_literals())
    composed = 0
    for path, name, spec in pod_specs():
        for container in spec.get("containers", []):
            defined = set(config) if container.get("envFrom") else set()
            for item in container.get("env", []):
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(item.get("value", ""))):
                    assert var in defined, (
                        f"{path.name}:{name}/{container['name']}: $({var}) in {item['name']}"
                    )
                    composed += 1
                defined.add(item["name"])
    assert composed >= 4 * 4, "the four parts of MEMORYOS_REDIS_URL in api, worker, rq worker and rq cron"


def test_no_pod_gets_service_link_variables() -> None:
    """Kubernetes would inject MEMORYOS_API_PORT=tcp://... for the Service memoryos-api (and
    MEMORYOS_REDIS_PORT for memoryos-redis): a value ApiSettings.port cannot parse. enableServiceLinks:
    false keeps them out; every workload of the base must say it."""
    base_specs = [(path, name, spec) for path, name, spec in pod_specs() if "base" in path.parts]
    assert base_specs
    for path, name, spec in base_specs:
        assert spec.get("enableServiceLinks") is False, f"{path.name}:{name}"
