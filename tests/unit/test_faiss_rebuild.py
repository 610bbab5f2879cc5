"""FaissIndex's background IVF builds and nprobe calibration: writes and searches during a build, the swap,
a failed build, calibration on recent queries, and its automatic recheck when queries drift.

A build is held in flight by a gate around `build_ivf` (the test opens it), so nothing here depends on
timing: the test decides when the build may finish, and `wait_for_rebuild` installs it.
"""

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.storage.vectors import faiss_index as faiss_index_module
from memoryos.storage.vectors.faiss_index import FaissIndex
from memoryos.storage.vectors.faiss_ivf import (
    MIN_NPROBE,
    MIN_RECENT_QUERIES,
    RECALIBRATE_EVERY_QUERIES,
    RECENT_QUERIES,
    BackgroundJob,
    build_ivf,
)

DIM = 32
THRESHOLD = 1000
GATE_TIMEOUT_S = 60.0
"""Only a safety net so a failing test cannot hang: the gate is always opened by the test itself."""


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, seed: int, topics: int = 40) -> np.ndarray:
    """Unit vectors around fixed topic centroids (same-topic cosine about 0.5), like embeddings."""
    centroids = np.random.default_rng(0).standard_normal((topics, DIM))
    rng = np.random.default_rng(seed)
    return unit(centroids[rng.integers(0, topics, n)] + 0.7 * rng.standard_normal((n, DIM)))


def exact_top(held: dict[int, np.ndarray], queries: np.ndarray, k: int) -> np.ndarray:
    """Exact search over the `held` vectors as the index holds them: rounded to fp16 by `add`."""
    ids = np.array(sorted(held), dtype=np.int64)
    vectors = at_stored_precision(np.stack([held[i] for i in ids]))
    return ids[np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]]


class GatedBuild:
    """Stands in for `build_ivf`: records its arguments, then waits for `release` before building."""

    def __init__(self, real: Callable[..., Any] = build_ivf) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._real = real

    def __call__(self, ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray) -> Any:
        self.calls.append((ids, vectors, queries))
        self.entered.set()
        self.release.wait(GATE_TIMEOUT_S)
        return self._real(ids, vectors, queries)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> GatedBuild:
    gated = GatedBuild()
    monkeypatch.setattr(faiss_index_module, "build_ivf", gated)
    return gated


def test_writes_and_searches_during_a_build_are_all_in_the_swapped_index(gate: GatedBuild) -> None:
    vectors = clustered(1300, seed=1)
    held = {i: vectors[i] for i in range(THRESHOLD)}
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(THRESHOLD), vectors[:THRESHOLD])
    assert gate.entered.wait(GATE_TIMEOUT_S)
    assert index.stats()["background"] == "build"
    assert len(gate.calls[0][0]) == THRESHOLD  # the build works on a copy of what was held then

    # While the build is held: adds, removals, replacements, and a removal of an id added meanwhile.
    index.add(np.arange(1000, 1200), vectors[1000:1200])
    held |= {i: vectors[i] for i in range(1000, 1200)}
    index.remove(np.arange(0, 50))
    replacements = unit(-vectors[100:110])
    index.add(np.arange(100, 110), replacements)
    held |= dict(zip(range(100, 110), replacements, strict=True))
    index.remove(np.arange(1000, 1010))
    index.add(np.array([5]), vectors[1250:1251])  # removed above, back with another vector
    held = {i: v for i, v in held.items() if not (i < 50 or 1000 <= i < 1010)} | {5: vectors[1250]}

    queries = clustered(30, seed=2)
    during = index.search(queries, 10)  # served by the current (flat, exact) index
    assert index.stats()["kind"] == "flat" and index.stats()["background"] == "build"
    assert np.array_equal(during.ids, exact_top(held, queries, 10))

    gate.release.set()
    assert index.wait_for_rebuild()
    stats = index.stats()
    assert (stats["kind"], stats["background"], stats["count"]) == ("ivf", None, len(held))
    ids = np.array(sorted(held), dtype=np.int64)
    latest = np.stack([held[i] for i in ids])
    own = index.search(latest, 1)
    assert np.array_equal(own.ids[:, 0], ids)  # every held id, with its latest vector
    assert np.allclose(own.scores[:, 0], np.sum(at_stored_precision(latest) * latest, axis=1), rtol=1e-6)
    gone = np.array([*range(6, 50), *range(1000, 1010)], dtype=np.int64)
    assert np.all(index.search(vectors[gone], 5, allowed_ids=gone).ids == -1)
    for i in range(100, 110):  # the replacement won: the old vector scores about -1 against its id
        assert index.search(vectors[i : i + 1], 1, allowed_ids=np.array([i])).scores[0, 0] == pytest.approx(
            float(at_stored_precision(held[i]) @ vectors[i])
        )
    assert index.remove(np.array([5, 6])) == 1  # ids stay usable after the swap


def test_a_build_finished_in_the_background_is_installed_by_the_next_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs: list[BackgroundJob[Any]] = []

    class RecordedJob(BackgroundJob[Any]):
        def __init__(self, name: str, work: Callable[[], Any]) -> None:
            super().__init__(name, work)
            jobs.append(self)

    monkeypatch.setattr(faiss_index_module, "BackgroundJob", RecordedJob)
    vectors = clustered(THRESHOLD + 1, seed=3)
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(THRESHOLD), vectors[:THRESHOLD])
    assert jobs[0].wait(GATE_TIMEOUT_S)
    assert index.stats()["kind"] == "flat"  # finished, but only a write may swap it in
    index.search(vectors[:1], 1)
    assert index.stats()["kind"] == "flat"
    index.add(np.array([THRESHOLD]), vectors[THRESHOLD:])
    assert (index.stats()["kind"], index.count()) == ("ivf", THRESHOLD + 1)
    assert index.search(vectors[THRESHOLD:], 1).ids[0, 0] == THRESHOLD


def test_a_failed_build_leaves_the_flat_index_serving_and_is_retried_after_growth(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[int] = []

    def fail_first(ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray) -> Any:
        attempts.append(len(ids))
        if len(attempts) == 1:
            raise MemoryError("k-means ran out of memory")
        return build_ivf(ids, vectors, queries)

    monkeypatch.setattr(faiss_index_module, "build_ivf", fail_first)
    vectors = clustered(2 * THRESHOLD, seed=4)
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    with caplog.at_level(logging.ERROR):
        index.add(np.arange(THRESHOLD), vectors[:THRESHOLD])
        assert index.wait_for_rebuild()
    assert "ivf build failed" in caplog.text and "k-means ran out of memory" in caplog.text
    assert index.stats()["kind"] == "flat" and index.stats()["background"] is None
    queries = clustered(10, seed=5)
    held = {i: vectors[i] for i in range(THRESHOLD)}
    assert np.array_equal(index.search(queries, 10).ids, exact_top(held, queries, 10))

    index.add(np.arange(THRESHOLD, 2 * THRESHOLD - 1), vectors[THRESHOLD:-1])
    assert index.stats()["background"] is None and attempts == [THRESHOLD]  # not retried on every write
    index.add(np.array([2 * THRESHOLD - 1]), vectors[-1:])
    assert index.wait_for_rebuild()
    assert attempts == [THRESHOLD, 2 * THRESHOLD] and index.stats()["kind"] == "ivf"


def test_save_during_a_build_writes_the_current_index(gate: GatedBuild, tmp_path: Path) -> None:
    vectors = clustered(THRESHOLD, seed=6)
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(THRESHOLD), vectors)
    assert gate.entered.wait(GATE_TIMEOUT_S)
    index.save(tmp_path / "pages.faiss", covered_seq=7)
    gate.release.set()
    assert index.wait_for_rebuild()
    loaded, covered = FaissIndex.load(tmp_path / "pages.faiss", DIM, ann_threshold=THRESHOLD)
    assert covered == 7 and loaded.count() == THRESHOLD
    # Saved flat at the threshold, so the loaded index starts its own build at once.
    assert loaded.stats()["kind"] == "flat" and loaded.stats()["background"] == "build"
    assert loaded.wait_for_rebuild() and loaded.stats()["kind"] == "ivf"


def test_a_build_calibrates_on_recent_queries_when_there_are_enough(gate: GatedBuild) -> None:
    vectors = clustered(2 * THRESHOLD, seed=7)
    index = FaissIndex(DIM, ann_threshold=2 * THRESHOLD, gpu_policy="never")
    index.add(np.arange(2 * THRESHOLD - 1), vectors[:-1])
    queries = clustered(RECENT_QUERIES + 88, seed=8)
    index.search(queries[:100], 10)
    index.search(queries[:1], 10, allowed_ids=np.arange(5))  # filtered: not kept
    for row in range(100, len(queries)):
        index.search(queries[row : row + 1], 10)
    index.add(np.array([2 * THRESHOLD - 1]), vectors[-1:])
    gate.release.set()
    assert index.wait_for_rebuild()

    kept = gate.calls[0][2]
    assert len(kept) == RECENT_QUERIES  # the newest ones, each once
    assert {row.tobytes() for row in kept} == {row.tobytes() for row in queries[-RECENT_QUERIES:]}
    stats = index.stats()
    assert (stats["kind"], stats["calibrated_on"]) == ("ivf", "queries")
    assert stats["measured_recall"] is not None and stats["measured_recall"] >= 0.96
    fresh = clustered(200, seed=9)  # same distribution, never searched
    held = {i: vectors[i] for i in range(2 * THRESHOLD)}
    found, expected = index.search(fresh, 10).ids, exact_top(held, fresh, 10)
    assert np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, expected, strict=True)]) >= 0.95


def test_without_recent_queries_a_build_calibrates_on_stored_vectors_with_the_floor() -> None:
    vectors = clustered(2 * THRESHOLD, seed=10)
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(2 * THRESHOLD), vectors)
    assert index.wait_for_rebuild()
    stats = index.stats()
    assert stats["calibrated_on"] == "stored" and stats["nlist"] is not None
    assert (stats["nprobe"] or 0) >= min(MIN_NPROBE, stats["nlist"])
    assert not index.recalibrate()  # no recent queries yet


def test_an_index_calibrated_on_stored_vectors_is_recalibrated_once_queries_arrive() -> None:
    vectors = clustered(2 * THRESHOLD, seed=11)
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(2 * THRESHOLD - 1), vectors[:-1])
    assert index.wait_for_rebuild() and index.stats()["calibrated_on"] == "stored"
    index.search(clustered(MIN_RECENT_QUERIES, seed=12), 10)
    index.add(np.array([2 * THRESHOLD - 1]), vectors[-1:])  # writes start due work
    assert index.stats()["background"] == "recalibration"
    assert index.wait_for_rebuild()
    stats = index.stats()
    assert (stats["calibrated_on"], stats["background"]) == ("queries", None)
    assert stats["measured_recall"] is not None and stats["measured_recall"] >= 0.96
    assert index.recalibrate()  # on demand, with enough kept queries and nothing in flight
    assert not index.recalibrate()  # one job at a time
    assert index.wait_for_rebuild() and index.stats()["calibrated_on"] == "queries"


def test_queries_are_kept_only_once_the_index_holds_half_the_threshold(gate: GatedBuild) -> None:
    vectors = clustered(THRESHOLD, seed=13)
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(THRESHOLD // 2 - 1), vectors[: THRESHOLD // 2 - 1])
    index.search(clustered(MIN_RECENT_QUERIES, seed=14), 10)  # a small space: nothing kept
    index.add(np.arange(THRESHOLD // 2 - 1, THRESHOLD - 1), vectors[THRESHOLD // 2 - 1 : -1])
    index.search(clustered(3, seed=15), 10)
    index.add(np.array([THRESHOLD - 1]), vectors[-1:])
    gate.release.set()
    assert index.wait_for_rebuild()
    assert len(gate.calls[0][2]) == 3
    assert index.stats()["calibrated_on"] == "stored"


def recall_at_10(index: FaissIndex, held: np.ndarray, queries: np.ndarray) -> float:
    found = index.search(queries, 10).ids
    expected = exact_top(dict(enumerate(held)), queries, 10)
    return float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, expected, strict=True)]))


def drifted(n: int, seed: int) -> np.ndarray:
    """Queries off every topic (uniform on the sphere): their neighbours spread over many IVF lists."""
    return unit(np.random.default_rng(seed).standard_normal((n, DIM)))


def calibrated_on_topic_queries(vectors: np.ndarray) -> FaissIndex:
    """An IVF index over `vectors` whose build calibrated nprobe on 200 on-topic queries."""
    index = FaissIndex(DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    index.add(np.arange(THRESHOLD - 1), vectors[: THRESHOLD - 1])
    index.search(clustered(200, seed=21), 10)
    index.add(np.arange(THRESHOLD - 1, len(vectors)), vectors[THRESHOLD - 1 :])
    assert index.wait_for_rebuild()
    assert index.stats()["calibrated_on"] == "queries"
    return index


def test_query_drift_is_recalibrated_in_the_background_after_enough_new_queries() -> None:
    vectors = clustered(2 * THRESHOLD + 10, seed=20)
    index = calibrated_on_topic_queries(vectors[: 2 * THRESHOLD])
    on_topic_nprobe = index.stats()["nprobe"] or 0

    index.search(drifted(RECALIBRATE_EVERY_QUERIES - 1, seed=22), 10)
    index.add(np.array([2 * THRESHOLD]), vectors[2 * THRESHOLD : 2 * THRESHOLD + 1])
    assert index.stats()["background"] is None  # one query short
    index.search(drifted(1, seed=23), 10)
    assert index.stats()["background"] is None  # due now, but a search never starts it
    index.add(np.array([2 * THRESHOLD + 1]), vectors[2 * THRESHOLD + 1 : 2 * THRESHOLD + 2])
    assert index.stats()["background"] == "recalibration"
    assert index.wait_for_rebuild()

    stats = index.stats()
    assert (stats["kind"], stats["calibrated_on"], stats["background"]) == ("ivf", "queries", None)
    assert (stats["nprobe"] or 0) > on_topic_nprobe  # drifted queries need more lists
    assert stats["measured_recall"] is not None and stats["measured_recall"] >= 0.96
    assert recall_at_10(index, vectors[: 2 * THRESHOLD + 2], drifted(200, seed=24)) >= 0.95
    index.add(np.array([2 * THRESHOLD + 2]), vectors[2 * THRESHOLD + 2 : 2 * THRESHOLD + 3])
    assert index.stats()["background"] is None  # the count starts again from the recalibration


def test_a_due_recalibration_waits_for_the_build_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    vectors = clustered(4 * THRESHOLD + 1, seed=25)
    index = calibrated_on_topic_queries(vectors[: 2 * THRESHOLD])
    started: list[tuple[str, int]] = []  # each job's name, and how many jobs were unfinished then
    jobs: list[BackgroundJob[Any]] = []

    class RecordedJob(BackgroundJob[Any]):
        def __init__(self, name: str, work: Callable[[], Any]) -> None:
            started.append((name, sum(not job.done() for job in jobs)))
            super().__init__(name, work)
            jobs.append(self)

    gate = GatedBuild()
    monkeypatch.setattr(faiss_index_module, "BackgroundJob", RecordedJob)
    monkeypatch.setattr(faiss_index_module, "build_ivf", gate)
    index.add(np.arange(2 * THRESHOLD, 4 * THRESHOLD), vectors[2 * THRESHOLD : -1])  # doubled: retrain
    assert gate.entered.wait(GATE_TIMEOUT_S)
    index.search(drifted(RECALIBRATE_EVERY_QUERIES, seed=26), 10)
    index.add(np.array([4 * THRESHOLD]), vectors[-1:])  # recalibration due, build still held
    assert index.stats()["background"] == "build" and started == [("ivf build", 0)]

    gate.release.set()
    assert index.wait_for_rebuild()  # installs the build, then runs the recalibration it makes due
    assert started == [("ivf build", 0), ("nprobe recalibration", 0)]
    stats = index.stats()
    assert (stats["count"], stats["calibrated_on"], stats["background"]) == (len(vectors), "queries", None)


def test_a_loaded_snapshot_keeps_its_nprobe_but_not_its_calibration_source(tmp_path: Path) -> None:
    index = calibrated_on_topic_queries(clustered(2 * THRESHOLD, seed=27))
    index.save(tmp_path / "pages.faiss", covered_seq=1)
    loaded, _ = FaissIndex.load(tmp_path / "pages.faiss", DIM, ann_threshold=THRESHOLD, gpu_policy="never")
    saved, restored = index.stats(), loaded.stats()
    assert (restored["nprobe"], restored["measured_recall"]) == (saved["nprobe"], saved["measured_recall"])
    assert restored["calibrated_on"] == "stored"  # the file records no source and no queries
    loaded.search(clustered(MIN_RECENT_QUERIES, seed=28), 10)
    loaded.remove(np.array([0]))  # a write starts the due recalibration
    assert loaded.stats()["background"] == "recalibration"
    assert loaded.wait_for_rebuild() and loaded.stats()["calibrated_on"] == "queries"
