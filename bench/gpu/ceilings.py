"""The device's own ceilings (dense matmul FLOP/s, copy bandwidth), its description, the problem
sizes and the timing helpers every `bench.gpu.report` section uses."""

import os
import platform
import subprocess
import time
from collections.abc import Callable
from typing import Any


class Sizes:
    """Problem sizes: full for a GPU report, tiny for a CPU smoke run."""

    def __init__(self, tiny: bool) -> None:
        self.matmul_n = 1024 if tiny else 8192
        self.copy_bytes = (64 if tiny else 2048) * 2**20
        self.batch_sizes: tuple[int, ...] = (1, 8) if tiny else (1, 8, 32, 128, 512, 2048)
        self.text_words = 16 if tiny else 120
        self.min_texts = 4 if tiny else 256
        self.max_texts = 64 if tiny else 8192
        """Texts per timed pass: 8 batches, within these bounds."""
        self.engine_texts = 32 if tiny else 3024
        self.engine_batch_sizes: tuple[int, ...] = (8, 16) if tiny else (16, 64, 256, 512)
        """Chunk sizes for the engine; each below the 756 distinct pages, so no chunk holds a duplicate."""
        self.raw_batch_sizes: tuple[int, ...] = (8, 32) if tiny else (64, 256, 1024)
        self.faiss_n = 20_000 if tiny else 1_000_000
        self.faiss_dims: tuple[int, ...] = (384,) if tiny else (384, 1024)
        self.faiss_queries: tuple[int, ...] = (1, 16) if tiny else (1, 16, 64, 256, 4096)
        self.sq_max_queries = 16 if tiny else 64
        """The fp16 scalar-quantizer scan has no BLAS path: larger batches would take minutes on a CPU."""
        self.repeats = 3 if tiny else 5
        self.search_repeats = 3
        self.batcher_sources = 8 if tiny else 1000
        self.pages_per_source = 3
        self.batch1_texts = 8 if tiny else 300
        """Texts for the raw batch-1 row (one forward pass each): a prefix of the batcher's texts."""
        self.batcher_raw_batch_sizes: tuple[int, ...] = (8, 24) if tiny else (64, 256, 1024, 3000)
        self.chunk = 8 if tiny else 64
        """Texts per call of the per-chunk rows: the engine's default `embedding_batch_size`."""
        self.batcher_limits: tuple[tuple[int | None, int | None], ...] = (
            ((None, None), (16, None)) if tiny else ((None, None), (256, None), (1024, 131072))
        )
        """(max_batch_size, max_batch_tokens) of each batcher row; None: the engine's default."""
        self.spaces = 3 if tiny else 200
        self.turns_per_space = 2 if tiny else 5
        self.timeout_s = 300.0
        """Longest wait for a pooled run or the spaces to finish: a stuck batcher fails the section."""


def best_seconds(
    run: Callable[[], object], repeats: int, sync: Callable[[], None], *, warm_up: bool = True
) -> float:
    """Fastest of `repeats` timed runs, after one untimed run unless the caller warmed up already: the
    ceiling, not the average."""
    if warm_up:
        run()
        sync()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - started)
    return best


def device_sync(device: str) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def matmul_ceiling(device: str, n: int, repeats: int, dtype_name: str | None = None) -> dict[str, Any]:
    import torch

    dtype = getattr(torch, dtype_name) if dtype_name else torch.float16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = best_seconds(lambda: torch.mm(a, b), repeats, device_sync(device))
    return {"dtype": str(dtype).removeprefix("torch."), "n": n, "flops_per_s": 2 * n**3 / seconds}


def bandwidth_ceiling(device: str, nbytes: int, repeats: int) -> dict[str, Any]:
    import torch

    source = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source), repeats, device_sync(device))
    return {"bytes_copied": nbytes, "bytes_per_s": 2 * nbytes / seconds}


def release(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def faiss_gpus() -> int:
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _nvidia_smi() -> dict[str, str]:
    query = "name,driver_version,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    name, driver, memory = (part.strip() for part in out.splitlines()[0].split(","))
    return {"nvidia_smi_name": name, "driver": driver, "gpu_memory": memory}


def device_description(device: str) -> dict[str, Any]:
    import faiss
    import torch

    described: dict[str, Any] = {
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "sentence_transformers": _package_version("sentence-transformers"),
        "transformers": _package_version("transformers"),
        "faiss": getattr(faiss, "__version__", "unknown"),
        "faiss_threads": faiss.omp_get_max_threads(),
        "faiss_gpus": faiss_gpus(),
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        described["gpu"] = torch.cuda.get_device_name(0)
        described["cuda"] = torch.version.cuda
        described["multiprocessors"] = properties.multi_processor_count
        described |= _nvidia_smi()
    return described
