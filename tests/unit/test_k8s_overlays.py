"""The Kubernetes overlays and components (issue 51, point 7; issue 56, point 7): the worker is probed and
scraped on its one health port, the gpu overlay rolls out without a spare GPU, the ReadWriteMany volumes
take the storage class set once in a component, KEDA replaces the HPA where an overlay asks for it, the
workers take their database URL from a Secret (the base's placeholder, or CloudNativePG's), and their data
directory is a snapshot cache: the pod's emptyDir, or a shared claim where a component asks for it.
Issue 57: no `replicas` in a Deployment an autoscaler owns, a PodMonitor for the Prometheus Operator's
Prometheus that KEDA asks (valid against its CRD) and a fallback on the ScaledObject, Redis behind a
password from a Secret (TLS as a component) with a PodDisruptionBudget, GPU scheduling on the
`nvidia.com/gpu` resource alone (GFD's node selector and NVIDIA's RuntimeClass as components).

The source files are read as the other deploy tests read them. Each overlay is also rendered, alone and
with the components it offers commented out, and the render checked, with the kubectl that
`.ci/deploy-check` pins (it passes DEPLOY_CHECK_KUBECTL; else the deploy tools' cache or PATH): without
one those tests skip, and `.ci/deploy-check` runs them.
"""

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.queue.settings import QueueSettings
from tests.support.deploy_files import DEPLOY, load_yaml_documents

HEALTH_PORT = QueueSettings.model_fields["worker_health_port"].default
"""MEMORYOS_WORKER_HEALTH_PORT's default, 9399: /healthz and every worker process's /metrics."""
OVERLAYS = sorted(path.name for path in (DEPLOY / "overlays").iterdir() if path.is_dir())
COMPONENTS = DEPLOY / "components"
WORKER = "memoryos-worker"
RWX_VOLUMES = {"memoryos-data", "memoryos-models"}
"""The ReadWriteMany claims the storage-class component sets: memoryos-data exists only with the
shared-snapshot-cache component (the base's worker keeps its snapshots in an emptyDir)."""
CNPG_CLUSTER = "memoryos-postgres"
CNPG_SECRET = f"{CNPG_CLUSTER}-app"
"""The Secret CloudNativePG makes for a Cluster's initdb owner, with a `uri` key."""
OFFERED = re.compile(r"^#\s*- \.\./\.\./components/(\S+)", re.M)
"""A component an overlay offers commented out (what `.ci/deploy-check` also renders enabled)."""
REDIS_SECRET = {"name": "memoryos-redis", "key": "password"}
"""The Secret the operator creates (deploy/base/kustomization.yaml): Redis's requirepass and every URL's."""
REDIS_URL = "$(REDIS_SCHEME)://$(REDIS_USER):$(REDIS_PASSWORD)@$(REDIS_ADDRESS)"
"""MEMORYOS_REDIS_URL in every MemoryOS container: the password from REDIS_SECRET, the rest the ConfigMap's."""
MEMORYOS_WORKLOADS = {
    "memoryos-api": "api",
    "memoryos-worker": "worker",
    "memoryos-rq-worker": "rq-worker",
    "memoryos-rq-cron": "rq-cron",
}
"""Every Deployment running a MemoryOS container, with that container's name."""
GPU_OPTIONS = {"gpu-node-selector": ("nodeSelector", {"nvidia.com/gpu.present": "true"}),
               "nvidia-runtime-class": ("runtimeClassName", "nvidia")}  # fmt: skip
"""The GPU scheduling options, each a component the gpu overlay offers, and what it sets on the worker."""


def documents(*parts: str) -> list[dict[str, Any]]:
    return load_yaml_documents(DEPLOY.joinpath(*parts))


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def kustomization(*parts: str) -> dict[str, Any]:
    return yaml.safe_load(DEPLOY.joinpath(*parts, "kustomization.yaml").read_text())


def offered(overlay: str) -> list[str]:
    return OFFERED.findall((DEPLOY / "overlays" / overlay / "kustomization.yaml").read_text())


def probe_ports(container: dict[str, Any]) -> dict[str, int | str]:
    """Each probe's httpGet port, a port name resolved to its containerPort."""
    named = {port["name"]: port["containerPort"] for port in container.get("ports", []) if "name" in port}
    return {
        probe: named.get(container[probe]["httpGet"]["port"], container[probe]["httpGet"]["port"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
        if "httpGet" in container.get(probe, {})
    }


def assert_probed_and_scraped_on_the_health_port(docs: list[dict[str, Any]]) -> None:
    worker = one(docs, "Deployment", WORKER)
    template = worker["spec"]["template"]
    (container,) = template["spec"]["containers"]
    ports = probe_ports(container)
    assert {"startupProbe", "livenessProbe"} <= ports.keys()
    assert set(ports.values()) == {HEALTH_PORT}, ports
    assert HEALTH_PORT in [port["containerPort"] for port in container["ports"]]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(HEALTH_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    policy = one(docs, "NetworkPolicy", "memoryos-worker-metrics")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == WORKER
    (rule,) = policy["spec"]["ingress"]
    assert [peer["namespaceSelector"]["matchLabels"] for peer in rule["from"]] == [
        {"kubernetes.io/metadata.name": "monitoring"}
    ]
    assert rule["ports"] == [{"port": HEALTH_PORT, "protocol": "TCP"}], (
        "the one scrape port, 9400 + i no more"
    )


def test_the_worker_is_probed_and_scraped_on_its_health_port() -> None:
    """9399 answers /healthz for every worker process and serves all their metrics: the probes, the
    Prometheus annotations and the monitoring namespace's ingress all name it, whatever
    MEMORYOS_WORKER_PROCESSES is (9400 + i are each one process's)."""
    assert_probed_and_scraped_on_the_health_port(
        documents("base", "worker.yaml") + documents("base", "network-policy.yaml")
    )
    # No overlay or component moves them elsewhere.
    for path in [*(DEPLOY / "overlays").rglob("*.yaml"), *COMPONENTS.rglob("*.yaml")]:
        for doc in load_yaml_documents(path):
            if doc.get("kind") == "Deployment" and doc["metadata"]["name"] == WORKER:
                template = doc["spec"].get("template", {})
                annotations = template.get("metadata", {}).get("annotations", {})
                assert "prometheus.io/port" not in annotations, path
                for container in template.get("spec", {}).get("containers", []):
                    assert not probe_ports(container), path


def test_the_gpu_overlay_rolls_out_without_a_spare_gpu() -> None:
    """At maxReplicas = the GPU count every GPU is taken, so a surge pod would wait for one forever: the
    gpu overlay takes one worker down first (its drain hands its shards to the others); the CPU base keeps
    starting the new worker first."""
    base = one(documents("base", "worker.yaml"), "Deployment", WORKER)
    assert base["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    (patch,) = documents("overlays", "gpu", "worker-gpu.yaml")
    assert patch["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert patch["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_the_storage_class_is_set_once_for_both_rwx_volumes() -> None:
    """deploy/components/rwx-storage-class: one value (a local-config ConfigMap, never applied) copied into
    both ReadWriteMany claims, offered to the cpu and gpu overlays."""
    volumes = documents("base", "data-volumes.yaml") + documents(
        "components", "shared-snapshot-cache", "snapshot-cache-volume.yaml"
    )
    rwx = {d["metadata"]["name"] for d in volumes if d["spec"]["accessModes"] == ["ReadWriteMany"]}
    assert rwx == RWX_VOLUMES
    assert {d["metadata"]["name"] for d in documents("base", "data-volumes.yaml")} == {"memoryos-models"}
    assert not any("storageClassName" in d["spec"] for d in volumes), "the component sets it, nothing else"
    component = kustomization("components", "rwx-storage-class")
    assert component["kind"] == "Component"
    (value,) = [
        d for file in component["resources"] for d in documents("components", "rwx-storage-class", file)
    ]
    assert value["kind"] == "ConfigMap"
    assert value["metadata"]["annotations"]["config.kubernetes.io/local-config"] == "true"
    assert value["data"]["storageClassName"]
    (replacement,) = component["replacements"]
    assert replacement["source"] == {
        "kind": "ConfigMap",
        "name": value["metadata"]["name"],
        "fieldPath": "data.storageClassName",
    }
    targets = {t["select"]["name"]: t for t in replacement["targets"]}
    assert targets.keys() == RWX_VOLUMES
    for target in targets.values():
        assert target["select"]["kind"] == "PersistentVolumeClaim"
        assert target["fieldPaths"] == ["spec.storageClassName"]
        assert target["options"]["create"] is True
    for overlay in ("cpu", "gpu"):
        assert "rwx-storage-class" in offered(overlay), overlay
        # After the component that adds memoryos-data, so the class reaches it.
        components = offered(overlay)
        assert components.index("shared-snapshot-cache") < components.index("rwx-storage-class"), overlay


def test_the_cloudnative_pg_component_gives_the_workers_the_operator_s_secret() -> None:
    """deploy/components/cloudnative-pg: a Cluster (database memoryos owned by memoryos, max_connections set,
    several instances), the workers' MEMORYOS_DATABASE_URL from the Secret the operator makes for it
    (<cluster>-app, key uri), the base's placeholder Secret deleted, and ingress to the instances for the
    workers (5432), the operator (8000, 5432) and the instances themselves (5432). Offered to cpu and gpu."""
    component = kustomization("components", "cloudnative-pg")
    assert component["kind"] == "Component"
    resources = [
        d for file in component["resources"] for d in documents("components", "cloudnative-pg", file)
    ]
    cluster = one(resources, "Cluster", CNPG_CLUSTER)
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    spec = cluster["spec"]
    assert spec["instances"] >= 2, "a replica to fail over to"
    assert spec["bootstrap"]["initdb"] == {"database": "memoryos", "owner": "memoryos"}
    assert int(spec["postgresql"]["parameters"]["max_connections"]) >= 100
    assert re.fullmatch(r"ghcr\.io/cloudnative-pg/postgresql:\d+\.\d+", spec["imageName"]), "a full version"
    assert spec["storage"]["size"]
    patches = [d for p in component["patches"] for d in documents("components", "cloudnative-pg", p["path"])]
    (worker_patch,) = [d for d in patches if d["kind"] == "Deployment"]
    (container,) = worker_patch["spec"]["template"]["spec"]["containers"]
    (env,) = container["env"]
    assert env["name"] == "MEMORYOS_DATABASE_URL"
    assert env["valueFrom"]["secretKeyRef"] == {"name": CNPG_SECRET, "key": "uri"}
    (deletion,) = [d for d in patches if d["kind"] == "Secret"]
    assert deletion["metadata"]["name"] == "memoryos-database" and deletion["$patch"] == "delete"
    policy = one(resources, "NetworkPolicy", CNPG_CLUSTER)
    assert policy["spec"]["podSelector"]["matchLabels"] == {"cnpg.io/cluster": CNPG_CLUSTER}
    allowed = {
        (json_key(peer), port["port"]) for rule in policy["spec"]["ingress"] for peer in rule["from"]
        for port in rule["ports"]
    }  # fmt: skip
    worker_peer = json_key({"podSelector": {"matchLabels": {"app.kubernetes.io/name": WORKER}}})
    instances = json_key({"podSelector": {"matchLabels": {"cnpg.io/cluster": CNPG_CLUSTER}}})
    operator = [
        peer for rule in policy["spec"]["ingress"] for peer in rule["from"] if "namespaceSelector" in peer
    ]
    assert (worker_peer, 5432) in allowed and (instances, 5432) in allowed
    assert {(json_key(operator[0]), 8000), (json_key(operator[0]), 5432)} <= allowed
    for overlay in ("cpu", "gpu"):
        assert "cloudnative-pg" in offered(overlay), overlay


def json_key(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=True)


def test_keda_replaces_the_hpa_in_the_keda_overlays() -> None:
    """deploy/components/keda deletes the HPA and adds a ScaledObject for the same Deployment, scaling on
    the total queue depth (one prometheus trigger; 64 redis-streams triggers would scale on the largest
    shard, not the sum) with the HPA's numbers. cpu-keda and gpu-keda put it over cpu and gpu."""
    hpa = one(documents("base", "worker-autoscaling.yaml"), "HorizontalPodAutoscaler", WORKER)
    component = kustomization("components", "keda")
    assert component["kind"] == "Component"
    (deletion,) = [d for p in component["patches"] for d in documents("components", "keda", p["path"])]
    assert deletion == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": WORKER},
        "$patch": "delete",
    }
    (inner,) = component["components"]
    scaled = kustomization("components", "keda", inner)
    (scaled_object,) = [
        d for file in scaled["resources"] for d in documents("components", "keda", inner, file)
    ]
    assert scaled_object["apiVersion"] == "keda.sh/v1alpha1" and scaled_object["kind"] == "ScaledObject"
    assert scaled_object["spec"]["scaleTargetRef"] == hpa["spec"]["scaleTargetRef"]
    (trigger,) = scaled_object["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert re.fullmatch(
        r'sum\(memoryos_queue_depth\{namespace="[a-z0-9-]+"\}\)', trigger["metadata"]["query"]
    )
    copied = {
        (r["source"]["kind"], r["source"]["name"], r["source"]["fieldPath"]): [
            path for t in r["targets"] if t["select"]["name"] == WORKER for path in t["fieldPaths"]
        ]
        for r in scaled["replacements"]
    }
    hpa_field = ("HorizontalPodAutoscaler", WORKER)
    assert copied[(*hpa_field, "spec.minReplicas")] == ["spec.minReplicaCount", "spec.fallback.replicas"]
    assert copied[(*hpa_field, "spec.maxReplicas")] == ["spec.maxReplicaCount"]
    assert copied[(*hpa_field, "spec.behavior")] == ["spec.advanced.horizontalPodAutoscalerConfig.behavior"]
    assert copied[(*hpa_field, "spec.metrics.0.pods.target.averageValue")] == [
        "spec.triggers.0.metadata.threshold"
    ]
    for base in ("cpu", "gpu"):
        overlay = kustomization("overlays", f"{base}-keda")
        assert overlay["resources"] == [f"../{base}"]
        assert overlay["components"] == ["../../components/keda"]
        # Not in the overlay that patches the HPA: its components would copy the HPA before the patches.
        assert "keda" not in offered(base) + kustomization("overlays", base).get("components", [])


def test_no_autoscaled_deployment_sets_its_replicas() -> None:
    """The HPA (or KEDA's) owns the worker count: a `replicas` in the Deployment would be applied again by
    every `kubectl apply`, scaling the workers down to it until the autoscaler scales them up again."""
    scaled = {
        d["spec"]["scaleTargetRef"]["name"]
        for path in [*(DEPLOY / "base").glob("*.yaml"), *COMPONENTS.rglob("*.yaml")]
        for d in load_yaml_documents(path)
        if d.get("kind") in ("HorizontalPodAutoscaler", "ScaledObject") and "$patch" not in d
    }
    assert scaled == {WORKER}
    for path in [
        *(DEPLOY / "base").glob("*.yaml"),
        *(DEPLOY / "overlays").rglob("*.yaml"),
        *COMPONENTS.rglob("*.yaml"),
    ]:
        for doc in load_yaml_documents(path):
            if doc.get("kind") == "Deployment" and doc["metadata"]["name"] in scaled:
                assert "replicas" not in doc.get("spec", {}), path


def test_the_keda_component_has_the_operator_s_prometheus_scrape_the_workers() -> None:
    """The trigger asks prometheus-operated, the Prometheus Operator's Service, whose Prometheus ignores
    prometheus.io/* annotations: the component's PodMonitor selects the workers' pods and scrapes the
    health port by its name, on /metrics, in the workers' namespace (copied from the Deployment)."""
    component = kustomization("components", "keda")
    (monitor,) = [d for file in component["resources"] for d in documents("components", "keda", file)]
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    worker = one(documents("base", "worker.yaml"), "Deployment", WORKER)
    template = worker["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = template["spec"]["containers"]
    named = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert named[endpoint["port"]] == HEALTH_PORT and endpoint["path"] == "/metrics"
    assert "namespaceSelector" not in monitor["spec"], "its own namespace: the workers'"
    (namespace,) = [r for r in component["replacements"] if r["source"]["kind"] == "Deployment"]
    assert namespace["source"] == {"kind": "Deployment", "name": WORKER, "fieldPath": "metadata.namespace"}
    assert namespace["targets"][0]["select"] == {"kind": "PodMonitor", "name": monitor["metadata"]["name"]}
    (scaled_object,) = documents("components", "keda", "scaled-object", "scaled-object.yaml")
    (trigger,) = scaled_object["spec"]["triggers"]
    assert trigger["metadata"]["serverAddress"].startswith("http://prometheus-operated.")


def test_the_scaled_object_falls_back_on_an_averagevalue_trigger() -> None:
    """Prometheus away for failureThreshold polls: KEDA holds the workers at max(current, replicas), the
    floor copied from the HPA's minReplicas. KEDA takes a fallback only on AverageValue triggers, and its
    CRD requires failureThreshold and replicas."""
    (scaled_object,) = documents("components", "keda", "scaled-object", "scaled-object.yaml")
    fallback = scaled_object["spec"]["fallback"]
    assert fallback["failureThreshold"] >= 1 and fallback["behavior"] == "currentReplicasIfHigher"
    assert all(trigger["metricType"] == "AverageValue" for trigger in scaled_object["spec"]["triggers"])
    copied = [
        r for r in kustomization("components", "keda", "scaled-object")["replacements"]
        if r["source"]["fieldPath"] == "spec.minReplicas"
    ]  # fmt: skip
    assert ["spec.fallback.replicas"] in [t["fieldPaths"] for r in copied for t in r["targets"]]
    crd = yaml.safe_load(
        "\n".join(
            line for line in (DEPLOY / "check" / "crds" / "keda.sh_scaledobjects.yaml").read_text().splitlines()
            if not line.startswith("#")
        )
    )  # fmt: skip
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(schema["fallback"]["required"]) == {"failureThreshold", "replicas"}
    assert fallback["behavior"] in schema["fallback"]["properties"]["behavior"]["enum"]


def redis_url_env(container: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A container's REDIS_PASSWORD and MEMORYOS_REDIS_URL entries, checked to come in that order (a
    $(VAR) expands only from the entries before it)."""
    names = [item["name"] for item in container.get("env", [])]
    assert names.index("REDIS_PASSWORD") < names.index("MEMORYOS_REDIS_URL"), names
    env = {item["name"]: item for item in container["env"]}
    return env["REDIS_PASSWORD"], env["MEMORYOS_REDIS_URL"]


def assert_redis_behind_its_password(docs: list[dict[str, Any]]) -> None:
    """Redis's requirepass and every MemoryOS container's URL from one Secret the render does not hold
    (the operator's); the ConfigMap holds the URL's other parts and no password; a PDB keeps the one Redis."""
    redis = one(docs, "StatefulSet", "memoryos-redis")
    (server,) = redis["spec"]["template"]["spec"]["containers"]
    args = server["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    env = {item["name"]: item for item in server["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == REDIS_SECRET
    assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == REDIS_SECRET, "the probe's redis-cli"
    assert server["readinessProbe"]["exec"]["command"][0] == "redis-cli"
    for name, container_name in MEMORYOS_WORKLOADS.items():
        (container,) = [
            c for c in one(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"]
            if c["name"] == container_name
        ]  # fmt: skip
        password, url = redis_url_env(container)
        assert password["valueFrom"]["secretKeyRef"] == REDIS_SECRET, name
        assert url["value"] == REDIS_URL, name
        (source,) = container["envFrom"]
        assert source["configMapRef"]["name"].startswith("memoryos-config"), name
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("memoryos-config")
    ]
    assert {"REDIS_SCHEME", "REDIS_USER", "REDIS_ADDRESS"} <= config["data"].keys()
    assert "MEMORYOS_REDIS_URL" not in config["data"] and "@" not in config["data"]["REDIS_ADDRESS"]
    assert not any(d["kind"] == "Secret" and d["metadata"]["name"] == REDIS_SECRET["name"] for d in docs)
    budget = one(docs, "PodDisruptionBudget", "memoryos-redis")
    labels = redis["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] == redis["spec"]["replicas"] == 1


def test_redis_takes_its_password_from_a_secret_the_operator_creates() -> None:
    """The base, read as files: the same rules as every render (test_each_render)."""
    docs = documents("base", "redis.yaml") + documents("base", "api.yaml") + documents("base", "worker.yaml")
    docs += documents("base", "maintenance.yaml")
    literals = dict(
        literal.split("=", 1) for literal in kustomization("base")["configMapGenerator"][0]["literals"]
    )
    docs.append({"kind": "ConfigMap", "metadata": {"name": "memoryos-config"}, "data": literals})
    assert_redis_behind_its_password(docs)
    assert not any(
        g["name"] in ("memoryos-redis", "memoryos-secrets") for g in kustomization("base")["secretGenerator"]
    )


def test_gpu_scheduling_options_are_components_the_gpu_overlay_offers() -> None:
    """Without GPU feature discovery no node carries nvidia.com/gpu.present, and without the GPU operator
    there may be no RuntimeClass `nvidia` (a pod naming a missing one is refused): each is a component the
    gpu overlay offers, setting that one field on the worker."""
    for name, (field, value) in GPU_OPTIONS.items():
        component = kustomization("components", name)
        assert component["kind"] == "Component"
        (patch,) = component["patches"]
        target = yaml.safe_load(patch["patch"])
        assert (target["kind"], target["metadata"]["name"]) == ("Deployment", WORKER)
        assert target["spec"]["template"]["spec"] == {field: value}
        assert name in offered("gpu") and name not in offered("cpu")


# The renders.


def kubectl() -> str | None:
    configured = os.environ.get("DEPLOY_CHECK_KUBECTL")
    if configured:
        return configured
    tools = Path(os.environ.get("DEPLOY_TOOLS_DIR", Path.home() / ".cache" / "memoryos" / "deploy-tools"))
    return str(tools / "bin" / "kubectl") if (tools / "bin" / "kubectl").exists() else shutil.which("kubectl")


Render = Callable[[str, tuple[str, ...]], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory) -> Render:
    """The resources `kubectl kustomize` renders for an overlay, with the given components added over it
    as `.ci/deploy-check` adds them (an overlay of the overlay)."""
    binary = kubectl()
    if binary is None:
        pytest.skip("no kubectl: .ci/deploy-check runs these with its pinned one (DEPLOY_CHECK_KUBECTL)")
    renders: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}

    def rendered(overlay: str, components: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        if (overlay, components) not in renders:
            target = DEPLOY / "overlays" / overlay
            if components:
                target = tmp_path_factory.mktemp(f"{overlay}-with")
                (target / "kustomization.yaml").write_text(
                    yaml.safe_dump(
                        {
                            "resources": [os.path.relpath(DEPLOY / "overlays" / overlay, target)],
                            "components": [os.path.relpath(COMPONENTS / c, target) for c in components],
                        }
                    )
                )
            result = subprocess.run(
                [binary, "kustomize", str(target)], capture_output=True, text=True, timeout=120, check=False
            )
            assert result.returncode == 0, result.stderr
            renders[(overlay, components)] = [d for d in yaml.safe_load_all(result.stdout) if d]
        return renders[(overlay, components)]

    return rendered


CASES = [(overlay, ()) for overlay in OVERLAYS] + [
    (overlay, tuple(offered(overlay))) for overlay in OVERLAYS if offered(overlay)
]
CASE_IDS = ["+".join([overlay, *components]) for overlay, components in CASES]


@pytest.mark.parametrize(("overlay", "components"), CASES, ids=CASE_IDS)
def test_each_render(render: Render, overlay: str, components: tuple[str, ...]) -> None:
    """Every overlay, alone and with what it offers: the worker on its health port; the gpu rollout; the
    storage class on both RWX claims exactly when the component is there; KEDA or the HPA, never both."""
    docs = render(overlay, components)
    assert_probed_and_scraped_on_the_health_port(docs)
    rolling = one(docs, "Deployment", WORKER)["spec"]["strategy"]["rollingUpdate"]
    gpu = overlay.startswith("gpu")
    assert rolling == ({"maxSurge": 0, "maxUnavailable": 1} if gpu else {"maxSurge": 1, "maxUnavailable": 0})

    claims = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    shared_cache = "shared-snapshot-cache" in components
    assert claims.keys() == (RWX_VOLUMES if shared_cache else RWX_VOLUMES - {"memoryos-data"})
    assert_the_workers_use_their_database(
        docs, cnpg="cloudnative-pg" in components, shared_cache=shared_cache
    )
    if "rwx-storage-class" in components:
        (value,) = documents("components", "rwx-storage-class", "storage-class.yaml")
        assert {spec.get("storageClassName") for spec in claims.values()} == {
            value["data"]["storageClassName"]
        }
    else:
        assert not any("storageClassName" in spec for spec in claims.values())
    assert not any(d["kind"] == "ConfigMap" and "local-config" in str(d["metadata"]) for d in docs)

    assert_redis_behind_its_password(docs)
    assert_redis_tls_exactly_with_its_component(docs, tls="redis-tls" in components)
    worker_pod = one(docs, "Deployment", WORKER)["spec"]["template"]["spec"]
    for option, (field, setting) in GPU_OPTIONS.items():
        assert worker_pod.get(field) == (setting if option in components else None), option
    if gpu:
        (worker_container,) = worker_pod["containers"]
        assert worker_container["resources"]["limits"]["nvidia.com/gpu"] == 1

    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    scaled_objects = [d for d in docs if d["kind"] == "ScaledObject"]
    targets = {d["spec"]["scaleTargetRef"]["name"] for d in hpas + scaled_objects}
    assert targets == {WORKER}
    assert "replicas" not in one(docs, "Deployment", WORKER)["spec"], "the autoscaler's, not apply's"
    monitors = [d for d in docs if d["kind"] == "PodMonitor"]
    if not overlay.endswith("-keda"):
        assert [h["metadata"]["name"] for h in hpas] == [WORKER] and not scaled_objects and not monitors
        return
    assert not hpas, "KEDA makes its own HPA: ours must go"
    (scaled_object,) = scaled_objects
    (monitor,) = monitors
    worker = one(docs, "Deployment", WORKER)
    assert monitor["metadata"]["namespace"] == worker["metadata"]["namespace"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items()
        <= worker["spec"]["template"]["metadata"]["labels"].items()
    )
    ports = {p["name"]: p["containerPort"] for p in worker_pod["containers"][0]["ports"]}
    assert [ports[e["port"]] for e in monitor["spec"]["podMetricsEndpoints"]] == [HEALTH_PORT]
    hpa = one(render(overlay.removesuffix("-keda"), ()), "HorizontalPodAutoscaler", WORKER)
    spec = scaled_object["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKER}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (
        hpa["spec"]["minReplicas"],
        hpa["spec"]["maxReplicas"],
    )
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["spec"]["behavior"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300, "slow scale-down"
    namespace = hpa["metadata"]["namespace"]
    assert scaled_object["metadata"]["namespace"] == namespace
    (trigger,) = spec["triggers"]
    assert trigger["metadata"]["query"] == f'sum(memoryos_queue_depth{{namespace="{namespace}"}})'
    assert trigger["metadata"]["threshold"] == hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    assert trigger["metricType"] == "AverageValue", "KEDA's fallback needs it"
    assert spec["fallback"]["replicas"] == hpa["spec"]["minReplicas"]
    assert spec["fallback"]["failureThreshold"] >= 1


def assert_redis_tls_exactly_with_its_component(docs: list[dict[str, Any]], *, tls: bool) -> None:
    """With redis-tls: Redis serves TLS alone on 6379 (the NetworkPolicy's port) with the certificate
    Secret, its probe speaks TLS, and every MemoryOS container gets rediss:// and the CA at the path the
    URL's ssl_ca_certs names. Without: plain redis://, no certificate anywhere."""
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("memoryos-config")
    ]
    redis = one(docs, "StatefulSet", "memoryos-redis")
    (server,) = redis["spec"]["template"]["spec"]["containers"]
    args = server["args"]
    mentions_tls = "memoryos-redis-tls" in yaml.safe_dump(docs)
    if not tls:
        assert config["data"]["REDIS_SCHEME"] == "redis" and "--tls-port" not in args and not mentions_tls
        return
    assert config["data"]["REDIS_SCHEME"] == "rediss"
    ca_path = re.fullmatch(r"[^?]+\?ssl_ca_certs=(/\S+)", config["data"]["REDIS_ADDRESS"])[1]  # type: ignore[index]
    assert args[args.index("--tls-port") + 1] == "6379" and args[args.index("--port") + 1] == "0"
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)", "TLS keeps the password"
    assert "--tls" in server["readinessProbe"]["exec"]["command"]
    policy = one(docs, "NetworkPolicy", "memoryos-redis")
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [6379]
    for name, container_name in MEMORYOS_WORKLOADS.items():
        pod = one(docs, "Deployment", name)["spec"]["template"]["spec"]
        (container,) = [c for c in pod["containers"] if c["name"] == container_name]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        (volume,) = [
            n for n, v in volumes.items() if v.get("secret", {}).get("secretName") == "memoryos-redis-tls"
        ]
        assert volumes[volume]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}], "never the key"
        assert f"{mounts[volume]}/ca.crt" == ca_path, name


def assert_the_workers_use_their_database(
    docs: list[dict[str, Any]], *, cnpg: bool, shared_cache: bool
) -> None:
    """The worker's MEMORYOS_DATABASE_URL from a Secret of the render (the base's generated placeholder) or
    from CloudNativePG's; no other container gets it; the data volume an emptyDir or the shared claim; every
    namespaced resource in the workers' namespace."""
    worker = one(docs, "Deployment", WORKER)
    namespace = worker["metadata"]["namespace"]
    spec = worker["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (url,) = [item for item in container["env"] if item["name"] == "MEMORYOS_DATABASE_URL"]
    reference = url["valueFrom"]["secretKeyRef"]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    if cnpg:
        assert reference == {"name": CNPG_SECRET, "key": "uri"}
        cluster = one(docs, "Cluster", CNPG_CLUSTER)
        assert cluster["metadata"]["namespace"] == namespace
        assert one(docs, "NetworkPolicy", CNPG_CLUSTER)["metadata"]["namespace"] == namespace
        assert not any(name.startswith("memoryos-database") for name in secrets), "the placeholder goes"
    else:
        assert reference["key"] == "url" and reference["name"].startswith("memoryos-database-")
        assert "url" in secrets[reference["name"]]["data"], "the generated Secret the worker names"
        assert not any(d["kind"] == "Cluster" for d in docs)
    for doc in docs:
        for pod in [(doc.get("spec") or {}).get("template", {}).get("spec", {})]:
            for other in pod.get("containers", []):
                if doc["metadata"]["name"] != WORKER:
                    assert "MEMORYOS_DATABASE_URL" not in {e["name"] for e in other.get("env", [])}
    (data,) = [volume for volume in spec["volumes"] if volume["name"] == "data"]
    if shared_cache:
        assert data == {"name": "data", "persistentVolumeClaim": {"claimName": "memoryos-data"}}
        claim = one(docs, "PersistentVolumeClaim", "memoryos-data")
        assert claim["metadata"]["namespace"] == namespace
    else:
        assert set(data) == {"name", "emptyDir"}


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_the_cloudnative_pg_cluster_validates_against_its_crd(render: Render, overlay: str) -> None:
    """The rendered Cluster against CloudNativePG's CRD (deploy/check/crds/), with the deploy tools' python
    that `.ci/deploy-check` uses (jsonschema, kubernetes-validate): a misspelled or mistyped field fails."""
    docs = render(overlay, ("cloudnative-pg",))
    result = crd_validate(docs, f"{overlay}-cnpg")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Cluster/{CNPG_CLUSTER}: valid" in result.stdout
    broken = [dict(d, spec={**d["spec"], "instance": 3}) if d["kind"] == "Cluster" else d for d in docs]
    result = crd_validate(broken, f"{overlay}-cnpg-broken")
    assert result.returncode == 1 and "'instance' was unexpected" in result.stdout + result.stderr


def crd_validate(docs: list[dict[str, Any]], name: str) -> subprocess.CompletedProcess[str]:
    """deploy/check/crd_validate.py on `docs`, with the deploy tools' python `.ci/deploy-check` uses."""
    python = Path(kubectl() or "").parent / "python"
    if not python.exists():
        pytest.skip("no deploy tools venv: .ci/deploy-check validates the render")
    rendered = Path(os.environ.get("TMPDIR", "/tmp")) / f"memoryos-{name}-{os.getpid()}.yaml"
    builtin = rendered.with_suffix(".builtin.yaml")
    try:
        rendered.write_text(yaml.safe_dump_all(docs))
        return subprocess.run(
            [str(python), str(DEPLOY / "check" / "crd_validate.py"), str(rendered), str(builtin)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        rendered.unlink(missing_ok=True)
        builtin.unlink(missing_ok=True)


@pytest.mark.parametrize("overlay", ["cpu-keda", "gpu-keda"])
def test_the_pod_monitor_validates_against_its_crd(render: Render, overlay: str) -> None:
    """The rendered PodMonitor against the Prometheus Operator's CRD (v0.93.0, deploy/check/crds/): valid
    as rendered; a misspelled field, or an endpoint's port given as a number where the CRD wants the
    port's name, fails as the API server would refuse it."""
    docs = render(overlay, ())
    result = crd_validate(docs, f"{overlay}-podmonitor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PodMonitor/{WORKER}: valid against the monitoring.coreos.com/v1 CRD" in result.stdout
    assert f"ScaledObject/{WORKER}: valid" in result.stdout, "the fallback too"
    for broken_spec, expected in [
        (
            lambda spec: {**spec, "podMetricEndpoints": spec["podMetricsEndpoints"]},
            "'podMetricEndpoints' was unexpected",
        ),
        (lambda spec: {**spec, "podMetricsEndpoints": [{"port": HEALTH_PORT}]}, "is not of type 'string'"),
    ]:
        broken = [dict(d, spec=broken_spec(d["spec"])) if d["kind"] == "PodMonitor" else d for d in docs]
        result = crd_validate(broken, f"{overlay}-podmonitor-broken")
        assert result.returncode == 1 and expected in result.stdout + result.stderr, result.stdout


def test_every_secret_volume_says_whether_it_is_optional() -> None:
    """podman kube play 4.3 (Debian bookworm's) dereferences a secret volume's unset `optional` and
    crashes on the whole file (podman #16636): each secret volume states Kubernetes' default itself."""
    secret_volumes = [
        (path.name, volume)
        for path in sorted((DEPLOY / "base").glob("*.yaml"))
        for doc in load_yaml_documents(path)
        if doc.get("kind") in ("Deployment", "StatefulSet")
        for volume in doc["spec"]["template"]["spec"].get("volumes", [])
        if "secret" in volume
    ]
    assert secret_volumes, "the API mounts its keys from a secret"
    for source, volume in secret_volumes:
        assert isinstance(volume["secret"].get("optional"), bool), f"{source}: volume {volume['name']}"
