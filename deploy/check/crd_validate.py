"""The custom resources of a rendered manifest, validated against the CRDs in deploy/check/crds/; the rest
written out for kubernetes-validate, which knows the built-in kinds only (.ci/deploy-check).

    python deploy/check/crd_validate.py RENDERED.yaml BUILTIN_OUT.yaml   # exit 1: a resource is invalid

Runs in the deploy tools venv (jsonschema and kubernetes-validate, pinned in .ci/deploy-check). A custom
resource (its apiVersion's group is a vendored CRD's) is checked as the API server does under strict field
validation, kubectl's default: its CRD version's openAPIV3Schema, where an object with `properties` takes
no other field (unless `x-kubernetes-preserve-unknown-fields`), so a misspelled field fails as kubectl
apply would refuse it; its `metadata` against Kubernetes' own ObjectMeta (kubernetes-validate's strict
schema). Vendored: KEDA's ScaledObject CRD, CloudNativePG's Cluster CRD, the Prometheus Operator's PodMonitor
CRD. Not evaluated: the CRDs' CEL rules (`x-kubernetes-validations`) and what a scaler does with its
trigger's `metadata` (a map of strings in the CRD; KEDA reads it at run time). Every other document goes to
BUILTIN_OUT as kubectl printed it.
"""

import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

CRDS = Path(__file__).resolve().parent / "crds"


def strict_schema(node: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 (structural) schema of a CRD as a JSON Schema that refuses unknown fields."""
    schema: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            schema[key] = {name: strict_schema(sub) for name, sub in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and isinstance(value, dict)):
            schema[key] = strict_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            schema[key] = [strict_schema(sub) for sub in value]
        elif not key.startswith("x-kubernetes-") and key != "nullable":
            schema[key] = value  # type, enum, pattern, bounds, description: kept as they are
    if node.get("x-kubernetes-int-or-string"):
        schema["type"] = ["integer", "string"]
    if node.get("nullable") and isinstance(schema.get("type"), str):
        schema["type"] = [schema["type"], "null"]
    open_object = node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node
    if node.get("type") == "object" and not open_object:
        schema["additionalProperties"] = False
    return schema


def load_crds() -> dict[tuple[str, str, str], tuple[Path, dict[str, Any]]]:
    """(group, version, kind) -> (file, strict schema) of every served version of the vendored CRDs."""
    found = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served", True):
                    schema = strict_schema(version["schema"]["openAPIV3Schema"])
                    # metadata is ObjectMeta, checked on its own (the CRD says only `type: object`).
                    schema["properties"]["metadata"] = {"type": "object"}
                    found[(group, version["name"], kind)] = (path, schema)
    return found


def where(path: Any) -> str:
    return ".".join(str(part) for part in path) or "(root)"


def check(resource: dict[str, Any], path: Path, schema: dict[str, Any]) -> list[str]:
    errors = [
        f"{where(error.absolute_path)}: {error.message} (deploy/check/crds/{path.name})"
        for error in sorted(
            jsonschema.Draft7Validator(schema).iter_errors(resource), key=lambda e: list(map(str, e.path))
        )
    ]
    # The same ObjectMeta schema kubernetes-validate holds a built-in kind's metadata to.
    try:
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": resource.get("metadata", {})},
            kubernetes_validate.latest_version(),
            strict=True,
        )
    except kubernetes_validate.ValidationError as error:
        errors.append(f"{where(error.absolute_path)}: {error.message} (ObjectMeta)")
    return errors


def main(rendered: Path, builtin_out: Path) -> int:
    crds = load_crds()
    groups = {group for group, _, _ in crds}
    builtin, failed = [], False
    for text in re.split(r"^---\n", rendered.read_text(), flags=re.M):
        resource = yaml.safe_load(text)
        if not resource:
            continue
        group, _, version = str(resource.get("apiVersion", "")).rpartition("/")
        if group not in groups:
            builtin.append(text)
            continue
        kind = resource.get("kind")
        name = f"{kind}/{resource.get('metadata', {}).get('name')}"
        if (group, version, kind) not in crds:
            print(
                f"ERROR {rendered.name}: {name}: no CRD in deploy/check/crds/ serves {group}/{version} {kind}"
            )
            failed = True
            continue
        errors = check(resource, *crds[(group, version, kind)])
        for error in errors:
            print(f"ERROR {rendered.name}: {name}: {error}")
        failed |= bool(errors)
        if not errors:
            print(f"    {name}: valid against the {group}/{version} CRD (deploy/check/crds/)")
    builtin_out.write_text("---\n".join(builtin))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
