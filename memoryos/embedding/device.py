"""Where and how the embedding model runs: device, precision and CPU threads.

Pure decisions over facts the caller supplies (is CUDA there? how many cores?), so they are unit-tested
without a GPU and this module never imports torch: the backend asks torch at load time and passes the
answers in.
"""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from memoryos.errors import MemoryOSError, extra_install_command

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


def requested_device(embedding_device: str, model_kwargs: Mapping[str, object]) -> tuple[str, str]:
    """The device asked for and the setting that asked: the `device` of `embedding_model_kwargs` wins over
    `embedding_device` (the backend's `select_device` and the engine's `no_gpu_for` read it alike)."""
    if "device" in model_kwargs:
        return str(model_kwargs["device"]), "embedding_model_kwargs.device"
    return embedding_device, "embedding_device"


def no_gpu_for(embedding_device: str, model_kwargs: Mapping[str, object], gpu_present: bool) -> str | None:
    """Why the requested device cannot be had on this host, known before torch is imported, or None: a
    CUDA device asked for (`requested_device`) where no GPU can be (`gpu_present` false:
    `gpu_may_be_present`). Torch would refuse it too, but only after its and sentence-transformers'
    imports, seconds of CPU at every start of an engine child that cannot start, which the supervisor
    restarts until it gives up. Any other device name is torch's to judge."""
    device, field = requested_device(embedding_device, model_kwargs)
    if gpu_present or not (device == "cuda" or device.startswith("cuda:")):
        return None
    return (
        f"{field}: {device!r} was requested but this host has no GPU device; ask for 'auto' or 'cpu', or "
        "give the container the GPU"
    )


def use_fp16(device: str, dtype_requested: bool = False) -> bool:
    """Half precision on CUDA only: it halves GPU memory and time there, while on CPU it is slower.

    A dtype the caller asked for (`model_kwargs` in `embedding_model_kwargs`) is kept as asked.
    """
    return not dtype_requested and (device == "cuda" or device.startswith("cuda:"))


def run_size(device: str, batch_size: int, cpu_run_size: int) -> int:
    """Texts per model run on `device`: on a CPU at most `cpu_run_size`, elsewhere the whole batch.

    Why: a run pads every text to its longest, and attention grows with the square of that width. A GPU
    computes the padding in parallel and gains from wide runs; a CPU computes every padded token, so
    short runs are faster there (`python -m bench.engine.cpu_runs`, docs/engine.md).
    """
    return min(batch_size, cpu_run_size) if device == "cpu" else batch_size


@dataclass(frozen=True)
class ForwardPlan:
    """How the embedding engine feeds a PyTorch model batches it tokenized ahead (`forward_plan`)."""

    on_cuda: bool
    """The model runs on a CUDA device: tensors go there, and every other field is about that copy."""
    pin_memory: bool
    """Prepared tensors are put in page-locked memory on the preparing thread, so the copy to the GPU is a
    DMA that overlaps the previous batch's kernels instead of a staged copy on the encoding thread."""
    non_blocking: bool
    """The host-to-device copy is queued without waiting (only safe from pinned memory)."""
    run_size: int | None
    """Texts per model run (None: the whole batch in one run): a CPU's runs stay short (`run_size`)."""


def forward_plan(device: str, cuda_available: bool, cpu_run_size: int) -> ForwardPlan:
    """The engine's one CUDA branch, decided from the model's device (as torch reports it) and whether
    torch sees CUDA: pinned, non-blocking copies and whole-batch runs on CUDA; plain tensors and runs of
    `cpu_run_size` anywhere else. A "cuda" device without CUDA available (a broken driver after load)
    gets the CPU plan: pinning memory would raise there."""
    on_cuda = cuda_available and (device == "cuda" or device.startswith("cuda:"))
    return ForwardPlan(
        on_cuda=on_cuda,
        pin_memory=on_cuda,
        non_blocking=on_cuda,
        run_size=None if on_cuda else max(cpu_run_size, 1),
    )


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

    On CPU ONNX Runtime gives the same vectors several times faster for a query: per-operator overhead,
    not arithmetic, dominates short texts (docs/engine.md). On CUDA (fp16) PyTorch stays:
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


GPU_DEVICE_PATHS = ("/proc/driver/nvidia/gpus", "/dev/nvidia0", "/dev/kfd")
"""What a host with a GPU torch could use shows without importing torch: the NVIDIA driver's list of GPUs
and device nodes, and ROCm's kernel driver node (torch's "cuda" on AMD)."""


def gpu_may_be_present(
    environ: Mapping[str, str] | None = None, paths: Sequence[str] = GPU_DEVICE_PATHS
) -> bool:
    """Whether torch might see a GPU, decided without importing torch (a few stat calls).

    False only when no GPU can be there: none of `paths` exists (an empty NVIDIA GPU list counts as
    absent), or CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES hides every device ("" or "-1"). A True is
    only a "maybe": the caller then lets torch decide, as before.
    """
    env = os.environ if environ is None else environ
    for variable in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if env.get(variable, None) is not None and env[variable].strip() in ("", "-1"):
            return False
    for path in paths:
        try:
            if os.path.isdir(path):
                if os.listdir(path):
                    return True
            elif os.path.exists(path):
                return True
        except OSError:
            return True  # cannot tell: let torch decide
    return False


def cpu_without_torch(
    requested: str, kwargs_device: str | None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether the embedding model will run on the CPU, known without importing torch: a `device` in
    `embedding_model_kwargs` (which wins) or `embedding_device` of "cpu", or "auto" on a host where no GPU
    can be (`gpu_may_be_present`). "cuda" and any other device name leave the choice to torch."""
    device = kwargs_device if kwargs_device is not None else requested
    if device == "cpu":
        return True
    return device == "auto" and not gpu_may_be_present(environ)


Route = Literal["torch", "manifest-or-torch", "manifest-or-build"]
"""How the embedder gets its encoder (`choose_route`)."""

TORCH_EXTRA = extra_install_command("torch")
"""What installs PyTorch and sentence-transformers, which a plain install goes without."""


def choose_route(
    runtime: Literal["auto", "torch", "onnx"],
    device: str,
    cpu_known: bool,
    torch_importable: bool,
    field: str = "embedding_device",
) -> Route:
    """How the embedder gets its encoder, from the configured `runtime` and `device` (the `device` of
    `embedding_model_kwargs` when set, named by `field`), whether the model is known to run on the CPU
    without asking torch (`cpu_without_torch`), and whether torch and sentence-transformers are installed.

    - "torch": PyTorch only (`embedding_runtime` "torch", or a device torch must judge: CUDA, "auto" where
      a GPU may be).
    - "manifest-or-torch": on CPU with PyTorch installed, a verified torch-free manifest when one fits, else
      PyTorch, which makes and checks the export for the next process.
    - "manifest-or-build": on CPU without PyTorch, a verified manifest when one fits, else the export and
      manifest built without it (`onnx/torch_free.py`). Without torch, "auto" can only mean the CPU.

    Raises MemoryOSError when the configuration needs PyTorch and it is not installed.
    """
    if torch_importable:
        return "manifest-or-torch" if cpu_known and runtime != "torch" else "torch"
    if runtime == "torch":
        raise MemoryOSError(
            f"embedding_runtime: 'torch' needs PyTorch, which is not installed: {TORCH_EXTRA}"
        )
    if device not in ("cpu", "auto"):
        raise MemoryOSError(
            f"{field}: {device!r} needs PyTorch, which is not installed; without it the model runs on the CPU "
            f"('cpu' or 'auto'). Install it with {TORCH_EXTRA} (on a GPU host, the image's CUDA build of torch)"
        )
    return "manifest-or-build"
