"""Whether faiss indexes go to a GPU, and the one shared set of GPU resources they use there.

The same code runs on the CPU wheel (`faiss-cpu`, no `StandardGpuResources`; its `index_cpu_to_all_gpus`
exists but raises) and on a GPU build, so the choice is made by probing the module, never by importing a
GPU-only symbol. The faiss module is passed in so the selection and the GPU copies can be tested without
a GPU; the CPU indexes copied are always real ones.
"""

import threading
from typing import Any, Literal

import faiss

from memoryos.storage.vectors.faiss_ivf import held_vectors

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
    """A GPU copy of a CPU index (one `faiss_ivf.py` builds) on device 0; the CPU index is left untouched.

    The IVF index (fp16 scalar quantizer) is copied by `index_cpu_to_gpu`. faiss has no GPU version of the
    flat scalar-quantizer index, so the flat id map is copied as `IndexIDMap(GpuIndexFlatIP)` over its
    decoded float32 vectors: twice the bytes of the CPU codes, but exact. `useFloat16` storage would halve
    them, yet faiss then rounds the queries to fp16 as well, so GPU and CPU scores would differ.
    """
    resources = shared_resources(faiss_module)
    if not isinstance(index, faiss.IndexIDMap):
        return faiss_module.index_cpu_to_gpu(resources, 0, index)
    ids, vectors = held_vectors(index, index.d)
    config = faiss_module.GpuIndexFlatConfig()
    config.device = 0
    copy = faiss_module.IndexIDMap(faiss_module.GpuIndexFlatIP(resources, index.d, config))
    copy.add_with_ids(vectors, ids)
    return copy
