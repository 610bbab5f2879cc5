"""`MemorySpace`: one user's memory with one assistant. State changes only through `apply(op)`.

`apply` is deterministic given the op (it reads the op's planned time, never a clock) and does no work
beyond the store and the vector index: planners have already made every LLM call and embedding. Each op
commits in one SQLite transaction, so it is applied whole or not at all, and it is idempotent: an op
delivered twice (same op id), or a write delivered twice (same write id), is applied once, and a
consolidation op whose pages moved since it was planned is recorded as a stale no-op.

Several processes may have one space open (`storage/space_lock.py`): SQLite serializes their writes, and
each catches its page index up with the others' vectors inside the write transaction and before reads
(`space_index.py`). In a process, one lock serializes a space; different spaces never share state.
"""

import contextlib
import functools
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import numpy as np

from memoryos import policy
from memoryos.config import MemoryConfig
from memoryos.errors import EmbeddingModelMismatchError, InvalidInputError, MemoryOSError, StorageError
from memoryos.ops import (
    AddKnowledge,
    AddTurns,
    AnyOp,
    EmbedPages,
    FileTopic,
    LinkChain,
    MarkAnalyzed,
    RecordVisits,
    UpdateProfile,
)
from memoryos.score_sample import ScoreSample
from memoryos.space_index import SpacePageIndex
from memoryos.storage.space_lock import SpaceHold, creation_error, make_directory
from memoryos.storage.sqlite_store import SqliteStore
from memoryos.storage.vector_blobs import from_blobs
from memoryos.storage.vector_index import VectorIndex
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


STORE_FILE = "memory.sqlite"
ROOT_MARKER = ".created-by-memoryos"
"""In a data directory that MemoryOS created itself: such a directory is removed when its last space is
forgotten. A data directory that existed before (the user's own) is never removed."""


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
    ) -> None:
        """Open the space, creating it unless `create` is False. `model_dim` is called only when the
        dimension is not yet recorded or the recorded model differs, so reopening a space does not load the
        embedding model.

        `create=False` opens only an existing space (one whose store file is there): otherwise it raises
        `SpaceNotFoundError` and creates nothing, also when a forget erased the space while this open
        waited for it. Raises `SpaceBusyError` when another process has the space to itself (a forget or
        reindex in progress, or a Chroma-backed space open elsewhere) for longer than
        `space_lock_timeout_s`.
        """
        self.directory = directory
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self._hold = SpaceHold(directory, config.space_lock_timeout_s, require=None if create else STORE_FILE)
        try:
            if config.vector_backend == "chroma":
                # Chroma's persistent files are not safe to write from two processes at once.
                self._hold.claim("keep a Chroma-backed space open", wait_s=config.space_lock_timeout_s)
            self.store = SqliteStore(directory / STORE_FILE, config.store_busy_timeout_s)
        except BaseException:
            self._hold.release()
            raise
        self.embedding_model = embedding_model
        try:
            self.dim = self._check_fingerprint(embedding_model, model_dim)
            self._sample = ScoreSample(self.store, self.dim)
            self._pages = SpacePageIndex(
                self.store, config, directory, self.dim, clock, self.fingerprint(), self._sample.offer
            )
        except BaseException:
            self.store.close()
            self._hold.release()
            raise
        self._seen_data_version = self.store.data_version()
        self.closed = False

    @property
    def page_index(self) -> VectorIndex:
        """The index of the space's embedded pages, for retrieval; mutated only through `apply`."""
        return self._pages.index

    # --- opening --------------------------------------------------------------------------------------
    def _check_fingerprint(self, model: str, model_dim: Callable[[], int]) -> int:
        """The space's vector dimension; records the model on first use, refuses a different model."""
        stored_model, stored_dim = (
            self.store.get_meta("embedding_model"),
            self.store.get_meta("embedding_dim"),
        )
        if stored_model is None or stored_dim is None:
            dim = model_dim()
            with self.store.transaction():
                self.store.set_meta("embedding_model", model)
                self.store.set_meta("embedding_dim", str(dim))
            return dim
        if stored_model != model:
            raise EmbeddingModelMismatchError(stored_model, int(stored_dim), model, model_dim())
        return int(stored_dim)

    def fingerprint(self) -> str:
        """What the stored vectors are: model, dimension and vector generation (bumped by each reindex).
        Index snapshots record it; one of another fingerprint is rebuilt, never trusted."""
        generation = self.store.get_meta("vector_generation") or "0"
        return f"{self.embedding_model}/{self.dim}/{generation}"

    # --- writing --------------------------------------------------------------------------------------
    def apply(self, op: AnyOp) -> list[int]:
        """Apply one op atomically. Returns the ids it created (pages for AddTurns, facts for
        AddKnowledge), else an empty list; an op or write already applied returns what it created then."""
        with self.lock:
            self._require_open()
            with self.store.transaction():
                self._pages.catch_up()  # others' vectors first: the index stays gap-free in sequence
                logged = self.store.logged_op(op.op_id, op.write_id if isinstance(op, AddTurns) else None)
                if logged is not None:
                    return list(logged.get("created", []))
                created, embedded = self._dispatch(op)
                # Read inside the transaction: after COMMIT another process may add later sequences.
                through_seq = self.store.max_vector_seq()
                stored = self.store.page_vectors(embedded, self.dim)
            if embedded:
                self._pages.add(np.array(embedded, dtype=np.int64), stored, through_seq)
                self._sample.offer(stored)
            self._seen_data_version = self.store.data_version()
            return created

    def _dispatch(self, op: AnyOp) -> tuple[list[int], list[int]]:
        """Apply `op` inside the caller's transaction and log it: (ids created, pages given vectors)."""
        created: list[int] = []
        embedded: list[int] = []
        stale = self._stale_because(op)
        detail: dict[str, object] = {}
        match op:
            case _ if stale is not None:
                detail = {"stale": stale}
            case AddTurns():
                if op.vectors is not None:
                    self._check_vectors("vectors", op.vectors, len(op.turns))
                created = self.store.insert_pages(op.turns, op.vectors)
                embedded = created if op.vectors is not None else []
            case EmbedPages():
                self._check_vectors("vectors", op.vectors, len(op.page_ids))
                embedded = self.store.set_page_vectors(op.page_ids, op.vectors)
                detail = {"page_ids": embedded}
            case LinkChain():
                self._link_chain(op)
                detail = {"page_id": op.page_id, "continues": op.continues_previous}
            case FileTopic():
                self._check_vectors("vector", op.vector.reshape(1, -1), 1)
                segment_id = self._file_topic(op)
                detail = {"page_ids": op.page_ids, "segment_id": segment_id}
            case RecordVisits():
                for segment_id in op.segment_ids:
                    self.store.add_segment_counters(segment_id, visits=1, interactions=0, at=op.at)
                detail = {"segment_ids": op.segment_ids}
            case UpdateProfile():
                if op.text.strip() and op.text.strip() != self.store.latest_profile():
                    self.store.insert_profile(op.text.strip(), op.at, op.source_segment_id)
                detail = {"source_segment_id": op.source_segment_id}
            case AddKnowledge():
                self._check_vectors("vectors", op.vectors, len(op.texts))
                created = self._add_knowledge(op, op.at)
                detail = {"kind": op.knowledge_kind}
            case MarkAnalyzed():
                self.store.set_page_fields(op.page_ids, analyzed=1)
                self.store.update_segment(op.segment_id, visit_count=0, interaction_count=0)
                detail = {"segment_id": op.segment_id, "page_ids": op.page_ids}
        if created:
            detail["created"] = created
        write_id = op.write_id if isinstance(op, AddTurns) else None
        self.store.log_op(op.kind, op.at, detail, op.op_id, write_id)
        return created, embedded

    def _stale_because(self, op: AnyOp) -> str | None:
        """Why a consolidation op no longer fits the space (its pages moved since it was planned, by
        another process or an earlier delivery of the same work), or None when it applies."""
        match op:
            case LinkChain():
                pages = self.store.pages([op.page_id])
                if not pages or pages[0].tier != "stm" or pages[0].chain_id is not None:
                    return "page already linked or no longer in short-term memory"
                last = self.store.get_meta("last_chained_page")
                if op.previous_page_id is not None and op.previous_page_id != int(last or 0):
                    return "another page was chained since the plan"
            case FileTopic():
                pages = self.store.pages(op.page_ids)
                if len(pages) != len(op.page_ids) or any(p.tier != "stm" for p in pages):
                    return "pages no longer all in short-term memory"
            case MarkAnalyzed():
                pages = self.store.pages(op.page_ids)
                if len(pages) != len(op.page_ids) or any(
                    p.segment_id != op.segment_id or p.analyzed for p in pages
                ):
                    return "pages analyzed already or not in the segment"
        return None

    def _check_vectors(self, field: str, vectors: np.ndarray, rows: int) -> None:
        if vectors.ndim != 2 or vectors.shape != (rows, self.dim):
            raise InvalidInputError(field, f"expected shape ({rows}, {self.dim}), got {vectors.shape}")

    def _link_chain(self, op: LinkChain) -> None:
        previous = self.last_chained_page()
        chain_id = op.page_id
        if op.continues_previous and previous is not None and previous.chain_id is not None:
            chain_id = previous.chain_id
        self.store.upsert_chain(chain_id, op.chain_summary)
        self.store.set_page_fields([op.page_id], chain_id=chain_id)
        self.store.set_meta("last_chained_page", str(op.page_id))

    def _file_topic(self, op: FileTopic) -> int:
        segments = self.store.active_segments()
        ids = [s.segment_id for s in segments]
        target = policy.choose_segment(
            op.vector,
            op.keywords,
            ids,
            self.store.segment_vectors(ids, self.dim),
            [s.keywords for s in segments],
            self.config.mid_term_similarity_threshold,
        )
        if target is None:
            target = self.store.insert_segment(
                op.summary, policy.merged_keywords([], op.keywords), op.vector, op.at
            )
        else:
            segment = next(s for s in segments if s.segment_id == target)
            topics = self.store.segment_topic_count(target)
            self.store.update_segment(
                target,
                summary=policy.merged_summary(segment.summary, op.summary),
                keywords=policy.merged_keywords(segment.keywords, op.keywords),
                vector=policy.merged_vector(
                    self.store.segment_vectors([target], self.dim)[0], topics, op.vector
                ),
                topic_count=topics + 1,
            )
        self.store.set_page_fields(op.page_ids, tier="mtm", segment_id=target)
        self.store.add_segment_counters(target, visits=0, interactions=len(op.page_ids), at=op.at)
        self._evict_cold_segments(op.at, keep=target)
        return target

    def _evict_cold_segments(self, now: float, keep: int) -> None:
        """Archive the coldest segments over capacity; their pages stay stored and searchable.

        The segment just filed into is never the one archived: its pages would leave before analysis.
        """
        heats = self.segment_heats(now)
        heats.pop(keep, None)
        for segment_id in policy.segments_to_evict(heats, self.config.mid_term_capacity - 1):
            self.store.update_segment(segment_id, archived=1)
            self.store.set_page_fields(self.store.segment_page_ids(segment_id), tier="archived")

    def _add_knowledge(self, op: AddKnowledge, now: float) -> list[int]:
        created: list[int] = []
        for text, vector in zip(op.texts, op.vectors, strict=True):
            rows = self.store.active_knowledge(op.knowledge_kind)
            existing = from_blobs([row["vector"] for row in rows], self.dim)
            same_text = [
                i
                for i, row in enumerate(rows)
                if policy.normalized_fact(row["text"]) == policy.normalized_fact(text)
            ]
            duplicate = (
                same_text[0]
                if same_text
                else policy.find_duplicate(vector, existing, self.config.knowledge_dedup_similarity)
            )
            if duplicate is not None and same_text:
                self.store.touch_knowledge(rows[duplicate]["entry_id"], op.timestamp, now)
                continue
            entry_id = self.store.insert_knowledge(op.knowledge_kind, text, op.timestamp, vector, now)
            created.append(entry_id)
            if duplicate is not None:
                self.store.retire_knowledge(rows[duplicate]["entry_id"], replaced_by=entry_id)
        rows = self.store.active_knowledge(op.knowledge_kind)
        for entry_id in policy.knowledge_to_drop(
            {row["entry_id"]: row["updated_at"] for row in rows}, self.config.long_term_knowledge_capacity
        ):
            self.store.retire_knowledge(entry_id, replaced_by=None)
        return created

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
                self._hold.release()
                self.closed = True

    def erase(self) -> None:
        """Delete the whole space, files included. The space is unusable afterwards.

        Needs the space to itself: raises `SpaceBusyError` naming the other processes that have it open
        (nothing is deleted then). Holding it exclusively while deleting means no other process can open
        the space halfway through, or write a snapshot into the directory afterwards.
        """
        with self.lock:
            self._require_open()
            with self._hold.exclusive("forget"):
                self._pages.discard()  # no write into the directory while it is deleted
                self.store.close()
                self.closed = True
                shutil.rmtree(self.directory, ignore_errors=False)
            self._hold.release()

    def _require_open(self) -> None:
        if self.closed:
            raise StorageError(f"memory space {self.directory} is closed")

    def refresh(self) -> None:
        """Catch the page index up with vectors other processes stored since this one last looked, so a
        read sees their writes. `PRAGMA data_version` makes the no-news case one cheap query."""
        with self.lock:
            self._require_open()
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
    def max_page_id(self) -> int:
        """The id of the page stored last (0: none): what a read issued now must see."""
        return self.store.max_page_id()

    @_locked
    def short_term_pages(self) -> list[Page]:
        return self.store.pages_in_tier("stm")

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
        previous = self.store.get_meta("last_chained_page")
        found = self.store.pages([int(previous)]) if previous is not None else []
        return found[0] if found else None

    @_locked
    def segments(self, count_pages: bool = False) -> list[Segment]:
        return self.store.active_segments(count_pages)

    @_locked
    def segment_heats(self, now: float) -> dict[int, float]:
        weights = policy.HeatWeights(
            self.config.heat_alpha, self.config.heat_beta, self.config.heat_gamma, self.config.heat_tau_hours
        )
        return {
            s.segment_id: policy.heat_of(
                policy.SegmentState(s.segment_id, s.visit_count, s.interaction_count, s.last_visit_at),
                now,
                weights,
            )
            for s in self.store.active_segments()
        }

    @_locked
    def segments_to_promote(self, now: float) -> list[int]:
        return policy.segments_to_promote(
            self.segment_heats(now), self.store.unanalyzed_segment_ids(), self.config.mid_term_heat_threshold
        )

    @_locked
    def unanalyzed_pages(self, segment_id: int) -> list[Page]:
        return self.store.pages(self.store.segment_page_ids(segment_id, only_unanalyzed=True))

    @_locked
    def profile(self) -> str:
        return self.store.latest_profile()

    @_locked
    def knowledge(self, kind: KnowledgeKind) -> list[KnowledgeEntry]:
        return [
            KnowledgeEntry(
                entry_id=row["entry_id"], kind=kind, knowledge=row["text"], timestamp=row["timestamp"]
            )
            for row in self.store.active_knowledge(kind)
        ]

    @_locked
    def search_knowledge(
        self, kind: KnowledgeKind, query_vector: np.ndarray, k: int
    ) -> list[tuple[KnowledgeEntry, float]]:
        """Facts of one kind by cosine to the query, best first (brute force: at most capacity rows)."""
        rows = self.store.active_knowledge(kind)
        if not rows:
            return []
        scores = from_blobs([row["vector"] for row in rows], self.dim) @ query_vector
        order = np.argsort(-scores)[:k]
        return [
            (
                KnowledgeEntry(
                    entry_id=rows[i]["entry_id"],
                    kind=kind,
                    knowledge=rows[i]["text"],
                    timestamp=rows[i]["timestamp"],
                ),
                float(scores[i]),
            )
            for i in order
        ]


# --- the layout around spaces ------------------------------------------------------------------------------
def make_data_root(data_dir: Path) -> None:
    """Create the data directory if it is missing, marked (`ROOT_MARKER`) as made by MemoryOS, so that
    forgetting its last space removes it too; raises `StorageError` if it cannot be made."""
    if data_dir.is_dir():
        return
    make_directory(data_dir.parent)
    try:
        data_dir.mkdir()
    except FileExistsError:
        return  # another process made it first (or it is a file: the space's mkdir says so)
    except OSError as error:
        raise creation_error(error, data_dir) from None
    with contextlib.suppress(OSError):  # unmarked, the directory is merely kept
        (data_dir / ROOT_MARKER).write_text(
            "This directory was created by MemoryOS; it is removed when its last memory space is forgotten.\n"
        )


def remove_empty_parents(space_directory: Path) -> None:
    """After a space was erased: remove its user and tenant directories once nothing else is in them (a
    forgotten user's id does not stay on disk as a directory name), then the data directory if MemoryOS
    created it and nothing but its marker is left. `rmdir` removes only empty directories, so other users'
    and assistants' spaces, and whatever else a user keeps in a data directory, are never touched."""
    user_dir = space_directory.parent  # <data_dir>/<tenant>/<user_id>/<assistant_id>
    for directory in (user_dir, user_dir.parent):
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue  # already gone (another process forgot it too)
        except OSError:
            return  # not empty: another space lives here
    data_dir = user_dir.parent.parent
    try:
        if [entry.name for entry in data_dir.iterdir()] != [ROOT_MARKER]:
            return
        (data_dir / ROOT_MARKER).unlink()
    except OSError:
        return
    try:
        data_dir.rmdir()
    except FileNotFoundError:
        pass
    except OSError:  # a space was created meanwhile: the directory stays MemoryOS's
        with contextlib.suppress(OSError):
            (data_dir / ROOT_MARKER).touch()


def erase_space(directory: Path, config: MemoryConfig) -> dict[str, int] | None:
    """Erase the space in `directory` without opening its index or loading a model; returns what it held
    (pages by tier, facts, profile versions; None if its store could not be read — it is erased anyway).

    Needs the space to itself, as `MemorySpace.erase`: raises `SpaceBusyError` naming the other processes
    that have it open, and `SpaceNotFoundError` if there is no space there. Does not touch the
    directories above it (`remove_empty_parents`)."""
    hold = SpaceHold(directory, config.space_lock_timeout_s, require=STORE_FILE)
    try:
        hold.claim("forget")
        contents = _contents(directory / STORE_FILE, config)
        shutil.rmtree(directory)
    finally:
        hold.release()
    return contents


def _contents(path: Path, config: MemoryConfig) -> dict[str, int] | None:
    try:
        store = SqliteStore(path, config.store_busy_timeout_s)
    except (MemoryOSError, sqlite3.Error):
        return None
    try:
        pages = store.count_pages()
        return {
            "short_term_pages": pages.get("stm", 0),
            "mid_term_pages": pages.get("mtm", 0),
            "archived_pages": pages.get("archived", 0),
            "user_facts": len(store.active_knowledge("user")),
            "assistant_facts": len(store.active_knowledge("assistant")),
            "profile_versions": store.profile_version_count(),
        }
    except (MemoryOSError, sqlite3.Error):
        return None
    finally:
        store.close()
