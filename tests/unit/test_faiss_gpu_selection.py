"""GPU selection probes the faiss module, so every build is exercised here with small fake modules."""

from types import SimpleNamespace

import faiss
import pytest

from memoryos.storage import gpu


def gpu_build(num_gpus: int) -> SimpleNamespace:
    created: list[object] = []

    def make_resources() -> object:
        created.append(object())
        return created[-1]

    return SimpleNamespace(
        get_num_gpus=lambda: num_gpus,
        StandardGpuResources=make_resources,
        index_cpu_to_gpu=lambda resources, device, index: ("gpu", resources, device, index),
        created=created,
    )


def test_cpu_wheel_without_gpu_symbols_selects_cpu() -> None:
    cpu_wheel = SimpleNamespace(get_num_gpus=lambda: 4)  # no StandardGpuResources
    assert gpu.gpu_count(cpu_wheel) == 0
    assert not gpu.should_use_gpu("auto", cpu_wheel)


def test_gpu_wheel_on_a_machine_without_gpus_selects_cpu() -> None:
    assert gpu.gpu_count(gpu_build(0)) == 0
    assert not gpu.should_use_gpu("auto", gpu_build(0))


def test_gpu_wheel_with_gpus_follows_the_policy() -> None:
    assert gpu.gpu_count(gpu_build(2)) == 2
    assert gpu.should_use_gpu("auto", gpu_build(2))
    assert not gpu.should_use_gpu("never", gpu_build(2))


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="gpu_policy"):
        gpu.should_use_gpu("always", gpu_build(1))  # type: ignore[arg-type]


def test_installed_faiss_cpu_selects_cpu_without_raising() -> None:
    assert gpu.gpu_count(faiss) == 0
    assert not gpu.should_use_gpu("auto", faiss)


def test_gpu_copies_share_one_resources_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_resources", None)
    fake = gpu_build(1)
    first, second = gpu.to_gpu("index-a", fake), gpu.to_gpu("index-b", fake)
    assert len(fake.created) == 1
    assert first == ("gpu", fake.created[0], 0, "index-a")
    assert second[1] is first[1]
