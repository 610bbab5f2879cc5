"""Device, precision and thread choices of the embedding backend, without torch or a GPU."""

import subprocess
import sys

import pytest

from memoryos.embedding.device import (
    MAX_AUTO_TORCH_THREADS,
    ForwardPlan,
    choose_torch_threads,
    forward_plan,
    run_size,
    select_device,
    use_fp16,
    use_onnx_queries,
)


@pytest.mark.parametrize(
    ("requested", "cuda_available", "expected"),
    [
        ("auto", True, "cuda"),
        ("auto", False, "cpu"),
        ("cpu", True, "cpu"),
        ("cpu", False, "cpu"),
        ("cuda", True, "cuda"),
        ("cuda:1", True, "cuda:1"),  # torch's own names, from embedding_model_kwargs, pass through
        ("mps", False, "mps"),
    ],
)
def test_select_device(requested, cuda_available, expected):
    assert select_device(requested, cuda_available) == expected


def test_cuda_requested_without_cuda_names_the_setting():
    with pytest.raises(ValueError, match=r"^embedding_device: "):
        select_device("cuda", cuda_available=False)
    with pytest.raises(ValueError, match=r"^embedding_model_kwargs\.device: "):
        select_device("cuda", cuda_available=False, field="embedding_model_kwargs.device")


@pytest.mark.parametrize(
    ("device", "dtype_requested", "expected"),
    [("cuda", False, True), ("cuda:1", False, True), ("cpu", False, False), ("cuda", True, False)],
)
def test_fp16_only_on_cuda_and_only_when_no_dtype_was_asked_for(device, dtype_requested, expected):
    assert use_fp16(device, dtype_requested) is expected


@pytest.mark.parametrize(
    ("configured", "cpu_count", "expected"),
    [
        (8, 2, 8),  # configured wins, even above the core count
        (1, 64, 1),
        (None, 2, 2),  # one per core...
        (None, 64, MAX_AUTO_TORCH_THREADS),  # ...at most the cap
        (None, None, 1),  # unknown core count
        (None, 0, 1),
    ],
)
def test_choose_torch_threads(configured, cpu_count, expected):
    assert choose_torch_threads(configured, cpu_count) == expected


def test_importing_the_embedding_package_does_not_import_torch():
    """torch costs seconds to import; it must wait for the first encode, not slow `memoryos --help`."""
    code = "import sys, memoryos.embedding; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("requested", "device", "importable", "fp16", "expected"),
    [
        ("auto", "cpu", True, False, True),
        ("auto", "cpu", False, False, False),
        ("auto", "cuda", True, True, False),
        ("onnx", "cpu", True, False, True),
        ("torch", "cpu", True, False, False),
        ("torch", "cuda", False, True, False),
    ],
)
def test_use_onnx_queries(requested, device, importable, fp16, expected):
    assert use_onnx_queries(requested, device, importable, fp16) is expected


@pytest.mark.parametrize(("device", "importable"), [("cuda", True), ("cpu", False)])
def test_onnx_requested_where_it_cannot_run_names_the_setting(device, importable):
    with pytest.raises(ValueError, match="embedding_runtime"):
        use_onnx_queries("onnx", device, importable, fp16=device == "cuda")


@pytest.mark.parametrize(
    ("device", "expected"),
    [("cpu", 8), ("cuda", 64), ("cuda:1", 64), ("mps", 64)],
)
def test_only_the_cpu_cuts_a_batch_into_short_runs(device, expected):
    assert run_size(device, batch_size=64, cpu_run_size=8) == expected
    assert run_size("cpu", batch_size=4, cpu_run_size=8) == 4  # never more than the batch


@pytest.mark.parametrize(
    ("device", "cuda_available", "expected"),
    [
        ("cuda", True, ForwardPlan(on_cuda=True, pin_memory=True, non_blocking=True, run_size=None)),
        ("cuda:1", True, ForwardPlan(on_cuda=True, pin_memory=True, non_blocking=True, run_size=None)),
        # a CUDA device torch no longer sees (a driver gone after load): pinning would raise
        ("cuda:0", False, ForwardPlan(on_cuda=False, pin_memory=False, non_blocking=False, run_size=8)),
        ("cpu", True, ForwardPlan(on_cuda=False, pin_memory=False, non_blocking=False, run_size=8)),
        ("cpu", False, ForwardPlan(on_cuda=False, pin_memory=False, non_blocking=False, run_size=8)),
        ("mps", False, ForwardPlan(on_cuda=False, pin_memory=False, non_blocking=False, run_size=8)),
    ],
)
def test_the_engines_one_cuda_branch_is_chosen_by_device_and_detection(device, cuda_available, expected):
    assert forward_plan(device, cuda_available, cpu_run_size=8) == expected
