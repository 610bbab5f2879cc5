"""The worker processes' memory budget read from a cgroup: each test writes the files a container sees
(cgroup v2's `memory.max`, v1's `memory/memory.limit_in_bytes`) in a temp directory standing for
/sys/fs/cgroup, and reads them as the worker does at start."""

from pathlib import Path

import pytest
import yaml

from services.queue.settings import QueueSettings
from services.worker.memory_budget import MemoryBudget, container_memory_limit, memory_budget

GIB = 1024**3


@pytest.fixture(autouse=True)
def no_budget_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own `MEMORYOS_*` settings must not decide what these tests read."""
    for name in (
        "MEMORYOS_WORKER_MEMORY_BUDGET_MB",
        "MEMORYOS_WORKER_PROCESSES",
        "MEMORYOS_WORKER_MODEL_MEMORY_MB",
        "MEMORYOS_WORKER_PROCESS_MEMORY_MB",
    ):
        monkeypatch.delenv(name, raising=False)


def cgroup_v2(root: Path, memory_max: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "memory.max").write_text(f"{memory_max}\n")
    return root


def cgroup_v1(root: Path, limit_in_bytes: str) -> Path:
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{limit_in_bytes}\n")
    return root


def test_cgroup_v2_limit_is_read_in_bytes(tmp_path: Path) -> None:
    assert container_memory_limit(cgroup_v2(tmp_path, str(16 * GIB))) == 16 * GIB


def test_cgroup_v2_max_means_no_limit(tmp_path: Path) -> None:
    assert container_memory_limit(cgroup_v2(tmp_path, "max")) is None


def test_cgroup_v1_limit_is_read_where_v2_has_none(tmp_path: Path) -> None:
    assert container_memory_limit(cgroup_v1(tmp_path, str(8 * GIB))) == 8 * GIB


def test_cgroup_v1_unlimited_means_no_limit(tmp_path: Path) -> None:
    """v1 writes "unlimited" as the largest page-aligned size (what this repository's CI host shows)."""
    assert container_memory_limit(cgroup_v1(tmp_path, "9223372036854771712")) is None


def test_no_cgroup_files_means_no_limit(tmp_path: Path) -> None:
    assert container_memory_limit(tmp_path) is None


def test_a_limit_file_that_is_not_a_size_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"memory\.max: expected a size in bytes or 'max', got 'lots'"):
        container_memory_limit(cgroup_v2(tmp_path, "lots"))


def test_the_gpu_pods_limit_is_split_between_the_engine_and_the_processes(tmp_path: Path) -> None:
    """The GPU overlay: 16 GiB, 4 processes and one engine. Before, 4 × 3 GiB of open spaces plus the
    engine and the processes themselves went past the limit; now 16384 − 3072 (the model, once) − 4 ×
    1024 (each process) = 9216 MiB, 2304 each."""
    settings = QueueSettings(worker_processes=4)
    budget = memory_budget(settings, embedding_engine=True, cgroup_root=cgroup_v2(tmp_path, str(16 * GIB)))
    assert budget == MemoryBudget(
        2304,
        "the container's 16384 MiB limit less 3072 MiB for the model and 1024 MiB per process, over 4 processes",
    )
    assert str(budget).startswith("open spaces up to 2304 MiB per process (the container's 16384 MiB limit")
    total_mb = (
        4 * budget.per_process_mb + settings.worker_model_memory_mb + 4 * settings.worker_process_memory_mb
    )
    assert total_mb <= 16 * 1024


def test_without_the_engine_each_process_holds_its_model(tmp_path: Path) -> None:
    settings = QueueSettings(worker_processes=2, worker_model_memory_mb=1000, worker_process_memory_mb=500)
    budget = memory_budget(settings, embedding_engine=False, cgroup_root=cgroup_v1(tmp_path, str(8 * GIB)))
    assert budget.per_process_mb == (8192 - 2 * 1000 - 2 * 500) // 2
    assert "1000 MiB for the model × 2" in budget.source


def test_one_process_takes_the_whole_remainder(tmp_path: Path) -> None:
    """The base (CPU) manifest: one process with its own model in 8 GiB."""
    budget = memory_budget(
        QueueSettings(), embedding_engine=False, cgroup_root=cgroup_v2(tmp_path, str(8 * GIB))
    )
    assert budget.per_process_mb == 8192 - 3072 - 1024
    assert budget.source.endswith("over 1 process")


def test_an_explicit_budget_wins_over_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = cgroup_v2(tmp_path, str(16 * GIB))
    assert memory_budget(QueueSettings(worker_memory_budget_mb=4096), True, root) == MemoryBudget(
        4096, "MEMORYOS_WORKER_MEMORY_BUDGET_MB"
    )  # set to the default's value, still explicit
    monkeypatch.setenv("MEMORYOS_WORKER_MEMORY_BUDGET_MB", "3072")
    assert memory_budget(QueueSettings(worker_processes=4), True, root).per_process_mb == 3072


def test_without_a_limit_the_default_stays(tmp_path: Path) -> None:
    assert memory_budget(QueueSettings(worker_processes=4), True, tmp_path) == MemoryBudget(
        4096, "no container memory limit: the default"
    )
    assert memory_budget(QueueSettings(), False, cgroup_v2(tmp_path, "max")).per_process_mb == 4096


def test_a_limit_too_small_for_the_processes_is_refused_naming_the_settings(tmp_path: Path) -> None:
    root = cgroup_v2(tmp_path, str(6 * GIB))
    with pytest.raises(ValueError) as refused:
        memory_budget(QueueSettings(worker_processes=4), True, root)
    assert str(refused.value) == (
        "worker_memory_budget_mb: the container's 6144 MiB memory limit leaves 0 MiB for each of 4 worker "
        "processes' open spaces (at least 256) after 1 × worker_model_memory_mb 3072 and 4 × "
        "worker_process_memory_mb 1024; raise the limit, lower MEMORYOS_WORKER_PROCESSES, or set "
        "MEMORYOS_WORKER_MEMORY_BUDGET_MB"
    )


def test_the_gpu_overlays_pod_is_budgeted_from_its_limit_with_faiss_in_ram(tmp_path: Path) -> None:
    """The manifests as shipped: no budget set in the base or the GPU overlay, so the GPU pod's 4
    processes split its 16Gi limit with the engine (the sum fits), and the overlay keeps faiss in RAM."""
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    (base,) = [
        d
        for d in yaml.safe_load_all((deploy / "base" / "worker.yaml").read_text())
        if d["kind"] == "Deployment"
    ]
    (gpu,) = yaml.safe_load_all((deploy / "overlays" / "gpu" / "worker-gpu.yaml").read_text())
    (base_container,) = base["spec"]["template"]["spec"]["containers"]
    (gpu_container,) = gpu["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in base_container["env"] + gpu_container["env"]}
    assert "MEMORYOS_WORKER_MEMORY_BUDGET_MB" not in env
    assert env["MEMORYOS_FAISS_USE_GPU"] == "never"
    limit = gpu_container["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    processes = int(env["MEMORYOS_WORKER_PROCESSES"])
    settings = QueueSettings(worker_processes=processes)
    root = cgroup_v2(tmp_path, str(int(limit.removesuffix("Gi")) * GIB))
    budget = memory_budget(settings, embedding_engine=True, cgroup_root=root)
    used_mb = (
        processes * (budget.per_process_mb + settings.worker_process_memory_mb)
        + settings.worker_model_memory_mb
    )
    assert used_mb <= int(limit.removesuffix("Gi")) * 1024
    assert f"= {budget.per_process_mb} MiB" in (deploy / "overlays" / "gpu" / "worker-gpu.yaml").read_text()
