"""`MemorySpace`: one user's memory with one assistant. State changes only through `apply(op)`.

`apply` is deterministic given the op (it reads the op's planned time, never a clock) and does no work
beyond the store and the vector index: planners have already made every LLM call and embedding. Each op
commits in one SQLite transaction, so it is applied whole or not at all, and it is idempotent: an op
delivered twice (same op id), or a write delivered twice (same write id), is applied once, and a
consolidation op whose pages moved since it was planned is recorded as a stale no-op.

Several processes may have one space open (`storage/space_lock.py`): SQLite serializes their writes, and
each catches its page index up with the others' vectors inside the write transaction and before reads
(`memoryos/space/page_index.py`). In a process, one lock serializes a space; different spaces never share state.

What each op does to the store is `memoryos/space/apply.py`; the directories around spaces, `memoryos/space/layout.py`.
"""

import errno
import functools
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.errors import EmbeddingModelMismatchError, StorageError
from memoryos.space import policy
from memoryos.space.apply import OpApplier, heats_of, pages_read_first, segment_heats
from memoryos.space.apply_lifecycle import PROFILE_STALE_META
from memoryos.space.ops import AddTurns, AnyOp, DeleteFacts, DeletePages, ExpireDue, ForgetSpace, UpdatePage
from memoryos.space.page_index import SpacePageIndex
from memoryos.space.score_sample import ScoreSample
from memoryos.storage.records.base import (
    FrequencyAsk,
    OpKey,
    PassMarks,
    ReadOpening,
    RecordStore,
    last_chained_page,
)
from memoryos.storage.records.factory import STORE_FILE, ShardFence, open_record_store, uses_database
from memoryos.storage.space_lock import SpaceHold, make_directory
from memoryos.storage.vectors.index_factory import close_page_index
from memoryos.storage.vectors.vector_index import VectorIndex
from memoryos.types import KnowledgeEntry, KnowledgeKind, Page, Segment

P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[Concatenate["MemorySpace", P], R]) -> Callable[Concatenate["MemorySpace", P], R]:
    """Reads take the space's lock too: the scheduler's threads share the SQLite connection."""

    @functools.wraps(method)
    def locked(self: "MemorySpace", *args: P.args, **kwargs: P.kwargs) -> R:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked


def removes_text_of(op: AnyOp) -> bool:
    """Whether applying `op` may take text out of the space, after which its files are scrubbed (an index
    snapshot without the withdrawn vectors, the WAL checkpointed): work that grows with the space."""
    return isinstance(op, DeletePages | UpdatePage | DeleteFacts | ExpireDue)


def _same_delivery(key: OpKey, earlier: OpKey) -> bool:
    """Whether two (op id, write id) pairs may name the same op or write."""
    return key[0] == earlier[0] or (key[1] is not None and key[1] == earlier[1])


def _created_ids(detail: dict[str, object]) -> list[int]:
    """The ids an op created, from its op-log detail (none for ops that create nothing)."""
    created = detail.get("created", [])
    return [int(i) for i in created] if isinstance(created, list) else []


class MemorySpace:
    """A memory space on disk: `<data_dir>/<tenant>/<user_id>/<assistant_id>/`."""

    def __init__(
        self,
        directory: Path,
        config: MemoryConfig,
        embedding_model: str,
        model_dim: Callable[[], int],
        clock: Callable[[], float] = time.time,
        *,
        create: bool = True,
        fence: ShardFence | None = None,
    ) -> None:
        """Open the space, creating it unless `create` is False. `model_dim` is called only when the
        dimension is not yet recorded or the recorded model differs, so reopening a space does not load the
        embedding model.

        `create=False` opens only an existing space (one whose store file is there): otherwise it raises
        `SpaceNotFoundError` and creates nothing, also when a forget erased the space while this open
        waited for it. Raises `SpaceBusyError` when another process has the space to itself (a forget or
        reindex in progress, or a Chroma-backed space open elsewhere) for longer than
        `space_lock_timeout_s`.

        With a database (`database_url`) the records are its rows and `directory` holds only the index
        snapshot, a cache: no file lock is taken (the database serializes writers, and in the service the
        shard's `fence` refuses a stale owner's writes).
        """
        self.directory = directory
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self._hold = (
            None
            if uses_database(config)
            else SpaceHold(directory, config.space_lock_timeout_s, require=None if create else STORE_FILE)
        )
        try:
            if self._hold is None:
                make_directory(directory)  # the snapshot cache
            elif config.vector_backend == "chroma":
                # Chroma's persistent files are not safe to write from two processes at once.
                self._hold.claim("keep a Chroma-backed space open", wait_s=config.space_lock_timeout_s)
            self.store: RecordStore = open_record_store(
                config,
                directory,
                create=create,
                new_store_meta=lambda: {
                    "embedding_model": embedding_model,
                    "embedding_dim": str(model_dim()),
                },
                fence=fence,
            )
        except BaseException:
            self._release_hold()
            raise
        self.embedding_model = embedding_model
        try:
            # What the open needs of meta, read with the space's row; a space this open created has no
            # rows to read back (`RecordStore.created`): on a database, 2 round trips instead of 14 for a
            # new user, and 1 before reading an existing space's index and sample.
            meta = self.store.meta_at_open()
            self.dim = self._check_fingerprint(meta, embedding_model, model_dim)
            self._sample = ScoreSample(self.dim)
            self._pages = SpacePageIndex(
                self.store,
                config,
                directory,
                self.dim,
                clock,
                self._fingerprint(meta.get("vector_generation")),
                self._sample.offer,
            )
            try:
                self._sample.start(self.store, self._pages.index)
            except BaseException:
                close_page_index(self._pages.index)  # Chroma's client; nothing for FAISS
                raise
        except BaseException:
            self.store.close()
            self._release_hold()
            raise
        self._ops = OpApplier(self.store, config, self.dim)
        # A space this open created is caught up at its first read or write (that of the writes another
        # process may have made to it since its creation, which the empty index did not read back): its
        # data version now would already count them.
        self._seen_data_version: int | None = None if self.store.created else self.store.data_version()
        self.closed = False

    @property
    def page_index(self) -> VectorIndex:
        """The index of the space's embedded pages, for retrieval; mutated only through `apply`."""
        return self._pages.index

    # --- opening --------------------------------------------------------------------------------------
    def _check_fingerprint(self, meta: dict[str, str], model: str, model_dim: Callable[[], int]) -> int:
        """The space's vector dimension (from its `meta`); records the model on first use, refuses a
        different model."""
        stored_model, stored_dim = meta.get("embedding_model"), meta.get("embedding_dim")
        if stored_model is None or stored_dim is None:
            dim = model_dim()
            with self.store.transaction():
                self.store.set_meta("embedding_model", model)
                self.store.set_meta("embedding_dim", str(dim))
            return dim
        if stored_model != model:
            raise EmbeddingModelMismatchError(stored_model, int(stored_dim), model, model_dim())
        return int(stored_dim)

    def _fingerprint(self, generation: str | None) -> str:
        """What the stored vectors are: model, dimension and vector `generation` (meta bumped by each
        reindex). Index snapshots record it; one of another fingerprint is rebuilt, never trusted."""
        incarnation = f"/{self.store.incarnation}" if self.store.incarnation else ""
        return f"{self.embedding_model}/{self.dim}/{generation or '0'}{incarnation}"

    # --- writing --------------------------------------------------------------------------------------
    def apply(self, op: AnyOp) -> list[int]:
        """Apply one op atomically. Returns the ids it created (pages for AddTurns, facts for
        AddKnowledge and UpdateFact), else an empty list; an op or write already applied returns what it
        created then."""
        return _created_ids(self.apply_for_detail(op))

    def apply_for_detail(self, op: AnyOp) -> dict[str, object]:
        """`apply`, returning the op log's detail: the ids the op touched, created ("created") or found
        missing ("missing"), and its flags — the same detail again for a repeated delivery."""
        return self._apply_together([op])[0]

    def apply_ops(self, ops: Sequence[AnyOp], wait_for_writers: bool = True) -> list[list[int]]:
        """Apply ops in order in one transaction; returns each one's created ids, as `apply`.

        Why: a commit (an fsync) per op was most of the time of a service worker's writes and of
        consolidation's steps; a run of a space's queued writes, or the links and filing of a run of
        pages, costs one. All or none are stored (an error in any rolls them all back), and each op is
        idempotent by its op id (and a write by its write id) as on its own, so a caller may apply them
        again one by one to find the one that fails. Without `wait_for_writers`, a store another process
        is writing now raises `StoreBusyError` at once, with nothing applied."""
        return [_created_ids(detail) for detail in self._apply_together(ops, wait_for_writers)]

    def _apply_together(self, ops: Sequence[AnyOp], wait_for_writers: bool = True) -> list[dict[str, object]]:
        """Ops in order in one transaction, all or none; each one's op-log detail (an op applied before
        gives its first detail and changes nothing)."""
        with self.lock:
            self._require_open()
            details: list[dict[str, object]] = []
            embedded: list[int] = []
            vectors: list[np.ndarray] = []
            removes_text = False
            keys = [(op.op_id, op.write_id if isinstance(op, AddTurns) else None) for op in ops]
            with self.store.transaction(wait_for_writers, keys, pages_read_first(ops)):
                self._pages.catch_up()  # others' vectors first: the index stays gap-free in sequence
                # Every op's log entry read at once (on a database, with the transaction's lock, in its
                # BEGIN's round trip); an op given twice in the run is looked up again, after its first
                # delivery applied.
                known = self.store.logged_ops(keys)
                self._ops.begin([op for op, logged in zip(ops, known, strict=True) if logged is None])
                try:
                    for position, (op, key) in enumerate(zip(ops, keys, strict=True)):
                        logged = known[position]
                        if logged is None and any(
                            _same_delivery(key, earlier) for earlier in keys[:position]
                        ):
                            logged = self.store.logged_op(*key)
                        if logged is None:
                            logged, op_embedded, op_vectors = self._ops.apply(op)
                            if op_embedded and op_vectors is not None:
                                embedded += op_embedded
                                vectors.append(op_vectors)
                            removes_text |= removes_text_of(op)
                        details.append(logged)
                finally:
                    self._ops.end()
                # Read inside the transaction: after COMMIT another process may add later sequences.
                through_seq = self.store.max_vector_seq() if embedded else 0
                if removes_text:
                    self._pages.drop_withdrawn()
            if embedded:
                self._add_vectors(embedded, np.concatenate(vectors), through_seq)
            if removes_text:
                self._scrub_files()
            # This commit's own version: one read after it could include another process's commit,
            # whose vectors the index would then never catch up on.
            self._seen_data_version = self.store.committed_data_version()
            return details

    def _add_vectors(self, page_ids: list[int], vectors: np.ndarray, through_seq: int) -> None:
        """Committed vectors into the page index and the score sample."""
        self._pages.add(np.array(page_ids, dtype=np.int64), vectors, through_seq)
        self._sample.offer(vectors)

    def _scrub_files(self) -> None:
        """After text left the store: an index snapshot without the withdrawn vectors (written now by the
        background writer: the caller does not wait for a disk write that grows with the space), and a
        WAL without the overwritten pages, so no file of the space keeps what was deleted."""
        self._pages.snapshot_soon()
        self.store.checkpoint()

    # --- snapshots and lifecycle ----------------------------------------------------------------------
    def snapshot(self) -> None:
        """Write the page index snapshot and return once it is on disk; later pages are replayed on open.

        A background write still in flight finishes first, so an older snapshot never replaces this one.
        """
        with self.lock:
            self._pages.snapshot()

    def close(self) -> None:
        """Snapshot the index if it changed and close the store; closing twice (or after erase) is a no-op.

        Waits for a background index build (so the next open need not build again: minutes at 1M
        vectors) and for a background snapshot write, then catches up with other processes' vectors
        and writes the final snapshot itself.
        """
        with self.lock:
            if self.closed:
                return
            try:
                self._pages.catch_up()
                self._pages.close()
            finally:
                self.store.close()
                self._release_hold()
                self.closed = True

    def _release_hold(self) -> None:
        if self._hold is not None:
            self._hold.release()

    def erase(self) -> None:
        """Delete the whole space, files included. The space is unusable afterwards.

        Needs the space to itself: raises `SpaceBusyError` naming the other processes that have it open
        (nothing is deleted then). Holding it exclusively while deleting means no other process can open
        the space halfway through, or write a snapshot into the directory afterwards.
        """
        with self.lock:
            self._require_open()
            if self._hold is None:
                self._pages.discard()
                self.store.erase()  # every row at once, fenced: a stale owner's forget is refused
                self.closed = True
                if self.directory.exists():  # the snapshot cache, where this host made one
                    _remove_space_directory(self.directory)
                return
            with self._hold.exclusive("forget"):
                self.apply(ForgetSpace(at=self.clock()))  # a crash while files go leaves an empty space
                self._pages.discard()  # no write into the directory while it is deleted
                self.store.erase()
                self.closed = True
                _remove_space_directory(self.directory)
            self._hold.release()

    def _require_open(self) -> None:
        if self.closed:
            raise StorageError(f"memory space {self.directory} is closed")

    def refresh(self, version: int | None = None) -> None:
        """Catch the page index up with vectors other processes stored since this one last looked, so a
        read sees their writes. `PRAGMA data_version` makes the no-news case one cheap query; `version`,
        the data version a read's marks hold (`read_marks`) when nothing ran against the store since,
        makes it none."""
        with self.lock:
            self._require_open()
            if version is None:
                version = self.store.data_version()
            if version != self._seen_data_version:
                self._pages.catch_up()
                self._seen_data_version = version

    # --- reading --------------------------------------------------------------------------------------
    @_locked
    def pending_page_ids(self, limit: int) -> list[int]:
        """Pages stored but not yet embedded, oldest first."""
        return self.store.pending_page_ids(limit)

    @_locked
    def pending_pages(self, limit: int) -> list[Page]:
        """The pages of `pending_page_ids`, in one read: what the embedding batcher asks of every space
        with work, each batch."""
        return self.store.pending_pages(limit)

    @_locked
    def pending_among(self, page_ids: list[int]) -> list[int]:
        """Those of `page_ids` that exist and still wait for their vector."""
        return self.store.pending_among(page_ids)

    @_locked
    def written_page_ids(self, write_id: str) -> list[int] | None:
        """The page ids an `AddTurns` with this write id created, or None if no such write was applied."""
        logged = self.store.logged_op("", write_id)
        return None if logged is None else [int(pid) for pid in logged.get("created", [])]

    @_locked
    def pending_page_count(self, through_page_id: int | None = None) -> int:
        """Pages still waiting for their vector (those with an id up to `through_page_id`, when given)."""
        return self.store.count_pending(through_page_id)

    @_locked
    def max_page_id(self) -> int:
        """The id of the page stored last (0: none): what a read issued now must see."""
        return self.store.max_page_id()

    @_locked
    def read_opening(self, asks: list[FrequencyAsk], now: float) -> ReadOpening:
        """What a read issued now must see (the page stored last), wait for (the oldest page without its
        vector) and catch up with (the data version), the page counts of its words (`asks`) and what every
        retrieval reads besides its ranking (`retrieval_basis` at `now`), in one look: one round trip to a
        database."""
        return self.store.read_opening(asks, now)

    @_locked
    def short_term_pages(self) -> list[Page]:
        """Every page in the short-term tier, the overflow consolidation has not moved yet included."""
        return self.store.pages_in_tier("stm")

    @_locked
    def pass_marks(self, now: float) -> PassMarks:
        """What a consolidation pass reads before it applies anything, in one look (`PassMarks`): its
        short-term overflow — the pages beyond `short_term_capacity`, oldest first, up to the first still
        waiting for its vector (a page without one holds back the younger ones: chains and topics
        compare vectors) —, the rebuild steps' marks, the segments and the next expiry."""
        return self.store.pass_marks(now, PROFILE_STALE_META, self.config.short_term_capacity)

    @_locked
    def pages(self, page_ids: list[int]) -> list[Page]:
        return self.store.pages(page_ids)

    @_locked
    def score_sample(self) -> np.ndarray:
        """Page vectors representative of the space, to estimate the mean and spread of query scores."""
        return self._sample.vectors

    @_locked
    def page_vectors(self, page_ids: list[int]) -> np.ndarray:
        return self.store.page_vectors(page_ids, self.dim)

    @_locked
    def embedded_page_vectors(self, page_ids: list[int]) -> tuple[list[int], np.ndarray]:
        """(ids, vectors) of the given pages that have a vector; pages still pending are left out."""
        return self.store.embedded_page_vectors(page_ids, self.dim)

    @_locked
    def chain_pages(self, chain_id: int) -> list[Page]:
        return self.store.pages(self.store.chain_page_ids(chain_id))

    @_locked
    def last_chained_page(self) -> Page | None:
        return last_chained_page(self.store)

    @_locked
    def segments(self, count_pages: bool = False) -> list[Segment]:
        return self.store.active_segments(count_pages)

    @_locked
    def segment_heats(self, now: float) -> dict[int, float]:
        return segment_heats(self.store, self.config, now)

    @_locked
    def segments_to_promote(self, now: float, marks: PassMarks | None = None) -> list[int]:
        """The segments hot enough at `now` to analyze, hottest first. `marks`: a pass's, when nothing was
        applied since they were read (then they answer, with no read of their own)."""
        if marks is None:
            heats, unanalyzed = self.segment_heats(now), self.store.unanalyzed_segment_ids()
        else:
            heats, unanalyzed = heats_of(marks.segments, self.config, now), marks.unanalyzed_segment_ids
        return policy.segments_to_promote(heats, unanalyzed, self.config.mid_term_heat_threshold)

    @_locked
    def unanalyzed_pages(self, segment_id: int) -> list[Page]:
        return self.store.pages(self.store.segment_page_ids(segment_id, only_unanalyzed=True))

    @_locked
    def analysis_attempts(self, page_ids: Sequence[int]) -> int:
        """The most analyses any of these pages had refused by the guards (`DeferAnalysis`)."""
        return self.store.analysis_attempts(page_ids)

    @_locked
    def profile(self) -> str:
        return self.store.latest_profile()

    @_locked
    def knowledge(self, kind: KnowledgeKind) -> list[KnowledgeEntry]:
        """Every active fact of one kind, each with the pages it came from."""
        rows = self.store.active_knowledge(kind)
        support = self.store.fact_support([row["entry_id"] for row in rows])
        return [
            KnowledgeEntry(
                entry_id=row["entry_id"],
                kind=kind,
                knowledge=row["text"],
                timestamp=row["timestamp"],
                source_page_ids=support[row["entry_id"]],
            )
            for row in rows
        ]


def _remove_space_directory(directory: Path) -> None:
    """Delete a space's directory, every file that was in it when forget took it exclusively.

    A process opening the space meanwhile creates its lock file anew once the old one is gone (it must,
    to wait on it) and then finds an empty directory: a new space. `rmtree` then fails on the final
    `rmdir` with ENOTEMPTY, after deleting everything it listed — the old space is gone, and the
    newcomer's space is left to it."""
    try:
        shutil.rmtree(directory)
    except OSError as error:
        if error.errno != errno.ENOTEMPTY or not directory.is_dir():
            raise
