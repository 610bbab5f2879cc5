"""`choose_route`: how the embedder gets its encoder, for every runtime, device and torch installation."""

import pytest

from memoryos.embedding.device import choose_route
from memoryos.errors import MemoryOSError


@pytest.mark.parametrize(
    ("runtime", "device", "cpu_known", "expected"),
    [
        ("auto", "cpu", True, "manifest-or-torch"),
        ("onnx", "cpu", True, "manifest-or-torch"),
        ("auto", "auto", True, "manifest-or-torch"),  # no GPU can be there
        ("auto", "auto", False, "torch"),  # a GPU may be there: torch decides
        ("auto", "cuda", False, "torch"),
        ("onnx", "cuda:1", False, "torch"),  # use_onnx_queries refuses it later, as before
        ("torch", "cpu", True, "torch"),
        ("torch", "auto", False, "torch"),
    ],
)
def test_with_torch_installed_the_route_is_todays(runtime, device, cpu_known, expected):
    assert choose_route(runtime, device, cpu_known, torch_importable=True) == expected


@pytest.mark.parametrize("runtime", ["auto", "onnx"])
@pytest.mark.parametrize(("device", "cpu_known"), [("cpu", True), ("auto", True), ("auto", False)])
def test_without_torch_the_cpu_builds_its_export(runtime, device, cpu_known):
    """ "auto" on a host that may have a GPU still means the CPU: nothing else could use the GPU."""
    assert choose_route(runtime, device, cpu_known, torch_importable=False) == "manifest-or-build"


@pytest.mark.parametrize("device", ["cpu", "auto", "cuda"])
def test_without_torch_the_torch_runtime_is_refused(device):
    with pytest.raises(
        MemoryOSError, match=r"embedding_runtime: 'torch' needs PyTorch.*pip install -e '[^']*\[torch\]"
    ):
        choose_route("torch", device, device == "cpu", torch_importable=False)


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_without_torch_a_device_only_torch_drives_is_refused_naming_the_field(device):
    with pytest.raises(
        MemoryOSError,
        match=rf"embedding_model_kwargs.device: '{device}' needs PyTorch.*pip install -e '[^']*\[torch\].*CUDA",
    ):
        choose_route("auto", device, False, torch_importable=False, field="embedding_model_kwargs.device")
