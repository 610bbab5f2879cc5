"""The `VectorIndex` results contract, one suite run against every backend: FAISS flat, FAISS IVF (a small
ANN threshold so the approximate index serves), and ChromaDB. Indexes are opened through
`memoryos.storage.vectors.index_factory`, as a space opens them, on clustered vectors like real embeddings."""

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memoryos.config import MemoryConfig
from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.storage.vectors.faiss_index import FaissIndex, IndexSnapshotError
from memoryos.storage.vectors.index_factory import (
    CHROMA_DIRECTORY,
    close_page_index,
    finish_page_index_rebuild,
    load_page_index,
    new_page_index,
    open_page_index,
    page_snapshot_path,
)
from memoryos.storage.vectors.vector_index import VectorIndex

DIM = 32
COUNT = 600
IVF_THRESHOLD = 200
"""Below COUNT, so the faiss-ivf case serves from an IVF index (asserted in `test_backend_is_what_it_claims`)."""
SCORE_ATOL = 1e-4
REPO_ROOT = Path(__file__).resolve().parents[2]

BACKENDS = {
    "faiss-flat": {"vector_backend": "faiss", "index_ann_threshold": 10**9},
    "faiss-ivf": {"vector_backend": "faiss", "index_ann_threshold": IVF_THRESHOLD},
    "chroma": {"vector_backend": "chroma"},
}


def unit_rows(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit vectors around 12 fixed centroids (same-cluster cosine about 0.5), like embeddings of topics."""
    centroids = np.random.default_rng(0).standard_normal((12, DIM))
    rng = np.random.default_rng(seed)
    return unit_rows(centroids[rng.integers(0, 12, n)] + 0.6 * rng.standard_normal((n, DIM)))


def stored_ids(n: int) -> np.ndarray:
    """Large, sparse int64 ids: they must survive every backend's id mapping (Chroma stores strings)."""
    return np.arange(n, dtype=np.int64) * 1_000_003 + 10**12


def held_by(backend: "Opened", vectors: np.ndarray) -> np.ndarray:
    """`vectors` as `backend` holds them: FAISS rounds to fp16 on add (like the store), Chroma keeps float32."""
    return at_stored_precision(vectors) if backend.name.startswith("faiss") else vectors


def exact_top(ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return ids[np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]]


def recall(found: np.ndarray, expected: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, expected, strict=True)]))


class Opened:
    """A backend under test: its config, its space directory, and every index it opened (closed at teardown)."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.directory = directory
        self.config = MemoryConfig(data_dir=directory, faiss_use_gpu="never", **BACKENDS[name])  # type: ignore[arg-type]
        self._opened: list[VectorIndex] = []

    def new(self) -> VectorIndex:
        return self._track(new_page_index(self.config, self.directory, DIM))

    def load(self, dim: int = DIM) -> tuple[VectorIndex, int]:
        index, covered = load_page_index(self.config, self.directory, dim)
        return self._track(index), covered

    def save(self, index: VectorIndex, covered_seq: int) -> None:
        index.save(self.snapshot_path, covered_seq)

    @property
    def snapshot_path(self) -> Path:
        return page_snapshot_path(self.config, self.directory)

    def close(self, index: VectorIndex) -> None:
        close_page_index(index)

    def _track(self, index: VectorIndex) -> VectorIndex:
        self._opened.append(index)
        return index

    def close_all(self) -> None:
        for index in self._opened:
            close_page_index(index)


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opened]:
    opened = Opened(request.param, tmp_path / "space")
    opened.directory.mkdir()
    yield opened
    opened.close_all()


@pytest.fixture
def filled(backend: Opened) -> tuple[VectorIndex, np.ndarray, np.ndarray]:
    ids, vectors = stored_ids(COUNT), clustered(COUNT, seed=1)
    index = backend.new()
    index.add(ids, vectors)
    finish_page_index_rebuild(index)  # faiss-ivf: the IVF build runs in the background
    return index, ids, vectors


def test_backend_is_what_it_claims(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, _, _ = filled
    assert index.count() == COUNT and index.dim == DIM
    if backend.name.startswith("faiss"):
        assert isinstance(index, FaissIndex)
        assert index.stats()["kind"] == ("ivf" if backend.name == "faiss-ivf" else "flat")
    else:
        assert type(index).__name__ == "ChromaIndex"


def test_search_returns_nearest_neighbours_best_first_with_cosine_scores(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, ids, vectors = filled
    queries = clustered(40, seed=2)
    result = index.search(queries, 10)
    held = held_by(backend, vectors)
    expected = exact_top(ids, held, queries, 10)
    if backend.name == "faiss-flat":
        assert np.array_equal(result.ids, expected)
    else:
        assert recall(result.ids, expected) >= 0.9  # approximate backends
    assert np.all(np.diff(result.scores, axis=1) <= SCORE_ATOL)
    by_id = dict(zip(ids.tolist(), held, strict=True))
    for row, query in enumerate(queries):
        true_scores = [float(by_id[int(i)] @ query) for i in result.ids[row]]
        assert np.allclose(result.scores[row], true_scores, atol=SCORE_ATOL)
    own = index.search(vectors[:5], 1)
    assert own.ids[:, 0].tolist() == ids[:5].tolist()
    assert np.allclose(own.scores[:, 0], np.sum(held[:5] * vectors[:5], axis=1), atol=SCORE_ATOL)


def test_fewer_hits_than_k_are_padded(backend: Opened) -> None:
    index = backend.new()
    empty = index.search(clustered(1, seed=3), 3)
    assert empty.ids.tolist() == [[-1, -1, -1]] and np.all(np.isneginf(empty.scores))
    vectors = clustered(2, seed=4)
    index.add(np.array([5, 9]), vectors)
    result = index.search(vectors[:1], 4)
    assert result.ids.shape == (1, 4) and result.ids[0, 0] == 5
    assert result.ids[0, 2:].tolist() == [-1, -1] and np.all(np.isneginf(result.scores[0, 2:]))
    assert [hit_id for hit_id, _ in result.hits(0)] == [5, 9]


def test_adding_an_existing_id_replaces_its_vector(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, ids, vectors = filled
    moved = unit_rows(-vectors[:1])
    index.add(ids[:1], moved)
    assert index.count() == COUNT
    assert index.search(moved, 1).hits() == [(int(ids[0]), pytest.approx(1.0, abs=SCORE_ATOL))]
    assert ids[0] not in index.search(vectors[:1], 5).ids


def test_a_repeated_id_in_one_batch_keeps_the_last_row(backend: Opened) -> None:
    index = backend.new()
    first, last = clustered(2, seed=5)
    index.add(np.array([7, 7]), np.stack([first, last]))
    assert index.count() == 1
    assert index.search(last[None, :], 1).hits() == [(7, pytest.approx(1.0, abs=SCORE_ATOL))]


def test_remove_reports_present_ids_and_removed_ids_are_never_found(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, ids, vectors = filled
    absent = np.array([3, 4], dtype=np.int64)
    assert index.remove(np.concatenate([ids[:10], absent, ids[:2]])) == 10
    assert index.remove(absent) == 0
    assert index.count() == COUNT - 10
    found = index.search(vectors[:10], 10).ids
    assert not set(found.ravel().tolist()) & set(ids[:10].tolist())
    assert index.search(vectors[10:11], 1).ids[0, 0] == ids[10]


def test_a_spread_sample_is_every_nth_held_vector_in_id_order(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    """`spread_sample` picks what `RecordStore.page_sample` picks of the same vectors: every nth by id from
    the lowest, n the count over the size asked, all of them when there are no more; a removal is not
    held, and an added vector whose id sorts first comes first. Chroma gives none (the store's is read)."""
    index, ids, vectors = filled
    if backend.name == "chroma":
        assert index.spread_sample(10) is None
        return
    held = held_by(backend, vectors)
    shuffled = np.random.default_rng(7).permutation(COUNT)  # ids added out of order
    index.remove(ids)
    index.add(ids[shuffled], vectors[shuffled])
    finish_page_index_rebuild(index)
    assert isinstance(index, FaissIndex)
    assert index.stats()["kind"] == ("ivf" if backend.name == "faiss-ivf" else "flat")
    step = COUNT // 40
    np.testing.assert_array_equal(index.spread_sample(40), held[::step][:40])
    index.remove(ids[:1])
    index.add(np.array([5]), vectors[:1])  # sorts before every other id
    np.testing.assert_array_equal(index.spread_sample(COUNT), np.vstack([held[:1], held[1:]]))
    assert index.spread_sample(COUNT).dtype == np.float32


def test_allowed_ids_restrict_results_to_those_ids(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, ids, vectors = filled
    picks = np.random.default_rng(6).choice(COUNT, 8, replace=False)
    allowed = np.concatenate([ids[picks], [12345]])  # an id that is not stored is harmless
    queries = clustered(5, seed=7)
    result = index.search(queries, 5, allowed_ids=allowed)
    assert set(result.ids.ravel().tolist()) <= set(ids[picks].tolist())
    assert np.array_equal(result.ids, exact_top(ids[picks], vectors[picks], queries, 5))
    nothing_allowed = index.search(queries, 3, allowed_ids=np.array([], dtype=np.int64))
    assert np.all(nothing_allowed.ids == -1)
    few = index.search(queries[:1], 4, allowed_ids=ids[:2])
    assert sorted(few.ids[0, :2].tolist()) == sorted(ids[:2].tolist()) and few.ids[0, 2:].tolist() == [-1, -1]


def test_invalid_input_is_rejected(backend: Opened) -> None:
    index = backend.new()
    with pytest.raises(ValueError, match="shape"):
        index.add(np.array([1]), np.ones((1, DIM + 1), dtype=np.float32))
    with pytest.raises(ValueError, match="ids"):
        index.add(np.array([-1]), clustered(1, seed=8))
    with pytest.raises(ValueError, match="one id per vector"):
        index.add(np.array([1, 2]), clustered(1, seed=8))
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.array([1]), np.full((1, DIM), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="k"):
        index.search(clustered(1, seed=8), 0)
    assert index.count() == 0


def test_save_and_reload_serves_the_same_results(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, _, _ = filled
    queries = clustered(20, seed=9)
    before = index.search(queries, 10)
    backend.save(index, covered_seq=4242)
    backend.close(index)
    loaded, covered = backend.load()
    assert covered == 4242 and loaded.count() == COUNT
    after = loaded.search(queries, 10)
    assert np.array_equal(after.ids, before.ids)
    assert np.allclose(after.scores, before.scores, atol=SCORE_ATOL)
    assert not [p.name for p in backend.directory.iterdir() if p.name.endswith(".tmp")]


def test_a_reloaded_index_covers_at_least_what_its_snapshot_covered(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    """Rows after `covered_seq` are replayed by the space; a backend may already hold some (Chroma does)."""
    index, ids, vectors = filled
    backend.save(index, covered_seq=COUNT)
    later_ids, later = np.array([1, 2], dtype=np.int64), clustered(2, seed=10)
    index.add(later_ids, later)
    backend.close(index)
    loaded, covered = backend.load()
    assert covered == COUNT
    assert loaded.search(vectors[:3], 1).ids[:, 0].tolist() == ids[:3].tolist()
    loaded.add(later_ids, later)  # the replay: idempotent whatever the backend already held
    assert loaded.count() == COUNT + 2
    assert loaded.search(later, 1).ids[:, 0].tolist() == [1, 2]


def test_a_snapshot_written_after_later_writes_holds_what_was_there_when_it_was_taken(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    """A space takes a snapshot under its lock and writes it on another thread while writes go on."""
    index, ids, vectors = filled
    taken = index.snapshot(covered_seq=COUNT)
    later_ids, later = np.array([1, 2], dtype=np.int64), clustered(2, seed=13)
    index.add(later_ids, later)
    taken.write(backend.snapshot_path)
    backend.close(index)
    loaded, covered = backend.load()
    assert (covered, taken.covered_seq) == (COUNT, COUNT)
    expected_count = COUNT + 2 if backend.name == "chroma" else COUNT  # Chroma persisted the adds itself
    assert loaded.count() == expected_count
    assert loaded.search(vectors[:3], 1).ids[:, 0].tolist() == ids[:3].tolist()


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated", "empty"])
def test_a_damaged_snapshot_raises_index_snapshot_error(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray], damage: str
) -> None:
    index, _, _ = filled
    backend.save(index, covered_seq=COUNT)
    backend.close(index)
    path = backend.snapshot_path
    good = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"\x00not a snapshot" * 40)
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    else:
        path.write_bytes(b"")
    with pytest.raises(IndexSnapshotError):
        backend.load()
    # As a space opens it: the damaged snapshot is set aside for a fresh index the store replays into.
    opened = open_page_index(backend.config, backend.directory, DIM)
    backend._track(opened.page_index)
    assert (opened.page_index.count(), opened.covered_seq, opened.stale) == (0, 0, True)


def test_a_snapshot_of_another_dimension_raises_index_snapshot_error(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, _, _ = filled
    backend.save(index, covered_seq=1)
    backend.close(index)
    with pytest.raises(IndexSnapshotError, match="expected 16-d"):
        backend.load(dim=16)


def test_an_intact_snapshot_opens_as_not_stale(
    backend: Opened, filled: tuple[VectorIndex, np.ndarray, np.ndarray]
) -> None:
    index, _, _ = filled
    backend.save(index, covered_seq=77)
    backend.close(index)
    opened = open_page_index(backend.config, backend.directory, DIM)
    backend._track(opened.page_index)
    assert (opened.page_index.count(), opened.covered_seq, opened.stale) == (COUNT, 77, False)


# --- Chroma only: its own files, and durability without a snapshot ------------------------------------


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[Opened]:
    opened = Opened("chroma", tmp_path / "space")
    opened.directory.mkdir()
    yield opened
    opened.close_all()


@pytest.mark.parametrize("damage", ["database", "hnsw", "segment-lost", "all-lost"])
def test_a_damaged_chroma_collection_is_reported_and_recreated(chroma: Opened, damage: str) -> None:
    # Past Chroma's HNSW sync threshold (1,000 writes), so the segment files hold the vectors.
    ids, vectors = stored_ids(1500), clustered(1500, seed=11)
    index = chroma.new()
    index.add(ids, vectors)
    chroma.save(index, covered_seq=COUNT)
    chroma.close(index)
    collection_dir = chroma.directory / CHROMA_DIRECTORY
    if damage == "database":
        (collection_dir / "chroma.sqlite3").write_bytes(b"\x00not a database" * 100)
    elif damage == "hnsw":
        segment_files = list(collection_dir.glob("*/*.bin"))
        assert segment_files
        for segment_file in segment_files:
            segment_file.write_bytes(b"\x01garbage" * 10)
    else:
        for segment_dir in [p for p in collection_dir.iterdir() if p.is_dir()]:
            shutil.rmtree(segment_dir)  # the HNSW segment lost, the SQLite log kept
    if damage == "all-lost":
        shutil.rmtree(collection_dir)
    with pytest.raises(IndexSnapshotError):
        chroma.load()
    opened = open_page_index(chroma.config, chroma.directory, DIM)
    chroma._track(opened.page_index)
    assert (opened.page_index.count(), opened.stale) == (0, True)
    opened.page_index.add(ids[:3], vectors[:3])
    assert opened.page_index.search(vectors[:1], 1).ids[0, 0] == ids[0]


CHROMA_WRITER = r"""
import os, signal, sys
import numpy as np
from memoryos.config import MemoryConfig
from memoryos.storage.vectors.index_factory import new_page_index, page_snapshot_path
from tests.unit.test_vector_index_contract import DIM, clustered

directory = sys.argv[1]
config = MemoryConfig(vector_backend="chroma")
index = new_page_index(config, __import__("pathlib").Path(directory), DIM)
index.save(page_snapshot_path(config, __import__("pathlib").Path(directory)), 0)
vectors = clustered(200, seed=12)
for batch in range(10):
    rows = slice(batch * 20, batch * 20 + 20)
    index.add(np.arange(rows.start, rows.stop, dtype=np.int64), vectors[rows])
    index.remove(np.array([rows.start], dtype=np.int64))
    print(batch, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no save: only what each write persisted survives
"""


def test_chroma_persists_every_write_without_close_or_snapshot(chroma: Opened) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHROMA_WRITER, str(chroma.directory)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.split() == [str(batch) for batch in range(10)]
    loaded, covered = chroma.load()
    assert covered == 0  # the marker was never advanced: the space would replay, and it would be idempotent
    kept = np.array([i for i in range(200) if i % 20], dtype=np.int64)
    assert loaded.count() == len(kept)
    vectors = clustered(200, seed=12)
    assert loaded.search(vectors[kept], 1).ids[:, 0].tolist() == kept.tolist()
    assert np.all(loaded.search(vectors[::20], 1).ids[:, 0] % 20 != 0)
