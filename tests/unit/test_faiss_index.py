"""FaissIndex against exact numpy search, on clustered vectors like real embeddings (uniform random vectors
are IVF's worst case, and no embedding model produces them)."""

import os
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest

from memoryos.storage.atomic import atomic_write_bytes
from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.storage.vectors import faiss_index as faiss_index_module
from memoryos.storage.vectors import faiss_snapshot
from memoryos.storage.vectors.faiss_index import FaissIndex, IndexSnapshotError
from memoryos.storage.vectors.faiss_ivf import HASHTABLE_DIRECT_MAP
from memoryos.storage.vectors.faiss_snapshot import SnapshotHeader, snapshot_bytes

DIM = 384


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, centroids: np.ndarray, seed: int, noise: float = 1.0) -> np.ndarray:
    """Unit vectors around random centroids; noise 1.0 puts same-cluster cosines near 0.5."""
    rng = np.random.default_rng(seed)
    members = centroids[rng.integers(0, len(centroids), n)]
    return unit(members + noise * rng.standard_normal((n, centroids.shape[1])))


def centroids(count: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, dim))


def exact_top(ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Exact search over `vectors` as the index holds them: rounded to fp16 by `add`."""
    return ids[np.argsort(-(queries @ at_stored_precision(vectors).T), axis=1)[:, :k]]


def held_score(query: np.ndarray, vector: np.ndarray) -> float:
    """The score of a stored `vector` against `query`: their inner product after `add` rounded the vector."""
    return float(at_stored_precision(vector).ravel() @ query.ravel())


def recall_at_10(found: np.ndarray, expected: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, expected, strict=True)]))


@pytest.fixture
def small() -> tuple[FaissIndex, np.ndarray, np.ndarray]:
    vectors = clustered(300, centroids(10), seed=1)
    ids = np.arange(300, dtype=np.int64) * 1_000_003 + 10**12
    index = FaissIndex(DIM, gpu_policy="never")
    index.add(ids, vectors)
    return index, ids, vectors


def test_search_returns_exact_neighbours_best_first(small: tuple[FaissIndex, np.ndarray, np.ndarray]) -> None:
    index, ids, vectors = small
    queries = clustered(20, centroids(10), seed=2)
    result = index.search(queries, 10)
    assert np.array_equal(result.ids, exact_top(ids, vectors, queries, 10))
    assert np.all(np.diff(result.scores, axis=1) <= 0)
    assert index.stats()["kind"] == "flat"


def test_fewer_hits_than_k_are_padded() -> None:
    index = FaissIndex(DIM, gpu_policy="never")
    assert index.search(unit(np.ones((1, DIM))), 3).ids.tolist() == [[-1, -1, -1]]
    vectors = clustered(2, centroids(2), seed=3)
    index.add(np.array([5, 9]), vectors)
    result = index.search(vectors[:1], 4)
    assert result.ids[0, 0] == 5 and result.ids[0, 2:].tolist() == [-1, -1]
    assert np.all(np.isneginf(result.scores[0, 2:]))
    assert [hit_id for hit_id, _ in result.hits(0)] == [5, 9]


def test_adding_an_existing_id_replaces_it(small: tuple[FaissIndex, np.ndarray, np.ndarray]) -> None:
    index, ids, vectors = small
    new_vector = unit(-vectors[:1])
    index.add(ids[:1], new_vector)
    assert index.count() == 300
    assert index.search(new_vector, 1).hits() == [
        (int(ids[0]), pytest.approx(held_score(new_vector, new_vector)))
    ]
    assert ids[0] not in index.search(vectors[:1], 5).ids


def test_repeated_id_in_one_batch_keeps_the_last_row() -> None:
    index = FaissIndex(DIM, gpu_policy="never")
    vectors = clustered(2, centroids(2), seed=4)
    index.add(np.array([7, 7]), vectors)
    assert index.count() == 1
    assert index.search(vectors[1:], 1).hits()[0][1] == pytest.approx(held_score(vectors[1], vectors[1]))


def test_remove_counts_only_present_ids(small: tuple[FaissIndex, np.ndarray, np.ndarray]) -> None:
    index, ids, vectors = small
    assert index.remove(np.array([ids[0], ids[1], 42])) == 2
    assert index.remove(np.array([ids[0]])) == 0
    assert index.count() == 298
    found = index.search(vectors[:2], 300).ids
    assert ids[0] not in found and ids[1] not in found


def test_allowed_ids_restrict_results(small: tuple[FaissIndex, np.ndarray, np.ndarray]) -> None:
    index, ids, vectors = small
    allowed = ids[100:110]
    result = index.search(vectors[:3], 5, allowed_ids=np.append(allowed, 77))
    assert np.array_equal(result.ids, exact_top(allowed, vectors[100:110], vectors[:3], 5))
    assert index.search(vectors[:1], 5, allowed_ids=np.array([], dtype=np.int64)).ids.tolist() == [[-1] * 5]


def test_float64_input_is_accepted(small: tuple[FaissIndex, np.ndarray, np.ndarray]) -> None:
    index, ids, vectors = small
    assert index.search(vectors[:1].astype(np.float64), 1).ids[0, 0] == ids[0]


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda index: index.add(np.array([1]), np.zeros((1, DIM - 1), np.float32)), "vectors"),
        (lambda index: index.add(np.array([1]), np.zeros((1, DIM), np.int64)), "vectors"),
        (lambda index: index.add(np.array([1]), np.full((1, DIM), np.nan, np.float32)), "vectors"),
        (lambda index: index.add(np.array([1]), np.full((1, DIM), 1e5, np.float32)), "vectors"),
        (lambda index: index.add(np.array([1.0]), np.zeros((1, DIM), np.float32)), "ids"),
        (lambda index: index.add(np.array([-1]), np.zeros((1, DIM), np.float32)), "ids"),
        (lambda index: index.add(np.array([1, 2]), np.zeros((1, DIM), np.float32)), "ids"),
        (lambda index: index.search(np.zeros(DIM, np.float32), 1), "queries"),
        (lambda index: index.search(np.zeros((1, DIM), np.float32), 0), "k"),
        (lambda index: index.search(np.zeros((1, DIM), np.float32), 1, np.array([0.5])), "allowed_ids"),
        (lambda index: index.remove(np.array([[1]])), "ids"),
    ],
)
def test_invalid_input_names_the_argument(call: Callable[[FaissIndex], object], argument: str) -> None:
    with pytest.raises(ValueError, match=f"^{argument}:"):
        call(FaissIndex(DIM, gpu_policy="never"))


@pytest.mark.parametrize("threshold", [50000, 500])
def test_vectors_are_held_rounded_to_fp16_through_every_rebuild(threshold: int) -> None:
    """Flat, IVF built from the flat index's vectors, then flat again from the IVF index's vectors: each
    scores exactly as an exact search over the fp16-rounded vectors, never the float32 input."""
    vectors = clustered(1100, centroids(20), seed=11)
    assert not np.array_equal(at_stored_precision(vectors), vectors)
    ids = np.arange(1100, dtype=np.int64) * 5
    index = FaissIndex(DIM, ann_threshold=threshold, gpu_policy="never")
    index.add(ids, vectors)
    assert index.wait_for_rebuild()
    assert index.stats()["kind"] == ("flat" if threshold == 50000 else "ivf")
    queries = clustered(20, centroids(20), seed=12)
    result = index.search(queries, 10)
    by_id = dict(zip(ids.tolist(), vectors, strict=True))
    for row, query in enumerate(queries):
        expected = [held_score(query, by_id[int(i)]) for i in result.ids[row]]
        assert np.allclose(result.scores[row], expected, rtol=1e-6, atol=1e-7)

    index.remove(ids[:900])  # IVF falls back to flat from the vectors it read back
    assert index.stats()["kind"] == "flat"
    result = index.search(queries, 10)
    assert np.array_equal(result.ids, exact_top(ids[900:], vectors[900:], queries, 10))
    expected_scores = np.sort(queries @ at_stored_precision(vectors[900:]).T, axis=1)[:, ::-1][:, :10]
    assert np.allclose(result.scores, expected_scores, rtol=1e-6, atol=1e-7)


def test_switch_to_ivf_keeps_ids_and_recall() -> None:
    topics = centroids(300)  # more topics than IVF lists, so one list per query is not enough
    vectors = clustered(2500, topics, seed=5)
    ids = np.arange(2500, dtype=np.int64) * 3 + 1
    index = FaissIndex(DIM, ann_threshold=2000, gpu_policy="never")
    index.add(ids[:1500], vectors[:1500])
    index.add(ids[1500:], vectors[1500:])
    assert index.wait_for_rebuild()

    stats = index.stats()
    assert stats["kind"] == "ivf" and stats["count"] == 2500
    assert stats["nprobe"] is not None and 1 < stats["nprobe"] < (stats["nlist"] or 0)
    assert stats["measured_recall"] is not None and stats["measured_recall"] >= 0.95
    queries = clustered(200, topics, seed=6)  # not stored: calibration never saw them
    assert recall_at_10(index.search(queries, 10).ids, exact_top(ids, vectors, queries, 10)) >= 0.95
    assert np.array_equal(index.search(vectors[::50], 1).ids[:, 0], ids[::50])

    assert index.remove(ids[:100]) == 100
    index.add(ids[100:101], unit(-vectors[100:101]))
    assert index.count() == 2400
    assert index.search(unit(-vectors[100:101]), 1).ids[0, 0] == ids[100]
    assert not np.isin(ids[:100], index.search(vectors[:100], 10).ids).any()

    allowed = ids[2000:2030]  # a selective filter is answered exactly, not from nprobe lists only
    result = index.search(queries[:20], 10, allowed_ids=allowed)
    assert np.array_equal(result.ids, exact_top(allowed, vectors[2000:2030], queries[:20], 10))


def test_ivf_retrains_as_it_grows_and_returns_to_flat_when_emptied() -> None:
    vectors = clustered(1100, centroids(20), seed=7)
    ids = np.arange(1100, dtype=np.int64)
    index = FaissIndex(DIM, ann_threshold=500, gpu_policy="never")
    index.add(ids[:500], vectors[:500])
    assert index.wait_for_rebuild()
    nlist_at_switch = index.stats()["nlist"]
    index.add(ids[500:], vectors[500:])
    assert index.wait_for_rebuild()
    assert index.stats()["kind"] == "ivf"
    assert (index.stats()["nlist"] or 0) > (nlist_at_switch or 0)
    assert np.array_equal(index.search(vectors[::100], 1).ids[:, 0], ids[::100])

    index.remove(ids[:900])
    assert index.stats()["kind"] == "flat"
    assert np.array_equal(index.search(vectors[900:], 1).ids[:, 0], ids[900:])


@pytest.mark.parametrize("threshold", [50000, 200])
def test_snapshot_round_trip(tmp_path: Path, threshold: int) -> None:
    vectors = clustered(400, centroids(8), seed=8)
    ids = np.arange(400, dtype=np.int64) + 5
    index = FaissIndex(DIM, ann_threshold=threshold, gpu_policy="never")
    index.add(ids, vectors)
    assert index.wait_for_rebuild()
    index.save(tmp_path / "pages.faiss", covered_seq=1234)

    loaded, covered_seq = FaissIndex.load(tmp_path / "pages.faiss", DIM, ann_threshold=threshold)
    assert covered_seq == 1234
    assert loaded.stats() == index.stats()
    queries = clustered(10, centroids(8), seed=9)
    before, after = index.search(queries, 10), loaded.search(queries, 10)
    assert np.array_equal(before.ids, after.ids)
    assert loaded.remove(ids[:3]) == 3
    assert [name for name in os.listdir(tmp_path)] == ["pages.faiss"]
    # fp16 codes: 2 bytes per dimension plus ids, maps and centroids; float32 vectors alone are 4.
    assert (tmp_path / "pages.faiss").stat().st_size < 400 * DIM * 3


def float32_index(kind: str, ids: np.ndarray, vectors: np.ndarray) -> faiss.Index:
    """The index types snapshots held before the index stored fp16 codes."""
    if kind == "flat":
        index = faiss.IndexIDMap(faiss.IndexFlatIP(DIM))
    else:
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, 4, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.set_direct_map_type(HASHTABLE_DIRECT_MAP)
    index.add_with_ids(vectors, ids)
    return index


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.parametrize("version", [1, faiss_snapshot.FORMAT_VERSION])
def test_a_float32_snapshot_from_before_fp16_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, version: int
) -> None:
    """Under its own version-1 header or the current one, so the space rebuilds from the store."""
    ids, vectors = np.arange(300, dtype=np.int64), clustered(300, centroids(4), seed=13)
    trained_count = 0 if kind == "flat" else 300
    payload = faiss.serialize_index(float32_index(kind, ids, vectors))
    monkeypatch.setattr(faiss_snapshot, "FORMAT_VERSION", version)
    path = tmp_path / "pages.faiss"
    path.write_bytes(snapshot_bytes(SnapshotHeader(DIM, 7, trained_count, None), payload))
    monkeypatch.undo()
    message = f"not a version-{faiss_snapshot.FORMAT_VERSION}" if version == 1 else "unexpected index type"
    with pytest.raises(IndexSnapshotError, match=message):
        FaissIndex.load(path, DIM)


@pytest.mark.parametrize("cut", [0.5, 1.0])
def test_a_checksummed_payload_faiss_cannot_read_is_an_index_snapshot_error(
    tmp_path: Path, cut: float
) -> None:
    """A payload whose checksum holds but which faiss cannot read (cut short, or not an index at all) is
    refused, not raised as faiss's RuntimeError: the space rebuilds from the store."""
    ids, vectors = np.arange(50, dtype=np.int64), clustered(50, centroids(4), seed=3)
    index = FaissIndex(DIM)
    index.add(ids, vectors)
    whole = faiss.serialize_index(index._index)
    payload = whole[: int(len(whole) * cut)] if cut < 1.0 else np.frombuffer(b"not an index" * 40, np.uint8)
    path = tmp_path / "pages.faiss"
    path.write_bytes(snapshot_bytes(SnapshotHeader(DIM, 7, 0, None), payload))
    with pytest.raises(IndexSnapshotError, match="unreadable index snapshot"):
        FaissIndex.load(path, DIM)


def corrupt_payload(data: bytes) -> bytes:
    return data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]


def corrupt_covered_seq(data: bytes) -> bytes:
    return data[:14] + bytes([data[14] ^ 0x01]) + data[15:]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-100],
        lambda data: data[:20],
        corrupt_payload,
        corrupt_covered_seq,
        lambda _: b"x" * 99,
    ],
    ids=["truncated", "header-only", "payload-bit-flip", "header-bit-flip", "foreign-file"],
)
def test_damaged_snapshot_is_rejected(
    tmp_path: Path, small: tuple[FaissIndex, np.ndarray, np.ndarray], damage: Callable[[bytes], bytes]
) -> None:
    index, _, _ = small
    path = tmp_path / "pages.faiss"
    index.save(path, covered_seq=1)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(IndexSnapshotError):
        FaissIndex.load(path, DIM)


def test_missing_or_other_dimension_snapshot_is_rejected(
    tmp_path: Path, small: tuple[FaissIndex, np.ndarray, np.ndarray]
) -> None:
    with pytest.raises(IndexSnapshotError, match="cannot read"):
        FaissIndex.load(tmp_path / "absent.faiss", DIM)
    small[0].save(tmp_path / "pages.faiss", covered_seq=1)
    with pytest.raises(IndexSnapshotError, match="384-d"):
        FaissIndex.load(tmp_path / "pages.faiss", 768)


@pytest.mark.parametrize("failing_call", ["fsync", "replace"])
def test_failed_atomic_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: str
) -> None:
    path = tmp_path / "pages.faiss"
    atomic_write_bytes(path, b"old")

    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, failing_call, fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["pages.faiss"]


def test_failed_save_keeps_previous_snapshot_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: tuple[FaissIndex, np.ndarray, np.ndarray]
) -> None:
    index, ids, _ = small
    path = tmp_path / "pages.faiss"
    index.save(path, covered_seq=1)
    index.remove(ids[:10])

    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        index.save(path, covered_seq=2)
    monkeypatch.undo()
    loaded, covered_seq = FaissIndex.load(path, DIM)
    assert (loaded.count(), covered_seq) == (300, 1)


def test_gpu_copy_serves_unfiltered_searches_and_follows_mutations(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU branch with a CPU clone standing in for the GPU copy: same results, no stale copy."""
    uploads: list[object] = []

    def fake_to_gpu(index: faiss.Index, _module: object) -> object:
        uploads.append(faiss.clone_index(index))
        return uploads[-1]

    monkeypatch.setattr(faiss_index_module, "should_use_gpu", lambda *_: True)
    monkeypatch.setattr(faiss_index_module, "to_gpu", fake_to_gpu)
    vectors = clustered(120, centroids(5), seed=10)
    ids = np.arange(120, dtype=np.int64)
    index = FaissIndex(DIM)
    index.add(ids[:100], vectors[:100])

    def assert_exact(held: np.ndarray) -> None:
        assert np.array_equal(index.search(vectors, 5).ids, exact_top(ids[held], vectors[held], vectors, 5))

    assert_exact(np.arange(100))
    index.add(ids[100:], vectors[100:])  # a pure add is mirrored, not re-uploaded
    assert_exact(np.arange(120))
    assert len(uploads) == 1
    index.remove(ids[:10])
    assert_exact(np.arange(10, 120))
    assert len(uploads) == 2
    index.search(vectors[:1], 5, allowed_ids=ids[50:60])  # filters run on the CPU index
    assert len(uploads) == 2


def test_every_thread_searches_with_the_configured_faiss_threads():
    """OpenMP thread counts are per thread: an ingest or request thread would otherwise use every core."""
    from concurrent.futures import ThreadPoolExecutor

    from memoryos.storage.vectors import faiss_ivf

    index = FaissIndex(DIM)
    index.add(np.arange(10), clustered(10, centroids(2), seed=1))
    previous = faiss_ivf._configured_threads
    faiss_ivf.set_faiss_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            seen = pool.submit(
                lambda: (index.search(unit(np.ones((1, DIM))), 3), faiss.omp_get_max_threads())
            )
            assert seen.result()[1] == 1
    finally:
        faiss_ivf._configured_threads = previous


def test_a_space_index_sets_the_configured_faiss_threads(tmp_path: Path) -> None:
    """A space's config sets the process's count as its FAISS index is made or loaded (`index_factory.py`
    passes `omp_threads`), so the space code itself never imports faiss."""
    from memoryos.config import MemoryConfig
    from memoryos.storage.vectors import faiss_ivf
    from memoryos.storage.vectors.index_factory import load_page_index, new_page_index, page_snapshot_path

    config = MemoryConfig(data_dir=tmp_path, faiss_omp_threads=1)
    previous = faiss_ivf._configured_threads
    try:
        faiss_ivf._configured_threads = None
        index = new_page_index(config, tmp_path, DIM)
        assert faiss_ivf._configured_threads == 1
        index.save(page_snapshot_path(config, tmp_path), covered_seq=0)
        faiss_ivf._configured_threads = None
        load_page_index(config, tmp_path, DIM)
        assert faiss_ivf._configured_threads == 1
    finally:
        faiss_ivf._configured_threads = previous
