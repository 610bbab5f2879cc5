"""`FaissIndex`: exact inner-product search while small, a self-calibrated IVF index past a size threshold.

Below `ann_threshold` vectors the index is `IndexIDMap(IndexFlatIP)`: exact, and cheap to mutate. When an
add reaches the threshold it is rebuilt as `IndexIVFFlat` trained on its own vectors, with `nprobe` set to
the smallest value whose measured recall@10 against exact search reaches `TARGET_RECALL` (plus a small
margin), so the approximation is measured on the data it serves rather than assumed.

Two faiss facts shape this module:
- `IndexIDMap2` over an IVF index returns wrong ids after `remove_ids` (IVF does not renumber the
  positions the id map refers to), so the IVF index holds the int64 ids itself, with a hashtable direct map
  that makes removal O(ids removed) and lets its vectors be read back for the next rebuild.
- The flat index is `IndexIDMap`, not `IndexIDMap2`: the latter rebuilds its reverse map on every
  `remove_ids`, which replace-on-add calls each time (1.3 ms vs 0.2 ms at 50k vectors), and nothing
  here needs lookup by id.

Searches may run concurrently with each other, but not with `add`/`remove`/`save`: callers serialize
writes against everything else (the space's lock does).
"""

import logging
import math
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Literal, TypedDict

import faiss
import numpy as np

from memoryos.errors import StorageError
from memoryos.storage.atomic import atomic_write_bytes
from memoryos.storage.gpu import GPU_MAX_K, GpuPolicy, should_use_gpu, to_gpu
from memoryos.storage.vector_index import SearchResult, checked_ids

logger = logging.getLogger(__name__)

TARGET_RECALL = 0.95
"""Recall@10 against exact search that an IVF index promises."""
CALIBRATION_MARGIN = 0.01
"""Calibrated above the promise: 500 sample queries estimate recall only to about ±0.005."""
RECALL_K = 10
CALIBRATION_QUERIES = 500
"""Own vectors used as calibration queries: 5,000 neighbour checks, about 0.7 s of exact search at 100k."""
LISTS_PER_SQRT_N = 4
TRAIN_POINTS_PER_LIST = 40
"""k-means sample per IVF list: faiss warns below 39, and training time grows with the sample (k-means on
all 100k vectors took 32 s on 2 cores, on 40 per list 7 s)."""
MAX_NLIST = 65536
RETRAIN_GROWTH = 2
"""An IVF index is retrained once it holds this many times the vectors it was trained on."""

MAGIC = b"MOSFAISS"
FORMAT_VERSION = 1
# magic, format version, dim, covered_seq, trained_count, measured_recall, payload length, crc32.
_HEADER = struct.Struct("<8sHIqqdQI")
_CHECKED_HEADER_BYTES = _HEADER.size - 4  # every header field but the checksum itself
_HASHTABLE_DIRECT_MAP = faiss.DirectMap.Hashtable  # type: ignore[attr-defined]  # the 1.15 stubs omit it


def set_faiss_threads(threads: int) -> None:
    """faiss's OpenMP pool is process-wide; set it once from the config."""
    faiss.omp_set_num_threads(threads)


class IndexSnapshotError(StorageError):
    """A snapshot is missing, truncated, corrupt or of another dimension: rebuild from the canonical store."""


class IndexStats(TypedDict):
    """What the index is now; `measured_recall` is the calibration sample's recall@10 (IVF only)."""

    kind: Literal["flat", "ivf"]
    count: int
    nlist: int | None
    nprobe: int | None
    measured_recall: float | None
    gpu: bool


class FaissIndex:
    """A `VectorIndex` over faiss; ids are the caller's int64 ids (>= 0), kept across every rebuild."""

    def __init__(self, dim: int, ann_threshold: int = 50000, gpu_policy: GpuPolicy = "auto") -> None:
        if dim <= 0:
            raise ValueError(f"dim: expected a positive dimension, got {dim}")
        if ann_threshold <= 0:
            raise ValueError(f"ann_threshold: expected a positive count, got {ann_threshold}")
        self._dim = dim
        self._ann_threshold = ann_threshold
        self._use_gpu = should_use_gpu(gpu_policy, faiss)
        self._index: Any = _new_flat(dim)
        self._trained_count = 0  # vectors the IVF index was trained on; 0 while flat
        self._measured_recall: float | None = None
        # Searched instead of `_index` when on GPU. GPU indexes cannot remove and ignore IDSelectors, so
        # the CPU index stays the one that is mutated, filtered and saved; adds are mirrored, and any
        # removal drops the copy until the next unfiltered search uploads a fresh one.
        self._gpu_copy: Any = None

    @property
    def dim(self) -> int:
        return self._dim

    def count(self) -> int:
        return int(self._index.ntotal)

    def stats(self) -> IndexStats:
        ivf = self._is_ivf()
        return IndexStats(
            kind="ivf" if ivf else "flat",
            count=self.count(),
            nlist=int(self._index.nlist) if ivf else None,
            nprobe=int(self._index.nprobe) if ivf else None,
            measured_recall=self._measured_recall,
            gpu=self._use_gpu,
        )

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add or replace vectors; within one batch the last row of a repeated id wins."""
        ids = checked_ids(ids, "ids")
        vectors = self._as_vectors(vectors, "vectors")
        if len(ids) != len(vectors):
            raise ValueError(f"ids: expected one id per vector ({len(vectors)}), got {len(ids)}")
        if len(ids) == 0:
            return
        _, last_from_end = np.unique(ids[::-1], return_index=True)
        if len(last_from_end) < len(ids):
            keep = np.sort(len(ids) - 1 - last_from_end)
            ids, vectors = ids[keep], vectors[keep]
        replaced = self._remove_present(ids) if self.count() else 0
        self._index.add_with_ids(vectors, ids)
        if self._gpu_copy is not None:
            if replaced:
                self._gpu_copy = None
            else:
                self._gpu_copy.add_with_ids(vectors, ids)
        self._rebuild_if_due()

    def remove(self, ids: np.ndarray) -> int:
        ids = np.unique(checked_ids(ids, "ids"))
        removed = self._remove_present(ids) if len(ids) and self.count() else 0
        if removed:
            self._gpu_copy = None
            self._rebuild_if_due()
        return removed

    def search(self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None) -> SearchResult:
        """Top-k by inner product; an `allowed_ids` filter on IVF probes more lists the fewer ids it allows.

        Probing `nprobe * count / len(allowed_ids)` lists keeps the number of allowed candidates scanned
        what an unfiltered search scans, so a selective filter degrades to an exact scan of its ids
        instead of returning too few hits.
        """
        queries = self._as_vectors(queries, "queries")
        if k <= 0:
            raise ValueError(f"k: expected a positive number of hits, got {k}")
        allowed = None if allowed_ids is None else np.unique(checked_ids(allowed_ids, "allowed_ids"))
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

    def save(self, path: Path, covered_seq: int) -> None:
        payload = faiss.serialize_index(self._index)
        recall = math.nan if self._measured_recall is None else self._measured_recall
        fields = (MAGIC, FORMAT_VERSION, self._dim, covered_seq, self._trained_count, recall, len(payload))
        header = _HEADER.pack(*fields, 0)[:_CHECKED_HEADER_BYTES]
        checksum = zlib.crc32(payload.data, zlib.crc32(header))
        atomic_write_bytes(path, b"".join((header, struct.pack("<I", checksum), payload.data)))

    @classmethod
    def load(
        cls, path: Path, dim: int, ann_threshold: int = 50000, gpu_policy: GpuPolicy = "auto"
    ) -> tuple["FaissIndex", int]:
        """The index saved at `path` and the store sequence it covers; rows after it must be replayed.

        Raises IndexSnapshotError for anything but an intact snapshot of `dim`-dimensional vectors.
        """
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise IndexSnapshotError(f"{path}: cannot read index snapshot: {exc}") from exc
        if len(data) < _HEADER.size:
            raise IndexSnapshotError(f"{path}: truncated index snapshot ({len(data)} bytes)")
        magic, version, file_dim, covered_seq, trained_count, recall, payload_len, checksum = (
            _HEADER.unpack_from(data)
        )
        if magic != MAGIC or version != FORMAT_VERSION:
            raise IndexSnapshotError(f"{path}: not a version-{FORMAT_VERSION} MemoryOS index snapshot")
        if file_dim != dim:
            raise IndexSnapshotError(f"{path}: snapshot holds {file_dim}-d vectors, expected {dim}-d")
        if len(data) != _HEADER.size + payload_len:
            raise IndexSnapshotError(f"{path}: truncated index snapshot ({len(data)} bytes)")
        payload = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size)
        if zlib.crc32(payload.data, zlib.crc32(data[:_CHECKED_HEADER_BYTES])) != checksum:
            raise IndexSnapshotError(f"{path}: index snapshot checksum mismatch")
        try:
            index = faiss.deserialize_index(payload)  # already the concrete class
        except RuntimeError as exc:
            raise IndexSnapshotError(f"{path}: unreadable index snapshot: {exc}") from exc
        if not _is_expected_index(index, dim, ivf=trained_count > 0):
            raise IndexSnapshotError(f"{path}: snapshot holds an unexpected index type")
        loaded = cls(dim, ann_threshold, gpu_policy)
        loaded._index = index
        loaded._trained_count = trained_count
        loaded._measured_recall = None if math.isnan(recall) else recall
        loaded._rebuild_if_due()
        return loaded, covered_seq

    def _is_ivf(self) -> bool:
        return self._trained_count > 0

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

    def _rebuild_if_due(self) -> None:
        """Switch to IVF at the threshold, retrain IVF as it grows, and fall back to flat well below it.

        The fallback waits for half the threshold so an index hovering at the threshold is not rebuilt
        on every add and remove.
        """
        count = self.count()
        wants_ivf = count >= self._ann_threshold or (self._is_ivf() and count >= self._ann_threshold // 2)
        outgrown = self._is_ivf() and count >= RETRAIN_GROWTH * self._trained_count
        if wants_ivf == self._is_ivf() and not outgrown:
            return
        started = time.perf_counter()
        ids, vectors = self._held_vectors()
        self._gpu_copy = None
        if wants_ivf:
            self._index, self._measured_recall = _build_ivf(ids, vectors)
            self._trained_count = count
        else:
            self._index = _new_flat(self._dim)
            self._index.add_with_ids(vectors, ids)
            self._trained_count, self._measured_recall = 0, None
        seconds = time.perf_counter() - started
        logger.info(
            "vector index rebuilt as %s over %d vectors in %.2f s",
            "ivf" if wants_ivf else "flat",
            count,
            seconds,
            extra={**self.stats(), "seconds": round(seconds, 3)},
        )

    def _held_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (id, vector) held, read back from the index itself, for a rebuild."""
        if not self._is_ivf():
            ids = faiss.vector_to_array(self._index.id_map)
            return ids, faiss.downcast_index(self._index.index).reconstruct_n(0, len(ids))
        invlists = self._index.invlists
        id_chunks, vector_chunks = [], []
        for list_no in range(invlists.nlist):
            size = invlists.list_size(list_no)
            if size:
                id_chunks.append(faiss.rev_swig_ptr(invlists.get_ids(list_no), size).copy())
                codes = faiss.rev_swig_ptr(invlists.get_codes(list_no), size * invlists.code_size)
                vector_chunks.append(codes.view(np.float32).reshape(size, self._dim).copy())
        if not id_chunks:
            return np.empty(0, dtype=np.int64), np.empty((0, self._dim), dtype=np.float32)
        return np.concatenate(id_chunks), np.concatenate(vector_chunks)

    def _as_vectors(self, array: np.ndarray, name: str) -> np.ndarray:
        array = np.asarray(array)
        if array.dtype.kind != "f":
            raise ValueError(f"{name}: expected floating-point vectors, got dtype {array.dtype}")
        if array.ndim != 2 or array.shape[1] != self._dim:
            raise ValueError(f"{name}: expected shape (n, {self._dim}), got {array.shape}")
        array = np.ascontiguousarray(array, dtype=np.float32)
        if not np.isfinite(array).all():
            raise ValueError(f"{name}: contains NaN or infinite values")
        return array


def _new_flat(dim: int) -> Any:
    return faiss.IndexIDMap(faiss.IndexFlatIP(dim))


def _nlist_for(count: int) -> int:
    """About 4·sqrt(n) lists, but never fewer than `TRAIN_POINTS_PER_LIST` training vectors per list."""
    return max(1, min(round(LISTS_PER_SQRT_N * math.sqrt(count)), count // TRAIN_POINTS_PER_LIST, MAX_NLIST))


def _build_ivf(ids: np.ndarray, vectors: np.ndarray) -> tuple[Any, float]:
    """An IVF index over `vectors` trained on a sample of them, with its nprobe calibrated on others.

    Calibration queries are drawn from vectors k-means did not see when there are enough of them (from
    about 26k vectors up): queries that shaped the centroids sit better inside their lists than new
    queries do, and overstated recall by up to 0.01 in measurements.
    """
    count, dim = vectors.shape
    nlist = _nlist_for(count)
    order = np.random.default_rng(0).permutation(count)
    train_count = min(count, TRAIN_POINTS_PER_LIST * nlist)
    unseen = order[train_count:]
    calibration = unseen if len(unseen) >= CALIBRATION_QUERIES else order
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors[order[:train_count]])
    index.set_direct_map_type(_HASHTABLE_DIRECT_MAP)
    index.add_with_ids(vectors, ids)
    target = TARGET_RECALL + CALIBRATION_MARGIN
    index.nprobe, recall = _calibrate_nprobe(index, ids, vectors, calibration[:CALIBRATION_QUERIES], target)
    return index, recall


MIN_NPROBE = 32
"""Lists always searched. Stored vectors as calibration queries understate what real queries need (their
neighbours sit in the same list): on LoCoMo questions the calibrated nprobe gave recall@10 0.75 at 100k and
0.59 at 1M, while 32 lists gave 0.99 at both (docs/indexes.md)."""


def _calibrate_nprobe(
    index: Any, ids: np.ndarray, vectors: np.ndarray, sample: np.ndarray, target: float
) -> tuple[int, float]:
    """Smallest nprobe reaching recall@10 `target` with the stored vectors at `sample` as queries.

    Recall grows with nprobe (more lists scanned, a superset of candidates), so the search doubles nprobe
    until the target is met and then bisects. Each query's own vector is left out of both result lists:
    it is always found, and counting it would overstate recall for queries that are not stored vectors.
    """
    queries, self_ids = vectors[sample], ids[sample]
    k = min(RECALL_K + 1, len(ids))
    exact = ids[faiss.knn(queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)[1]]
    recalls: dict[int, float] = {}

    def recall_at(nprobe: int) -> float:
        if nprobe not in recalls:
            params = faiss.SearchParametersIVF()
            params.nprobe = nprobe
            found = index.search(queries, k, params=params)[1]
            recalls[nprobe] = _recall_without_self(found, exact, self_ids)
        return recalls[nprobe]

    nlist = int(index.nlist)
    floor = min(MIN_NPROBE, nlist)
    failing, passing = floor - 1, floor
    while passing < nlist and recall_at(passing) < target:
        failing, passing = passing, min(2 * passing, nlist)
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if recall_at(middle) >= target:
            passing = middle
        else:
            failing = middle
    return passing, recall_at(passing)


def _recall_without_self(found: np.ndarray, exact: np.ndarray, self_ids: np.ndarray) -> float:
    hits = total = 0
    for found_row, exact_row, self_id in zip(found, exact, self_ids, strict=True):
        expected = [i for i in exact_row if i != self_id][:RECALL_K]
        hits += len(set(expected) & set([i for i in found_row if i != self_id][:RECALL_K]))
        total += len(expected)
    return hits / total if total else 1.0


def _is_expected_index(index: Any, dim: int, ivf: bool) -> bool:
    """Whether a deserialized index is the kind this module writes, so a foreign file is not trusted."""
    if index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
        return False
    if ivf:
        return isinstance(index, faiss.IndexIVFFlat) and index.direct_map.type == _HASHTABLE_DIRECT_MAP
    return type(index) is faiss.IndexIDMap and isinstance(
        faiss.downcast_index(index.index), faiss.IndexFlatIP
    )
