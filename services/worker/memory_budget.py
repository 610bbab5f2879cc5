"""How much memory each worker process's open spaces may hold: `MEMORYOS_WORKER_MEMORY_BUDGET_MB` where it
is set, else a share of the container's memory limit read at start.

A budget fixed in the manifests drifted from the limit beside it: the GPU pod ran 4 processes of 3 GiB
each plus the embedding engine against a 16 GiB limit, so the kernel, not the pools, decided what closed.
Read from the cgroup, the budget follows the limit whatever the number of processes: the limit less what
loads the model (the engine once, or each process without one) and each process's own memory, split over
the processes. Without a limit (a host, a container run without one) the setting's default stays.
"""

from dataclasses import dataclass
from pathlib import Path

from services.queue.settings import QueueSettings

CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where a container sees its own cgroup: cgroup v2's `memory.max` here, v1's under `memory/`."""
UNLIMITED_BYTES = 1 << 60
"""A v1 limit at least this large means none: v1 writes "unlimited" as the largest page-aligned size."""
SMALLEST_BUDGET_MB = 256
"""A derived budget below this is refused at start: the limit does not fit the processes asked for, and a
process holding a few spaces would reopen them on nearly every write."""
MIB = 1024 * 1024


@dataclass(frozen=True)
class MemoryBudget:
    """Each worker process's budget for its open spaces, and where it came from (said at start)."""

    per_process_mb: int
    source: str

    def __str__(self) -> str:
        return f"open spaces up to {self.per_process_mb} MiB per process ({self.source})"


def container_memory_limit(cgroup_root: Path = CGROUP_ROOT) -> int | None:
    """The memory limit of the cgroup mounted at `cgroup_root`, in bytes: cgroup v2's `memory.max`, else
    v1's `memory/memory.limit_in_bytes`; None when there is no limit ("max", v1's unlimited) or no such
    file (not in a container, or a cgroup without the memory controller)."""
    for limit_file in (cgroup_root / "memory.max", cgroup_root / "memory" / "memory.limit_in_bytes"):
        try:
            text = limit_file.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            limit = int(text)
        except ValueError:
            raise ValueError(f"{limit_file}: expected a size in bytes or 'max', got {text!r}") from None
        return limit if limit < UNLIMITED_BYTES else None
    return None


def memory_budget(
    settings: QueueSettings, embedding_engine: bool, cgroup_root: Path = CGROUP_ROOT
) -> MemoryBudget:
    """The open spaces' budget of each of `settings.worker_processes` processes: the setting where it was
    set (environment or argument), else the container's limit less the model's share (once with the
    `embedding_engine`, else once per process) and each process's own, split over the processes; without
    a limit, the setting's default. ValueError, naming the settings, when the limit leaves a process
    less than `SMALLEST_BUDGET_MB`."""
    if "worker_memory_budget_mb" in settings.model_fields_set:
        return MemoryBudget(settings.worker_memory_budget_mb, "MEMORYOS_WORKER_MEMORY_BUDGET_MB")
    limit = container_memory_limit(cgroup_root)
    if limit is None:
        return MemoryBudget(settings.worker_memory_budget_mb, "no container memory limit: the default")
    processes = settings.worker_processes
    models = 1 if embedding_engine else processes
    limit_mb = limit // MIB
    left_mb = (
        limit_mb - models * settings.worker_model_memory_mb - processes * settings.worker_process_memory_mb
    )
    per_process_mb = left_mb // processes
    if per_process_mb < SMALLEST_BUDGET_MB:
        raise ValueError(
            f"worker_memory_budget_mb: the container's {limit_mb} MiB memory limit leaves {max(per_process_mb, 0)} "
            f"MiB for each of {processes} worker processes' open spaces (at least {SMALLEST_BUDGET_MB}) after "
            f"{models} × worker_model_memory_mb {settings.worker_model_memory_mb} and {processes} × "
            f"worker_process_memory_mb {settings.worker_process_memory_mb}; raise the limit, lower "
            "MEMORYOS_WORKER_PROCESSES, or set MEMORYOS_WORKER_MEMORY_BUDGET_MB"
        )
    model_part = f"{settings.worker_model_memory_mb} MiB for the model" + (
        "" if models == 1 else f" × {models}"
    )
    return MemoryBudget(
        per_process_mb,
        f"the container's {limit_mb} MiB limit less {model_part} and {settings.worker_process_memory_mb} MiB "
        f"per process, over {processes} process{'es' if processes > 1 else ''}",
    )
