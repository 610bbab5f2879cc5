"""Where and how the embedding model runs: device, precision and CPU threads.

Pure decisions over facts the caller supplies (is CUDA there? how many cores?), so they are unit-tested
without a GPU and this module never imports torch: the backend asks torch at load time and passes the
answers in.
"""

from typing import Literal

DEVICE_REQUESTS = ("auto", "cpu", "cuda")
"""Device requests resolved here; any other name ("cuda:1", "mps") is torch's own and used as given."""

MAX_AUTO_TORCH_THREADS = 4
"""Thread cap when `torch_threads` is unset: one thread per core oversubscribes large hosts that run several
processes (MemoryConfig.torch_threads: oversubscription made encodes 15x slower)."""


def select_device(requested: str, cuda_available: bool, field: str = "embedding_device") -> str:
    """Resolve a device request (`embedding_device`, or a `device` in `embedding_model_kwargs`, named by
    `field`) to a torch device name.

    An explicit "cuda" on a host without CUDA fails instead of silently falling back to a CPU that may be
    orders of magnitude slower for the deployment that asked for a GPU. Names outside `DEVICE_REQUESTS`
    pass through, and torch judges them when the model loads.
    """
    if requested not in DEVICE_REQUESTS:
        return requested
    if requested == "cpu":
        return "cpu"
    if requested == "cuda":
        if not cuda_available:
            raise ValueError(
                f"{field}: 'cuda' was requested but torch sees no CUDA device; "
                "ask for 'auto' or 'cpu', or install a CUDA build of torch"
            )
        return "cuda"
    return "cuda" if cuda_available else "cpu"


def use_fp16(device: str, dtype_requested: bool = False) -> bool:
    """Half precision on CUDA only: it halves GPU memory and time there, while on CPU it is slower.

    A dtype the caller asked for (`model_kwargs` in `embedding_model_kwargs`) is kept as asked.
    """
    return not dtype_requested and (device == "cuda" or device.startswith("cuda:"))


def choose_torch_threads(configured: int | None, cpu_count: int | None) -> int:
    """Intra-op threads for torch: the configured value, else one per core up to `MAX_AUTO_TORCH_THREADS`.

    `cpu_count` is None when the OS cannot tell (as `os.cpu_count()` may return); one thread is then safe.
    """
    if configured is not None:
        return max(configured, 1)
    return max(1, min(cpu_count or 1, MAX_AUTO_TORCH_THREADS))


def use_onnx_queries(
    requested: Literal["auto", "torch", "onnx"], device: str, onnx_importable: bool, fp16: bool
) -> bool:
    """Whether query encodes run on ONNX Runtime rather than PyTorch.

    On CPU a one-query MiniLM encode took 19–23 ms in eager PyTorch and 7.5 ms in ONNX Runtime with the
    same vectors: per-operator overhead, not arithmetic, dominates short texts. On CUDA (fp16) PyTorch stays:
    the exported graph is fp32 and CPU-only. An explicit "onnx" that cannot be honoured is an error, like an
    explicit "cuda" without CUDA.
    """
    if requested == "torch":
        return False
    possible = device == "cpu" and not fp16 and onnx_importable
    if requested == "onnx" and not possible:
        raise ValueError(
            "embedding_runtime: 'onnx' needs the CPU device and the onnxruntime and onnx packages; "
            f"got device {device!r}, onnx importable: {onnx_importable}"
        )
    return possible
