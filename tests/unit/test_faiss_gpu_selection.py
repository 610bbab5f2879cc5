"""GPU selection probes the faiss module, so every build is exercised here with small fake modules; the
worker's choice for its processes (faiss in RAM with several, unless configured) with real settings."""

from types import SimpleNamespace

import faiss
import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.storage.vectors import gpu
from memoryos.storage.vectors.faiss_ivf import build_ivf, new_flat
from services.queue.settings import QueueSettings
from services.worker.process import worker_faiss


def gpu_build(num_gpus: int) -> SimpleNamespace:
    """A fake GPU build; a CPU `IndexFlatIP` stands in for its `GpuIndexFlatIP`, so copies can be searched."""
    created: list[object] = []
    flat_indexes: list[tuple[object, int, SimpleNamespace]] = []

    def make_resources() -> object:
        created.append(object())
        return created[-1]

    def make_gpu_flat_ip(resources: object, dim: int, config: SimpleNamespace) -> faiss.Index:
        flat_indexes.append((resources, dim, config))
        return faiss.IndexFlatIP(dim)

    return SimpleNamespace(
        get_num_gpus=lambda: num_gpus,
        StandardGpuResources=make_resources,
        index_cpu_to_gpu=lambda resources, device, index: ("gpu", resources, device, index),
        GpuIndexFlatConfig=SimpleNamespace,
        GpuIndexFlatIP=make_gpu_flat_ip,
        IndexIDMap=faiss.IndexIDMap,
        created=created,
        flat_indexes=flat_indexes,
    )


def stored_rows(n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.random.default_rng(0).standard_normal((n, dim))
    return np.arange(n, dtype=np.int64) * 7 + 3, at_stored_precision(
        rows / np.linalg.norm(rows, axis=1)[:, None]
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


def test_a_flat_index_is_copied_as_a_gpu_flat_ip_index_over_its_decoded_vectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """faiss GPU has no flat scalar-quantizer index: the copy must answer exactly as the fp16 CPU index."""
    monkeypatch.setattr(gpu, "_resources", None)
    fake = gpu_build(1)
    ids, vectors = stored_rows(50, 16)
    cpu_index = new_flat(16)
    cpu_index.add_with_ids(vectors, ids)

    copy = gpu.to_gpu(cpu_index, fake)

    ((resources, dim, config),) = fake.flat_indexes
    assert resources is fake.created[0] and dim == 16 and config.device == 0
    found_scores, found_ids = copy.search(vectors[:10], 5)
    expected_scores, expected_ids = cpu_index.search(vectors[:10], 5)
    assert np.array_equal(found_ids, expected_ids) and found_ids[:, 0].tolist() == ids[:10].tolist()
    assert np.allclose(found_scores, expected_scores, atol=1e-6)
    copy.add_with_ids(vectors[:1], np.array([999]))  # later adds are mirrored onto the copy by id
    assert copy.search(vectors[:1], 2)[1][0].tolist() in ([999, ids[0]], [ids[0], 999])


def test_an_ivf_index_is_copied_by_index_cpu_to_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_resources", None)
    fake = gpu_build(1)
    ids, vectors = stored_rows(400, 16)
    ivf_index, _ = build_ivf(ids, vectors, np.empty((0, 16), dtype=np.float32))
    assert gpu.to_gpu(ivf_index, fake) == ("gpu", fake.created[0], 0, ivf_index)
    assert not fake.flat_indexes


def worker_process_on_a_gpu(
    processes: int, monkeypatch: pytest.MonkeyPatch, faiss_use_gpu: str | None
) -> bool:
    """Whether one of `processes` worker processes, on a host whose faiss build sees a GPU, puts its
    indexes there, with `MEMORYOS_FAISS_USE_GPU` as given (None: unset)."""
    monkeypatch.delenv("MEMORYOS_FAISS_USE_GPU", raising=False)
    if faiss_use_gpu is not None:
        monkeypatch.setenv("MEMORYOS_FAISS_USE_GPU", faiss_use_gpu)
    config = worker_faiss(MemoryConfig(), QueueSettings(worker_processes=processes))
    return gpu.should_use_gpu(config.faiss_use_gpu, gpu_build(1))


def test_several_worker_processes_keep_faiss_in_ram_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU pod's 4 processes: each would hold a CUDA context and faiss's scratch of its own beside the
    engine's model. Unset, faiss stays in RAM; `auto` set explicitly still puts it on the GPU."""
    assert not worker_process_on_a_gpu(4, monkeypatch, None)
    assert worker_process_on_a_gpu(4, monkeypatch, "auto")
    assert not worker_process_on_a_gpu(4, monkeypatch, "never")


def test_one_worker_process_follows_the_faiss_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert worker_process_on_a_gpu(1, monkeypatch, None)
    assert not worker_process_on_a_gpu(1, monkeypatch, "never")
