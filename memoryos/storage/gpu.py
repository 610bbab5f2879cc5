"""Whether faiss indexes go to a GPU, and the one shared set of GPU resources they use there.

The same code runs on the CPU wheel (`faiss-cpu`, no `StandardGpuResources`; its `index_cpu_to_all_gpus`
exists but raises) and on a GPU build, so the choice is made by probing the module, never by importing a
GPU-only symbol. The faiss module is passed in so the selection can be tested without a GPU.
"""

import threading
from typing import Any, Literal

GpuPolicy = Literal["auto", "never"]

GPU_MAX_K = 2048
"""faiss GPU indexes reject k (and IVF nprobe) above this; larger searches stay on the CPU."""

_resources: Any = None
_resources_lock = threading.Lock()


def gpu_count(faiss_module: Any) -> int:
    """GPUs this faiss build can use; 0 for a CPU-only build, whatever the machine has."""
    if not hasattr(faiss_module, "StandardGpuResources") or not hasattr(faiss_module, "get_num_gpus"):
        return 0
    return int(faiss_module.get_num_gpus())


def should_use_gpu(policy: GpuPolicy, faiss_module: Any) -> bool:
    """`auto` uses a GPU exactly when faiss reports one; `never` keeps every index on the CPU."""
    if policy not in ("auto", "never"):
        raise ValueError(f"gpu_policy: expected 'auto' or 'never', got {policy!r}")
    return policy == "auto" and gpu_count(faiss_module) > 0


def shared_resources(faiss_module: Any) -> Any:
    """The process-wide `StandardGpuResources`, created on first use.

    One instance per process: each reserves scratch memory on the device, so one per index would exhaust
    the GPU with many memory spaces open.
    """
    global _resources
    with _resources_lock:
        if _resources is None:
            _resources = faiss_module.StandardGpuResources()
        return _resources


def to_gpu(index: Any, faiss_module: Any) -> Any:
    """A GPU copy of a CPU index on device 0; the CPU index is left untouched."""
    return faiss_module.index_cpu_to_gpu(shared_resources(faiss_module), 0, index)
