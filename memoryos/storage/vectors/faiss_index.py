"""`FaissIndex`: exact inner-product search while small, a self-calibrated IVF index past a size threshold.

Below `ann_threshold` vectors the index is `IndexIDMap(IndexScalarQuantizer)`: exact, and cheap to mutate.
From the threshold on it is an `IndexIVFScalarQuantizer` whose `nprobe` is calibrated to a measured recall
(`faiss_ivf.py`). Both hold fp16 codes, the precision the store keeps: `add` rounds its input to it.

Builds run off the write path, because they take minutes at 1M vectors:
- When a build is due (the threshold is reached, or an IVF index doubled since it was trained), the held
  (ids, vectors) are copied and a daemon thread trains, adds and calibrates on the copy. The current index
  keeps serving searches and taking writes; every add and remove meanwhile is also kept in a journal.
- The next `add`, `remove` or `snapshot`/`save` installs a finished build (callers give those write
  exclusivity), as does `wait_for_rebuild`: the journal is replayed onto the new index in order, so a
  removal made during the build stays removed and a replacement wins, and the new index replaces the
  current one. `search` never swaps.
- nprobe is recalibrated on recent queries without retraining (`recalibrate`): once `MIN_RECENT_QUERIES`
  arrived after a calibration on stored vectors, every `RECALIBRATE_EVERY_QUERIES` after one on queries;
  started by a write, never a search. One background job at a time; a failed one is logged and the
  current index keeps serving (a failed build is retried after `RETRAIN_GROWTH` times more growth).
- Falling back to flat (below half the threshold) stays synchronous: it copies vectors, trains nothing.

Index types and their ids: `new_flat` and `build_ivf` in `faiss_ivf.py`; snapshot format:
`faiss_snapshot.py`. Searches may run concurrently with each other, but not with `add`/`remove`/
`snapshot`/`save`/`install_ready_rebuild`/`wait_for_rebuild`/`recalibrate`: callers serialize those
against everything else (the space's lock does).
"""

import functools
import logging
import math
import time
from pathlib import Path
from typing import Any, Literal, TypedDict

import faiss
import numpy as np

from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.storage.vectors.faiss_ivf import (
    MIN_RECENT_QUERIES,
    RECALIBRATE_EVERY_QUERIES,
    BackgroundJob,
    Calibration,
    CalibrationSource,
    Journal,
    RecentQueries,
    apply_faiss_threads,
    build_ivf,
    held_vectors,
    is_expected_index,
    new_flat,
    recalibrate_ivf,
    replay_journal,
    set_faiss_threads,
    spread_sample,
)
from memoryos.storage.vectors.faiss_snapshot import SnapshotHeader, read_snapshot, snapshot_bytes
from memoryos.storage.vectors.gpu import GPU_MAX_K, GpuPolicy, should_use_gpu, to_gpu
from memoryos.storage.vectors.vector_index import (
    IndexSnapshot,
    IndexSnapshotError,
    SearchResult,
    checked_ids,
    checked_vectors,
)

logger = logging.getLogger(__name__)

RETRAIN_GROWTH = 2
"""An IVF index is retrained once it holds this many times the vectors its last build started from."""


class IndexStats(TypedDict):
    """What the index is now; `measured_recall` is the calibration's recall@10 (IVF only).

    `calibrated_on` is "queries" (recent query vectors) or "stored" (stored vectors, nprobe floored); an
    index loaded from a snapshot counts as "stored", since snapshots do not record it. `background` is
    the job in flight or finished but not yet installed.
    """

    kind: Literal["flat", "ivf"]
    count: int
    nlist: int | None
    nprobe: int | None
    measured_recall: float | None
    calibrated_on: CalibrationSource | None
    background: Literal["build", "recalibration"] | None
    gpu: bool


class FaissIndex:
    """A `VectorIndex` over faiss; ids are the caller's int64 ids (>= 0), kept across every rebuild."""

    def __init__(
        self,
        dim: int,
        ann_threshold: int = 50000,
        gpu_policy: GpuPolicy = "auto",
        omp_threads: int | None = None,
    ) -> None:
        """`omp_threads`, when given, sets this process's faiss thread count (`set_faiss_threads`: it is
        per process, not per index) before the index does any work; a space passes its config's."""
        if omp_threads is not None:
            set_faiss_threads(omp_threads)
        if dim <= 0:
            raise ValueError(f"dim: expected a positive dimension, got {dim}")
        if ann_threshold <= 0:
            raise ValueError(f"ann_threshold: expected a positive count, got {ann_threshold}")
        self._dim = dim
        self._ann_threshold = ann_threshold
        self._use_gpu = should_use_gpu(gpu_policy, faiss)
        self._index: Any = new_flat(dim)
        self._trained_count = 0  # vectors the IVF index was trained on; 0 while flat
        self._measured_recall: float | None = None
        self._calibrated_on: CalibrationSource | None = None
        # Searched instead of `_index` when on GPU. GPU indexes cannot remove and ignore IDSelectors, so
        # the CPU index stays the one that is mutated, filtered and saved; adds are mirrored, and any
        # removal drops the copy until the next unfiltered search uploads a fresh one.
        self._gpu_copy: Any = None
        self._recent = RecentQueries(dim)
        self._queries_at_calibration = 0  # `_recent.seen` when the last calibration started
        self._build: BackgroundJob[tuple[Any, Calibration]] | None = None
        self._build_count = 0  # vectors the last build started from; 0 while flat and never built
        self._journal: Journal = []
        self._recalibration: BackgroundJob[Calibration] | None = None

    @property
    def dim(self) -> int:
        return self._dim

    def count(self) -> int:
        return int(self._index.ntotal)

    def stats(self) -> IndexStats:
        ivf = self._is_ivf()
        background: Literal["build", "recalibration"] | None = None
        if self._build is not None:
            background = "build"
        elif self._recalibration is not None:
            background = "recalibration"
        return IndexStats(
            kind="ivf" if ivf else "flat",
            count=self.count(),
            nlist=int(self._index.nlist) if ivf else None,
            nprobe=int(self._index.nprobe) if ivf else None,
            measured_recall=self._measured_recall,
            calibrated_on=self._calibrated_on,
            background=background,
            gpu=self._use_gpu,
        )

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add or replace vectors; within one batch the last row of a repeated id wins.

        The index holds fp16, like the store: vectors are rounded to it here (`at_stored_precision`), so a
        search scores exactly as an exact search over the rounded vectors, and vectors replayed from the
        store equal the ones the index was given live. Components beyond the fp16 range are refused there.
        """
        apply_faiss_threads()
        ids = checked_ids(ids, "ids")
        vectors = checked_vectors(vectors, self._dim, "vectors")
        vectors = at_stored_precision(vectors)
        if len(ids) != len(vectors):
            raise ValueError(f"ids: expected one id per vector ({len(vectors)}), got {len(ids)}")
        if len(ids) == 0:
            return
        _, last_from_end = np.unique(ids[::-1], return_index=True)
        if len(last_from_end) < len(ids):
            keep = np.sort(len(ids) - 1 - last_from_end)
            ids, vectors = ids[keep], vectors[keep]
        self.install_ready_rebuild()
        replaced = self._remove_present(ids) if self.count() else 0
        self._index.add_with_ids(vectors, ids)
        if self._gpu_copy is not None:
            if replaced:
                self._gpu_copy = None
            else:
                self._gpu_copy.add_with_ids(vectors, ids)
        if self._build is not None:
            self._journal.append((ids.copy(), vectors.copy()))  # the caller may reuse its arrays
        self._start_due_work()

    def remove(self, ids: np.ndarray) -> int:
        apply_faiss_threads()
        ids = np.unique(checked_ids(ids, "ids"))
        self.install_ready_rebuild()
        removed = self._remove_present(ids) if len(ids) and self.count() else 0
        if removed:
            self._gpu_copy = None
            if self._build is not None:
                self._journal.append((ids, None))
            self._start_due_work()
        return removed

    def spread_sample(self, size: int) -> np.ndarray:
        return spread_sample(self._index, size)

    def search(self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None) -> SearchResult:
        """Top-k by inner product; an `allowed_ids` filter on IVF probes more lists the fewer ids it allows.

        Probing `nprobe * count / len(allowed_ids)` lists keeps the number of allowed candidates scanned
        what an unfiltered search scans, so a selective filter degrades to an exact scan of its ids
        instead of returning too few hits. Unfiltered queries are kept for calibration once the index
        holds half the ANN threshold (smaller spaces never calibrate, so they keep none).
        """
        apply_faiss_threads()
        queries = checked_vectors(queries, self._dim, "queries")
        if k <= 0:
            raise ValueError(f"k: expected a positive number of hits, got {k}")
        allowed = None if allowed_ids is None else np.unique(checked_ids(allowed_ids, "allowed_ids"))
        if allowed is None and 2 * self.count() >= self._ann_threshold:
            self._recent.record(queries)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        searchable = self.count() if allowed is None else min(self.count(), len(allowed))
        if searchable == 0 or len(queries) == 0:
            return SearchResult(ids, scores)
        k_searched = min(k, searchable)
        if allowed is None:
            found_scores, found_ids = self._unfiltered_index(k_searched).search(queries, k_searched)
        else:
            params = faiss.SearchParametersIVF() if self._is_ivf() else faiss.SearchParameters()
            params.sel = faiss.IDSelectorBatch(allowed)
            if isinstance(params, faiss.SearchParametersIVF):
                nlist, nprobe = int(self._index.nlist), int(self._index.nprobe)
                params.nprobe = min(nlist, math.ceil(nprobe * self.count() / len(allowed)))
            found_scores, found_ids = self._index.search(queries, k_searched, params=params)
        ids[:, :k_searched] = found_ids
        scores[:, :k_searched] = np.where(found_ids >= 0, found_scores, -np.inf)
        return SearchResult(ids, scores)

    def snapshot(self, covered_seq: int, fingerprint: str = "") -> IndexSnapshot:
        """The index serialized in memory now (a finished build installed first), to be written anywhere.

        While a build is in flight this is the current index: correct, only flat or less well trained.
        The checksum and file contents are computed by `write`, off the caller's lock.
        """
        self.install_ready_rebuild()
        payload = faiss.serialize_index(self._index)
        header = SnapshotHeader(
            self._dim, covered_seq, self._trained_count, self._measured_recall, fingerprint
        )
        return IndexSnapshot(covered_seq, functools.partial(snapshot_bytes, header, payload))

    def save(self, path: Path, covered_seq: int, fingerprint: str = "") -> None:
        self.snapshot(covered_seq, fingerprint).write(path)

    @classmethod
    def load(
        cls,
        path: Path,
        dim: int,
        ann_threshold: int = 50000,
        gpu_policy: GpuPolicy = "auto",
        expected_fingerprint: str | None = None,
        omp_threads: int | None = None,
    ) -> tuple["FaissIndex", int]:
        """The index saved at `path` and the store sequence it covers; rows after it must be replayed.

        Raises IndexSnapshotError for anything but an intact snapshot of `dim`-dimensional vectors with
        the expected fingerprint, when one is given (`faiss_snapshot.py`). A build due at once (a snapshot saved while one was in flight) starts in
        the background. The file records no calibration source and no queries, so a loaded IVF index
        keeps its nprobe but counts as calibrated on stored vectors: it recalibrates once it has seen
        `MIN_RECENT_QUERIES` queries.
        """
        header, index = read_snapshot(path, dim, expected_fingerprint)  # already the concrete class
        if not is_expected_index(index, dim, ivf=header.trained_count > 0):
            raise IndexSnapshotError(f"{path}: snapshot holds an unexpected index type")
        loaded = cls(dim, ann_threshold, gpu_policy, omp_threads)
        loaded._index = index
        loaded._trained_count = loaded._build_count = header.trained_count
        loaded._measured_recall = header.measured_recall
        loaded._calibrated_on = "stored" if header.trained_count else None
        loaded._start_due_work()
        return loaded, header.covered_seq

    def install_ready_rebuild(self) -> bool:
        """Install a finished build (its journal replayed first) or a finished recalibration's nprobe.

        Needs write exclusivity, like `add`. Returns whether anything was installed; a failed job (its
        thread logged why) installs nothing and the current index keeps serving. May start the next job.
        """
        if self._build is not None and self._build.done():
            build, journal = self._build, self._journal
            self._build, self._journal = None, []
            installed = self._install_build(build, journal)
        elif self._recalibration is not None and self._recalibration.done():
            recalibration, self._recalibration = self._recalibration, None
            installed = self._install_calibration(recalibration)
        else:
            return False
        self._start_due_work()
        return installed

    def wait_for_rebuild(self, timeout_s: float | None = None) -> bool:
        """Wait for the background job in flight and install it, and any job its installation starts.

        For `close`, tests and benchmarks; needs write exclusivity, like `add`. Returns False when
        `timeout_s` passed first (the job goes on and is installed by a later write).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (job := self._job_in_flight()) is not None:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not job.wait(remaining):
                return False
            self.install_ready_rebuild()
        return True

    def recalibrate(self) -> bool:
        """Start re-picking nprobe on the recent queries in the background, without retraining.

        Works on a clone of the index (one more copy of it in memory while it runs): exact neighbours of
        the kept queries by probing every list (an exhaustive scan per query; by the flat search latency
        about a second per 100 queries at 100k vectors on one core), then the smallest nprobe reaching
        the target recall. Started automatically by a write when due (`_recalibration_due`); call it to
        recheck sooner. Needs write exclusivity (cloning reads the index; the clone is the only part on
        the caller's thread). Returns whether it started: it needs an IVF index, `MIN_RECENT_QUERIES`
        kept queries and no job in flight (so never beside a build).
        """
        queries = self._recent.copy()
        if not self._is_ivf() or self._job_in_flight() is not None or len(queries) < MIN_RECENT_QUERIES:
            return False
        self._queries_at_calibration = self._recent.seen
        clone = faiss.clone_index(self._index)
        self._recalibration = BackgroundJob("nprobe recalibration", lambda: recalibrate_ivf(clone, queries))
        return True

    def _job_in_flight(self) -> BackgroundJob[Any] | None:
        return self._build if self._build is not None else self._recalibration

    def _is_ivf(self) -> bool:
        return self._trained_count > 0

    def _start_due_work(self) -> None:
        """Start a build or a recalibration when one is due and none is in flight; fall back to flat at once.

        IVF is wanted from the threshold on and kept down to half of it (hysteresis, so an index hovering
        at the threshold is not rebuilt on every write). A build is due when IVF is wanted and the index
        holds `RETRAIN_GROWTH` times the vectors the last build started from (any count if none did).
        """
        if self._job_in_flight() is not None:
            return
        count, ivf = self.count(), self._is_ivf()
        if ivf and count < self._ann_threshold // 2:
            self._become_flat()
        elif (ivf or count >= self._ann_threshold) and count >= RETRAIN_GROWTH * self._build_count:
            self._start_build()
        elif self._recalibration_due():
            self.recalibrate()

    def _recalibration_due(self) -> bool:
        """Whether enough queries arrived since the last calibration started (by a build or a
        recalibration, failed ones included, so a failure is not retried on every write).

        A calibration on stored vectors understates what queries need, so it is replaced as soon as
        `MIN_RECENT_QUERIES` are known; one on queries is rechecked every `RECALIBRATE_EVERY_QUERIES`.
        """
        new_queries = self._recent.seen - self._queries_at_calibration
        if self._calibrated_on == "stored":
            return new_queries >= MIN_RECENT_QUERIES
        return self._calibrated_on == "queries" and new_queries >= RECALIBRATE_EVERY_QUERIES

    def _start_build(self) -> None:
        ids, vectors = held_vectors(self._index, self._dim)
        queries = self._recent.copy()
        self._build_count, self._queries_at_calibration = len(ids), self._recent.seen
        self._journal = []
        self._build = BackgroundJob("ivf build", lambda: build_ivf(ids, vectors, queries))
        logger.info("vector index build started over %d vectors", len(ids), extra={"count": len(ids)})

    def _install_build(self, build: BackgroundJob[tuple[Any, Calibration]], journal: Journal) -> bool:
        try:
            index, calibration = build.result()
        except Exception:
            return False
        replay_journal(index, journal)
        self._index, self._gpu_copy = index, None
        self._trained_count = self._build_count
        self._measured_recall, self._calibrated_on = calibration.recall, calibration.source
        logger.info(
            "vector index rebuilt as ivf over %d vectors in %.2f s, %d journaled writes replayed",
            self._trained_count,
            build.elapsed_s,
            len(journal),
            extra={**self.stats(), "seconds": round(build.elapsed_s, 3), "journaled": len(journal)},
        )
        return True

    def _install_calibration(self, recalibration: BackgroundJob[Calibration]) -> bool:
        try:
            calibration = recalibration.result()
        except Exception:
            return False
        self._index.nprobe, self._gpu_copy = calibration.nprobe, None
        self._measured_recall, self._calibrated_on = calibration.recall, calibration.source
        logger.info("vector index nprobe recalibrated on recent queries", extra={**self.stats()})
        return True

    def _become_flat(self) -> None:
        ids, vectors = held_vectors(self._index, self._dim)
        self._index, self._gpu_copy = new_flat(self._dim), None
        self._index.add_with_ids(vectors, ids)
        self._trained_count = self._build_count = 0
        self._measured_recall = self._calibrated_on = None
        logger.info("vector index back to flat over %d vectors", len(ids), extra={**self.stats()})

    def _unfiltered_index(self, k: int) -> Any:
        """The GPU copy when one may serve this search (uploading it if stale), else the CPU index."""
        if not self._use_gpu or k > GPU_MAX_K or (self._is_ivf() and self._index.nprobe > GPU_MAX_K):
            return self._index
        if self._gpu_copy is None:
            self._gpu_copy = to_gpu(self._index, faiss)
        return self._gpu_copy

    def _remove_present(self, ids: np.ndarray) -> int:
        # The hashtable direct map of the IVF index removes only by IDSelectorArray; for the flat id map,
        # IDSelectorBatch (hash set + bloom filter) avoids a linear scan of the ids per stored vector.
        selector = faiss.IDSelectorArray(ids) if self._is_ivf() else faiss.IDSelectorBatch(ids)
        return int(self._index.remove_ids(selector))
