"""Reading the deployment files (compose, kustomize base and overlays, Dockerfile, .env.example) for the
deploy tests: what each MemoryOS container runs and which environment variables it is given.

Plain YAML reading, no Docker and no kubectl, so the unit tests run anywhere; `.ci/deploy-check` renders
and validates the same files with the real tools.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = (ROOT / "docker-compose.yml", ROOT / "docker-compose.gpu.yml")
DEPLOY = ROOT / "deploy"
IMAGE_ENTRYPOINT = ("memoryos",)
"""The Dockerfile's ENTRYPOINT of the api and worker images (mcp: memoryos mcp)."""

_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(text: str, variables: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}` and `${VAR:?message}`, as compose does."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        value = variables.get(name)
        if op in (":-", "-"):
            missing = value is None or (op == ":-" and value == "")
            return arg if missing else str(value)
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise KeyError(f"required variable {name} is missing: {arg}")
            return value
        return value or ""

    return _INTERPOLATION.sub(one, text)


def compose_variables(text: str) -> set[str]:
    """Every variable name a compose file interpolates."""
    return {match["name"] for match in _INTERPOLATION.finditer(text)}


DATABASE_SETTINGS = ("MEMORYOS_DATABASE_URL",)
"""Settings that name the compose network's PostgreSQL (the `postgres` service)."""

SHELL_ENTRY = ("/bin/sh", "-c")
"""A compose entrypoint `/bin/sh -c SCRIPT NAME PROGRAM...`: SCRIPT runs first, then execs PROGRAM with the
command's arguments (x-postgres-password-entry)."""


@dataclass
class Container:
    """One MemoryOS process as a deployment file runs it."""

    source: str  # "docker-compose.yml:api", "deploy/base/api.yaml:memoryos-api/api"
    image: str  # the image reference as written
    argv: list[str]  # entrypoint + command, not yet interpolated (a shell entry's program onwards)
    environment: dict[str, str] = field(default_factory=dict)
    env_names: set[str] = field(default_factory=set)  # every name it is given (also from refs/files)
    # Compose: the script of a `/bin/sh -c` entry run before argv, compose's `$$` read as `$`, and the
    # secrets the service mounts under /run/secrets/.
    entry_script: str | None = None
    secrets: list[str] = field(default_factory=list)
    # The database's settings (DATABASE_SETTINGS), kept apart from `environment`: they name the compose
    # network's `postgres`, so a test that runs the command against a redis-server alone
    # (tests/integration/test_deploy_commands.py) runs it on its data directory, and
    # tests/integration/test_deploy_database.py runs it with them against a real PostgreSQL.
    database_environment: dict[str, str] = field(default_factory=dict)


YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader on libyaml where it is built in (it is in PyPI's wheels): the same documents, parsed
about ten times faster; deploy/ holds CRDs of 150 KB, which the tests read many times."""


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, on `YAML_LOADER`."""
    return yaml.load(text, Loader=YAML_LOADER)


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=YAML_LOADER) if doc]


def compose_containers(path: Path) -> list[Container]:
    """The services built from our images (not redis, not vllm)."""
    data = load_yaml(path.read_text())
    containers = []
    for name, service in data["services"].items():
        image = str(service.get("image", ""))
        if "memoryos" not in image.lower() and "DEPLOY_IMAGE" not in image:
            continue
        entrypoint = service.get("entrypoint")
        if entrypoint is None:
            entrypoint = ["memoryos", "mcp"] if image.endswith(":mcp") else list(IMAGE_ENTRYPOINT)
        entrypoint = [str(part) for part in entrypoint]
        script = None
        if tuple(entrypoint[:2]) == SHELL_ENTRY:
            script, entrypoint = entrypoint[2].replace("$$", "$"), entrypoint[4:]  # [3] is the script's $0
        given = {str(k): str(v) for k, v in (service.get("environment") or {}).items()}
        environment = {k: v for k, v in given.items() if k not in DATABASE_SETTINGS}
        secrets = [s if isinstance(s, str) else s["source"] for s in service.get("secrets", [])]
        containers.append(
            Container(
                source=f"{path.name}:{name}",
                image=image,
                argv=entrypoint + [str(part) for part in service.get("command", [])],
                environment=environment,
                env_names=set(given),
                entry_script=script,
                secrets=secrets,
                database_environment={k: v for k, v in given.items() if k in DATABASE_SETTINGS},
            )
        )
    return containers


def kustomize_documents() -> list[tuple[Path, dict[str, Any]]]:
    """Every YAML document under deploy/ (base resources, overlay patches), with its file."""
    documents: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        documents.extend((path, doc) for doc in load_yaml_documents(path))
    return documents


def pod_specs() -> list[tuple[Path, str, dict[str, Any]]]:
    """(file, workload name, pod spec) of every workload under deploy/, patches included."""
    specs = []
    for path, doc in kustomize_documents():
        template = (doc.get("spec") or {}).get("template") if isinstance(doc, dict) else None
        if template and "spec" in template:
            specs.append((path, doc["metadata"]["name"], template["spec"]))
    return specs


def configmap_literals() -> dict[str, str]:
    """The memoryos-config ConfigMap's variables (base kustomization's configMapGenerator)."""
    kustomization = load_yaml((DEPLOY / "base" / "kustomization.yaml").read_text())
    literals: dict[str, str] = {}
    for generator in kustomization.get("configMapGenerator", []):
        if generator["name"] == "memoryos-config":
            for literal in generator.get("literals", []):
                key, _, value = literal.partition("=")
                literals[key] = value
    return literals


def kubernetes_containers() -> list[Container]:
    """The MemoryOS containers of deploy/ with their argv (`$(VAR)` kept) and the names of their env."""
    config = configmap_literals()
    specs = pod_specs()
    # A patch (an overlay's, a component's) may leave out the image: its container is the one of that
    # workload and name that sets one.
    images = {
        (name, container["name"]): str(container["image"])
        for _, name, spec in specs
        for container in spec.get("containers", [])
        if container.get("image")
    }
    containers = []
    for path, name, spec in specs:
        for container in spec.get("containers", []):
            image = str(container.get("image", ""))
            if "memoryos" not in (image or images.get((name, container["name"]), "memoryos")):
                continue
            env_names = {item["name"] for item in container.get("env", [])}
            environment = {
                item["name"]: str(item["value"]) for item in container.get("env", []) if "value" in item
            }
            for source in container.get("envFrom", []):
                if source.get("configMapRef", {}).get("name") == "memoryos-config":
                    env_names |= set(config)
                    environment = {**config, **environment}
            command = container.get("command") or list(IMAGE_ENTRYPOINT)
            containers.append(
                Container(
                    source=f"{path.relative_to(ROOT)}:{name}/{container['name']}",
                    image=image,
                    argv=[str(part) for part in command] + [str(part) for part in container.get("args", [])],
                    environment=environment,
                    env_names=env_names,
                )
            )
    return containers


def env_example() -> dict[str, str]:
    """.env.example's assignments."""
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def dockerfile_env_names() -> set[str]:
    """Names set by the Dockerfile's ENV instructions (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("ENV "):
            names |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", line[4:]))
    return names


def k8s_expand(argv: list[str]) -> list[str]:
    """Kubernetes' `$(VAR)` in args, written as compose's `${VAR}` so both compare equal."""
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", r"${\1}", part) for part in argv]
