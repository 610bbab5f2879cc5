"""The index types of `FaissIndex`, IVF construction and nprobe calibration, and the thread that runs them
off the write path.

Both index types hold fp16 codes (faiss's `QT_fp16` scalar quantizer), not float32: the store keeps
vectors at half precision (`vector_blobs.py`) and `FaissIndex.add` rounds to it, so float32 would double
the index's RAM and snapshot for no precision gain. Decoding fp16 is exact, so searches score exactly as
an exact search over the rounded vectors (queries stay float32). Sizes and query times: docs/indexes.md.

Everything here works on copies: a build gets the (ids, vectors) the index held when it became due, a
recalibration a clone of the IVF index, so the live index keeps serving and taking writes meanwhile
(`FaissIndex` journals those writes and applies them when it installs the result).

Calibration picks the smallest `nprobe` whose recall@10 against exact search reaches `TARGET_RECALL` plus a
margin. It measures on the space's recent query vectors once `MIN_RECENT_QUERIES` were seen: stored
vectors as queries understate what real queries need (their neighbours sit in their own list). Without
enough queries it falls back to stored vectors and never probes fewer than `MIN_NPROBE` lists.
"""

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import faiss
import numpy as np

logger = logging.getLogger(__name__)

TARGET_RECALL = 0.95
"""Recall@10 against exact search that an IVF index promises."""
CALIBRATION_MARGIN = 0.01
"""Calibrated above the promise: 500 sample queries estimate recall only to about ±0.005."""
RECALL_K = 10
CALIBRATION_QUERIES = 500
"""Own vectors used as calibration queries: 5,000 neighbour checks, about 0.7 s of exact search at 100k."""
MIN_NPROBE = 32
"""Lists always searched when calibrating on stored vectors, since they understate the nprobe real questions
need (docs/indexes.md, "Calibration")."""
RECENT_QUERIES = 512
"""Unfiltered query vectors kept for calibration (1.5 KB each at 384-d)."""
MIN_RECENT_QUERIES = 100
"""Recent queries needed to calibrate on them: 1,000 neighbour checks, recall known to about ±0.01."""
RECALIBRATE_EVERY_QUERIES = 512
"""New unfiltered queries after which an index calibrated on queries re-picks nprobe (started by the next
write, run in the background), so a drift in what is asked is rechecked without a retrain: with
`RECENT_QUERIES` kept, a whole new set."""
LISTS_PER_SQRT_N = 4
TRAIN_POINTS_PER_LIST = 40
"""k-means sample per IVF list: faiss warns below 39, and training time grows with the sample."""
MAX_NLIST = 65536

CalibrationSource = Literal["queries", "stored"]
Journal = list[tuple[np.ndarray, np.ndarray | None]]
"""Writes made while a build runs, in order: (ids, vectors) for an add, (ids, None) for a removal."""
HASHTABLE_DIRECT_MAP = faiss.DirectMap.Hashtable  # type: ignore[attr-defined]  # the 1.15 stubs omit it
FP16 = faiss.ScalarQuantizer.QT_fp16
"""The code both index types hold: IEEE half floats, 2 bytes per dimension, the store's precision."""

T = TypeVar("T")

_configured_threads: int | None = None
"""OpenMP threads of every thread that uses faiss here; None: each thread's runtime default."""
_applied = threading.local()


def set_faiss_threads(threads: int) -> None:
    """faiss's OpenMP thread count for this process: the calling thread, background jobs, and every other
    thread once it calls `apply_faiss_threads`.

    OpenMP settings are per thread: a thread that never sets its own (an ingest thread, a web server's
    request thread) uses every core, and on a few cores that slows one-query searches severalfold beside
    the embedding model.
    """
    global _configured_threads
    _configured_threads = threads
    apply_faiss_threads()


def apply_faiss_threads() -> None:
    """Give the calling thread the configured count, once per thread (cheap enough for every search)."""
    if _configured_threads is not None and getattr(_applied, "threads", None) != _configured_threads:
        faiss.omp_set_num_threads(_configured_threads)
        _applied.threads = _configured_threads


class Calibration(NamedTuple):
    """The nprobe chosen, its measured recall@10, and what it was measured on."""

    nprobe: int
    recall: float
    source: CalibrationSource


class RecentQueries:
    """The last `RECENT_QUERIES` unfiltered query vectors and how many were ever recorded.

    Searches may run concurrently, so recording takes a lock; it copies at most one batch of rows. The
    buffer is allocated on the first record, so indexes that never record cost nothing.
    """

    def __init__(self, dim: int) -> None:
        self._dim = dim
        self._rows: np.ndarray | None = None
        self._next = 0
        self._filled = 0
        self._seen = 0
        self._lock = threading.Lock()

    @property
    def seen(self) -> int:
        return self._seen

    def record(self, queries: np.ndarray) -> None:
        with self._lock:
            if self._rows is None:
                self._rows = np.empty((RECENT_QUERIES, self._dim), dtype=np.float32)
            kept = queries[-RECENT_QUERIES:]
            self._rows[(self._next + np.arange(len(kept))) % RECENT_QUERIES] = kept
            self._next = (self._next + len(kept)) % RECENT_QUERIES
            self._filled = min(RECENT_QUERIES, self._filled + len(kept))
            self._seen += len(queries)

    def copy(self) -> np.ndarray:
        """The kept rows (in no particular order), as a copy a background thread may use."""
        with self._lock:
            if self._rows is None:
                return np.empty((0, self._dim), dtype=np.float32)
            return self._rows[: self._filled].copy()


class BackgroundJob(Generic[T]):
    """`work()` on a daemon thread; the owner polls `done()` and takes `result()` on its own thread.

    The thread runs faiss with the OpenMP thread count `set_faiss_threads` configured (else that of the
    thread starting it): a new thread would otherwise use every core. A failure is logged here, when it
    happens, and raised again by `result()`. `elapsed_s` is how long the work ran, once done.
    """

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self.elapsed_s = 0.0
        self._done = threading.Event()
        self._result: T | None = None
        self._error: Exception | None = None
        threads = faiss.omp_get_max_threads() if _configured_threads is None else _configured_threads
        self._thread = threading.Thread(target=self._run, args=(work, threads), name=name, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Whether the work finished within `timeout_s` (None: wait as long as it takes)."""
        return self._done.wait(timeout_s)

    def result(self) -> T:
        """The work's result; only once `done()`. Raises the work's exception if it failed."""
        if self._error is not None:
            raise self._error
        assert self._result is not None, "result() before done()"
        return self._result

    def _run(self, work: Callable[[], T], threads: int) -> None:
        faiss.omp_set_num_threads(threads)
        started = time.perf_counter()
        try:
            self._result = work()
        except Exception as error:
            logger.exception("background %s failed", self._thread.name)
            self._error = error
        finally:
            self.elapsed_s = time.perf_counter() - started
            self._done.set()


def new_flat(dim: int) -> Any:
    """The exact index: `IndexIDMap(IndexScalarQuantizer(fp16))`, an inner-product scan of every fp16 code.

    Two faiss facts shape the id handling of both index types:
    - `IndexIDMap2` over an IVF index returns wrong ids after `remove_ids` (IVF does not renumber the
      positions the id map refers to), so the IVF index (`build_ivf`) holds the int64 ids itself, with a
      hashtable direct map that makes removal O(ids removed) and lets its vectors be read back for the next
      rebuild.
    - The flat index is `IndexIDMap`, not `IndexIDMap2`: the latter rebuilds its reverse map on every
      `remove_ids`, which replace-on-add calls each time, and nothing here needs lookup by id.
    """
    return faiss.IndexIDMap(faiss.IndexScalarQuantizer(dim, FP16, faiss.METRIC_INNER_PRODUCT))


def nlist_for(count: int) -> int:
    """About 4·sqrt(n) lists, but never fewer than `TRAIN_POINTS_PER_LIST` training vectors per list."""
    return max(1, min(round(LISTS_PER_SQRT_N * math.sqrt(count)), count // TRAIN_POINTS_PER_LIST, MAX_NLIST))


def build_ivf(ids: np.ndarray, vectors: np.ndarray, recent_queries: np.ndarray) -> tuple[Any, Calibration]:
    """An IVF index over `vectors` trained on a sample of them, with its nprobe calibrated.

    `IndexIVFScalarQuantizer` holding fp16 codes of the vectors themselves, not of their residuals to the
    centroid (`by_residual` off): fp16-representable input is then held exactly, as in the flat index, and
    `held_vectors` reads it back without the centroids. Only the coarse quantizer is trained (fp16 needs no
    training).

    Calibrated on `recent_queries` when there are `MIN_RECENT_QUERIES`, else on stored vectors k-means did
    not see when there are enough of them (from about 26k vectors up): vectors that shaped the centroids
    sit better inside their lists than new queries do, and overstated recall by up to 0.01.
    """
    count, dim = vectors.shape
    nlist = nlist_for(count)
    order = np.random.default_rng(0).permutation(count)
    train_count = min(count, TRAIN_POINTS_PER_LIST * nlist)
    by_residual = False
    index = faiss.IndexIVFScalarQuantizer(
        faiss.IndexFlatIP(dim), dim, nlist, FP16, faiss.METRIC_INNER_PRODUCT, by_residual
    )
    index.train(vectors[order[:train_count]])
    index.set_direct_map_type(HASHTABLE_DIRECT_MAP)
    index.add_with_ids(vectors, ids)
    if len(recent_queries) >= MIN_RECENT_QUERIES:
        k = min(RECALL_K, count)
        exact = ids[faiss.knn(recent_queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)[1]]
        calibration = _calibrate(index, recent_queries, exact, np.full(len(exact), -1), "queries")
    else:
        unseen = order[train_count:]
        sample = (unseen if len(unseen) >= CALIBRATION_QUERIES else order)[:CALIBRATION_QUERIES]
        k = min(RECALL_K + 1, count)  # + the query's own vector, left out of the count
        exact = ids[faiss.knn(vectors[sample], vectors, k, metric=faiss.METRIC_INNER_PRODUCT)[1]]
        calibration = _calibrate(index, vectors[sample], exact, ids[sample], "stored")
    index.nprobe = calibration.nprobe
    return index, calibration


def recalibrate_ivf(index: Any, recent_queries: np.ndarray) -> Calibration:
    """nprobe for `index` (a private copy) calibrated on `recent_queries`, exact neighbours by probing every list."""
    params = faiss.SearchParametersIVF()
    params.nprobe = int(index.nlist)
    k = min(RECALL_K, int(index.ntotal))
    exact = index.search(recent_queries, k, params=params)[1]
    return _calibrate(index, recent_queries, exact, np.full(len(exact), -1), "queries")


def _calibrate(
    index: Any, queries: np.ndarray, exact: np.ndarray, self_ids: np.ndarray, source: CalibrationSource
) -> Calibration:
    """Smallest nprobe reaching recall@10 `TARGET_RECALL + CALIBRATION_MARGIN` on `queries`.

    Recall grows with nprobe (more lists scanned, a superset of candidates), so the search doubles nprobe
    until the target is met and then bisects. A stored query's own vector (`self_ids`, -1 for none) is
    left out of both result lists: it is always found, and counting it would overstate recall.
    """
    target = TARGET_RECALL + CALIBRATION_MARGIN
    recalls: dict[int, float] = {}

    def recall_at(nprobe: int) -> float:
        if nprobe not in recalls:
            params = faiss.SearchParametersIVF()
            params.nprobe = nprobe
            found = index.search(queries, exact.shape[1], params=params)[1]
            recalls[nprobe] = _recall_without_self(found, exact, self_ids)
        return recalls[nprobe]

    nlist = int(index.nlist)
    floor = min(MIN_NPROBE, nlist) if source == "stored" else 1
    failing, passing = floor - 1, floor
    while passing < nlist and recall_at(passing) < target:
        failing, passing = passing, min(2 * passing, nlist)
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if recall_at(middle) >= target:
            passing = middle
        else:
            failing = middle
    return Calibration(passing, recall_at(passing), source)


def _recall_without_self(found: np.ndarray, exact: np.ndarray, self_ids: np.ndarray) -> float:
    hits = total = 0
    for found_row, exact_row, self_id in zip(found, exact, self_ids, strict=True):
        expected = [i for i in exact_row if i != self_id][:RECALL_K]
        hits += len(set(expected) & set([i for i in found_row if i != self_id][:RECALL_K]))
        total += len(expected)
    return hits / total if total else 1.0


def replay_journal(index: Any, journal: Journal) -> None:
    """Apply writes made during a build to its index, in order, so it holds what the live index holds."""
    for ids, vectors in journal:
        index.remove_ids(faiss.IDSelectorArray(ids))
        if vectors is not None:
            index.add_with_ids(vectors, ids)


def held_vectors(index: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (id, vector) a flat id map or hashtable IVF index holds, decoded to float32 copies.

    Exactly the vectors that were added when they were fp16-representable (`FaissIndex.add` makes them
    so). The IVF codes are gathered list by list and decoded in one call.
    """
    if not isinstance(index, faiss.IndexIVFScalarQuantizer):
        ids = faiss.vector_to_array(index.id_map)
        return ids, faiss.downcast_index(index.index).reconstruct_n(0, len(ids))
    invlists: Any = index.invlists  # never None for an index built here
    id_chunks, code_chunks = [], []
    for list_no in range(invlists.nlist):
        size = invlists.list_size(list_no)
        if size:
            id_chunks.append(faiss.rev_swig_ptr(invlists.get_ids(list_no), size).copy())
            codes = faiss.rev_swig_ptr(invlists.get_codes(list_no), size * invlists.code_size)
            code_chunks.append(codes.reshape(size, invlists.code_size))
    if not id_chunks:
        return np.empty(0, dtype=np.int64), np.empty((0, dim), dtype=np.float32)
    return np.concatenate(id_chunks), index.sq.decode(np.concatenate(code_chunks))


def spread_sample(index: Any, size: int) -> np.ndarray:
    """Up to `size` of the vectors a flat id map or hashtable IVF index holds, spread evenly over its ids
    in order: every nth from the lowest id, n the count over `size` (every one when there are no more),
    decoded to float32 copies. The ids alone are gathered; only the chosen vectors are decoded (by
    position in a flat index, by id through an IVF index's direct map)."""
    ivf = isinstance(index, faiss.IndexIVFScalarQuantizer)
    ids = _ivf_ids(index) if ivf else faiss.vector_to_array(index.id_map)
    if len(ids) == 0:
        return np.empty((0, index.d), dtype=np.float32)
    chosen = np.argsort(ids, kind="stable")[:: max(1, len(ids) // size)][:size]
    decoded = (
        index.reconstruct_batch(ids[chosen])
        if ivf
        else faiss.downcast_index(index.index).reconstruct_batch(chosen)
    )
    return np.asarray(decoded, dtype=np.float32)


def _ivf_ids(index: Any) -> np.ndarray:
    """The ids an IVF index holds, list by list."""
    invlists: Any = index.invlists
    chunks = [
        faiss.rev_swig_ptr(invlists.get_ids(list_no), invlists.list_size(list_no)).copy()
        for list_no in range(invlists.nlist)
        if invlists.list_size(list_no)
    ]
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)


def is_expected_index(index: Any, dim: int, ivf: bool) -> bool:
    """Whether a deserialized index is the kind this module writes, so a foreign file is not trusted.

    Only fp16 codes: a float32 index (`IndexFlatIP`, `IndexIVFFlat`, written before the index held fp16)
    is unexpected, so its space rebuilds the index from the store.
    """
    if index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
        return False
    if ivf:
        return (
            isinstance(index, faiss.IndexIVFScalarQuantizer)
            and index.sq.qtype == FP16
            and not index.by_residual
            and index.direct_map.type == HASHTABLE_DIRECT_MAP
        )
    if type(index) is not faiss.IndexIDMap:
        return False
    codes = faiss.downcast_index(index.index)
    return type(codes) is faiss.IndexScalarQuantizer and codes.sq.qtype == FP16
