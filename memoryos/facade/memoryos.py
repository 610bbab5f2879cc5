"""`Memoryos`: the reference package's API over our engine, so its users switch by changing one import.

One instance serves one memory space, `(user_id, assistant_id)` under `data_storage_path`. Writes are
durable when a method returns. Embedding and consolidation (chains, segments, profile, facts) run on the
process's scheduler (`memoryos/scheduler/`), pooled with every other open space; a read waits for the
vectors of the writes before it, not for consolidation. One instance may be shared by threads.
"""

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder
from memoryos.embedding.shared import shared_embedder
from memoryos.errors import EmbeddingModelMismatchError, InvalidInputError, SpaceNotFoundError
from memoryos.facade.lifecycle import MemoryLifecycle
from memoryos.llm import MemoryLLM, create_llm
from memoryos.planning.generation import answer_request
from memoryos.planning.query_rewrite import query_rewriter
from memoryos.planning.retrieval import retrieve_context, word_asks
from memoryos.scheduler import Scheduler, shared_scheduler
from memoryos.scheduler.space_work import SpaceWork
from memoryos.space import policy
from memoryos.space.layout import erase_space, make_data_root, remove_empty_parents
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns, AnyOp, ForgetSpace, UpdatePage
from memoryos.space.writes import plan_write
from memoryos.storage.records.factory import ShardFence, record_store_exists
from memoryos.storage.space_lock import SpaceBusyError
from memoryos.types import MemoryStats, RetrievedContext, Segment, SegmentStats, WriteStatus
from memoryos.validation import validate_id, validate_text

log = logging.getLogger(__name__)


class Memoryos(MemoryLifecycle):
    """Long-term memory for one user of one assistant. Lifecycle methods (list, edit, delete, history,
    expiry) are in `memoryos/facade/lifecycle.py`."""

    def __init__(
        self,
        user_id: str,
        openai_api_key: str | None,
        data_storage_path: str | Path,
        openai_base_url: str | None = None,
        assistant_id: str = "default_assistant_profile",
        short_term_capacity: int = 10,
        mid_term_capacity: int = 2000,
        long_term_knowledge_capacity: int = 100,
        retrieval_queue_capacity: int = 7,
        mid_term_heat_threshold: float = 5.0,
        mid_term_similarity_threshold: float = 0.6,
        llm_model: str = "gpt-4o-mini",
        embedding_model_name: str | Path = "all-MiniLM-L6-v2",
        embedding_model_kwargs: dict[str, Any] | None = None,
        *,
        config: MemoryConfig | None = None,
        embedder: Embedder | None = None,
        llm: MemoryLLM | None = None,
        clock: Callable[[], float] = time.time,
        scheduler: Scheduler | None = None,
        create: bool = True,
        fence: ShardFence | None = None,
    ) -> None:
        """Arguments up to `embedding_model_kwargs` are the reference's, with its defaults. `config`
        supplies every other setting (env `MEMORYOS_*`); `embedder`, `llm`, `clock` and `scheduler` (default:
        the process's) let tests and services inject shared or deterministic parts; `fence` is a service
        worker's fencing number for the space's shard, checked by every write of a database's space.
        `embedding_model_kwargs` goes to `SentenceTransformer(...)` as in the reference (JSON values only;
        None keeps `config.embedding_model_kwargs`); a `device` in it wins over `config.embedding_device`.

        `create=False` opens an existing space only: if there is none, `SpaceNotFoundError` is raised
        before anything is loaded or created (no directory, no file) — what a read-only tool wants, so a
        mistyped user id or data directory is an error rather than a new empty store.

        `pending_pages_at_open` tells how many pages were stored but not yet embedded when the space was
        opened (left by an interrupted run, or being embedded by another process): reads wait for them."""
        self.user_id = validate_id("user_id", user_id)
        self.assistant_id = validate_id("assistant_id", assistant_id)
        overrides: dict[str, Any] = {
            "data_dir": Path(data_storage_path),
            "short_term_capacity": short_term_capacity,
            "mid_term_capacity": mid_term_capacity,
            "long_term_knowledge_capacity": long_term_knowledge_capacity,
            "retrieval_queue_capacity": retrieval_queue_capacity,
            "mid_term_heat_threshold": mid_term_heat_threshold,
            "mid_term_similarity_threshold": mid_term_similarity_threshold,
            "llm_model": llm_model,
            "embedding_model_name": embedding_model_name,
            "openai_api_key": openai_api_key,
            "openai_base_url": openai_base_url,
        }
        if embedding_model_kwargs is not None:
            overrides["embedding_model_kwargs"] = embedding_model_kwargs
        self.config = (config or MemoryConfig()).model_copy(deep=True)
        # Each override is validated on assignment (`validate_assignment`): the same field validators as
        # a new MemoryConfig, without reading the environment again: pydantic-settings' sources cost more
        # than the rest of opening a space (docs/service.md).
        for field, value in overrides.items():
            setattr(self.config, field, value)
        directory = self.config.space_dir(self.user_id, self.assistant_id)
        if not create and not record_store_exists(self.config, directory):
            raise SpaceNotFoundError(directory)  # before a model, an LLM client or a directory is made
        self.clock = clock
        self.embedder = embedder or shared_embedder(self.config)
        self.llm = llm or create_llm(self.config)
        self._rewriter = query_rewriter(self.config)
        if create:
            make_data_root(self.config.data_dir)
        self.space = MemorySpace(
            directory,
            self.config,
            self.embedder.name,
            lambda: self.embedder.dim,
            clock,
            create=create,
            fence=fence,
        )
        self._scheduler = scheduler or shared_scheduler(self.config)
        self._work = SpaceWork(self._scheduler, self.space, self.embedder, self.llm, clock)
        # A space this open created holds no pages of its own yet (`RecordStore.created`): nothing to
        # count, one round trip less per new user on a database.
        self.pending_pages_at_open = 0 if self.space.store.created else self.space.pending_page_count()
        if self.pending_pages_at_open:
            self._work.pages_written(acknowledged=False)  # acknowledged before a crash, not yet embedded

    @classmethod
    def from_config(
        cls,
        user_id: str,
        config: MemoryConfig,
        assistant_id: str = "default_assistant_profile",
        **parts: Any,
    ) -> "Memoryos":
        """Open a space with every setting taken from `config` (front ends, services, the harness).
        `parts` passes `embedder`, `llm`, `clock` or `scheduler` through."""
        api_key = config.openai_api_key.get_secret_value() if config.openai_api_key else None
        return cls(
            user_id=user_id,
            openai_api_key=api_key,
            data_storage_path=config.data_dir,
            openai_base_url=config.openai_base_url,
            assistant_id=assistant_id,
            short_term_capacity=config.short_term_capacity,
            mid_term_capacity=config.mid_term_capacity,
            long_term_knowledge_capacity=config.long_term_knowledge_capacity,
            retrieval_queue_capacity=config.retrieval_queue_capacity,
            mid_term_heat_threshold=config.mid_term_heat_threshold,
            mid_term_similarity_threshold=config.mid_term_similarity_threshold,
            llm_model=config.llm_model,
            embedding_model_name=config.embedding_model_name,
            config=config,
            **parts,
        )

    # --- writing --------------------------------------------------------------------------------------
    def add_memory(
        self,
        user_input: str,
        agent_response: str,
        timestamp: str | None = None,
        meta_data: Mapping[str, Any] | None = None,
        *,
        write_id: str | None = None,
        ttl_s: float | None = None,
    ) -> int:
        """Store one exchange; returns its page id. `meta_data` is stored and returned with the page.
        `write_id` and `ttl_s` as in `add_memories`."""
        return self.add_memories(
            [
                {
                    "user_input": user_input,
                    "agent_response": agent_response,
                    "timestamp": timestamp,
                    "meta_data": meta_data,
                }
            ],
            write_id=write_id,
            ttl_s=ttl_s,
            _field_prefix="",
        )[0]

    def add_memories(
        self,
        turns: Iterable[Mapping[str, Any]],
        *,
        write_id: str | None = None,
        ttl_s: float | None = None,
        _field_prefix: str = "turns",
    ) -> list[int]:
        """Store many exchanges with one embedding batch; all are validated before any is stored.

        `write_id` (1-64 characters of [A-Za-z0-9_-]) makes the write idempotent: a client retrying a
        write whose acknowledgement it lost sends the same id, and the pages are stored once; the retry
        returns the page ids of the first delivery. The same id with other turns or `ttl_s` is another
        write, not a retry: `WriteIdConflictError` (an `InvalidInputError`), and nothing is stored.
        Without it every call is a new write.

        `ttl_s` (seconds) makes these pages expire: never returned after, then erased by the scheduler's
        sweep. None keeps the space's TTL (`set_ttl`), or forever."""
        op = plan_write(
            turns,
            max_text_chars=self.config.max_text_chars,
            at=self.clock(),
            write_id=write_id,
            ttl_s=ttl_s,
            field_prefix=_field_prefix,
        )
        if self.config.ingest_mode == "inline" and self.embedder.dim != self.space.dim:
            # Inline callers wait for the vectors anyway: refuse a model of another dimension before storing.
            raise EmbeddingModelMismatchError(
                self.space.embedding_model, self.space.dim, self.embedder.name, self.embedder.dim
            )
        return self.apply_write(op)

    def apply_write(self, op: AddTurns) -> list[int]:
        """Store a write planned by `memoryos.space.writes.plan_write` — here, or by a service's API before it
        queued the op for this space's owner — and have the scheduler embed it. Idempotent by the op's
        write id: a queue delivering it again stores nothing new and returns the first page ids."""
        return self.apply_writes([op])[0]

    def apply_writes(self, ops: Sequence[AddTurns]) -> list[list[int]]:
        """`apply_write` for a run of planned writes, in order, in one transaction (one commit): how a
        service's worker applies the writes of this space it found queued together. Returns each
        write's page ids; all or none are stored."""
        page_ids = self.space.apply_ops(ops)  # durable now
        self._work.pages_written()
        if self.config.ingest_mode == "inline":
            self._work.flush()
        return page_ids

    def apply_queued(self, op: AnyOp) -> dict[str, object]:
        """Apply an op a service's queue delivered for this space (its worker calls this): a planned
        write, a lifecycle change or a forget, each followed by the scheduler work it needs. Idempotent,
        as every op is; returns the op log's detail. A forget erases the space: the instance is closed."""
        if isinstance(op, AddTurns):
            return {"created": self.apply_write(op)}
        if isinstance(op, ForgetSpace):
            self.forget_user()
            return {"forgotten": True}
        detail = self.space.apply_for_detail(op)
        if isinstance(op, UpdatePage):
            self._work.pages_written()  # embed its new text
        self._work.request_consolidation()
        return detail

    def write_status(self, write_id: str) -> WriteStatus | None:
        """Where an acknowledged write stands: its page ids and whether all are searchable (embedded);
        None when no write with that id was stored in this space."""
        page_ids = self.space.written_page_ids(write_id)
        if page_ids is None:
            return None
        pending = set(self.space.pending_among(page_ids))
        return WriteStatus(write_id=write_id, page_ids=page_ids, searchable=not pending)

    def flush(self) -> None:
        """Wait until every write so far is embedded and consolidated. Reads wait only for the vectors
        they need; call this to see the profile, facts and segments of the latest writes."""
        self._work.flush()

    # --- reading --------------------------------------------------------------------------------------
    def retrieve(
        self,
        query: str,
        top_k: int | None = None,
        knowledge_top_k: int | None = None,
        max_vector_wait_s: float | None = None,
    ) -> RetrievedContext:
        """Context for `query` from every tier. Segments of the returned pages get a visit (heat).

        The read sees every write stored before it. It waits for those pages' vectors, so that they are
        found by meaning too — without end by default, or at most `max_vector_wait_s`: a service under a
        backlog of writes must still answer within its latency bound; a bounded read stops waiting at once
        when the embedding batches ahead of its pages would outlast the bound (`vectors_due_in_s`). Pages
        still without a vector then are ranked by their words and date alone (recent ones are in
        `short_term_memory` anyway), and the result counts them in `pages_without_vectors`, so the weaker
        read is never silent."""
        text = validate_text("query", query, self.config.max_text_chars)
        wait_s = _vector_wait("max_vector_wait_s", max_vector_wait_s)
        page_k = self._positive("top_k", top_k, self.config.retrieval_queue_capacity)
        fact_k = self._positive("knowledge_top_k", knowledge_top_k, self.config.knowledge_top_k)
        search = self._rewriter.search_text(text) if self._rewriter else text
        asks = word_asks(self.space, search)
        now = self.clock()
        # Every write before this read, the page counts its words need and what every retrieval reads
        # besides its ranking, in one look at the store.
        opening = self.space.read_opening(asks.asks, now)
        marks = opening.marks
        through = marks.max_page_id
        try:
            looked_again = self._work.wait_embedded(through, wait_s, stop_when_futile=True, marks=marks)
            waited_out = False
        except TimeoutError:  # answered without the vectors still missing, and counted below
            looked_again = waited_out = True
        # Vectors other processes stored since the last look: the marks' data version is the store's
        # when they found no page to wait for (no query then), else it is read again.
        self.space.refresh(None if looked_again else marks.data_version)
        words = asks.counted(self.space, opening.counts)
        query_vector = self._work.encode_query(words.dense_text)
        context = retrieve_context(
            self.space, text, query_vector, page_k, fact_k, now, search, words, opening.basis
        )
        if waited_out:  # a read whose wait completed had every vector: no count query on that path
            context.pages_without_vectors = self.space.pending_page_count(through)
        visited = sorted(
            {p.segment_id for p in context.retrieved_pages if p.segment_id is not None and p.tier == "mtm"}
        )
        self._work.note_visits(visited, now)
        return context

    @staticmethod
    def _positive(field: str, value: int | None, default: int) -> int:
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InvalidInputError(field, f"must be a positive integer, got {value!r}")
        return value

    def get_response(
        self,
        query: str,
        relationship_with_user: str = "friend",
        style_hint: str = "",
        user_conversation_meta_data: Mapping[str, Any] | None = None,
    ) -> str:
        """Answer `query` from memory with the LLM, then remember the exchange.

        The answer is returned whole. One over `max_text_chars` is stored cut to that length, with a
        warning: the limit guards the store against callers, and refusing the model's own answer after
        paying for it would lose the exchange and the answer both."""
        context = self.retrieve(query)
        request = answer_request(context, relationship_with_user, style_hint, user_conversation_meta_data)
        response = self._work.answer(request)
        limit = self.config.max_text_chars
        if len(response) > limit:
            log.warning(
                "answer over max_text_chars stored cut", extra={"chars": len(response), "kept": limit}
            )
        self.add_memory(context.query, response[:limit], meta_data=user_conversation_meta_data)
        return response

    def get_user_profile_summary(self) -> str:
        self.flush()
        return self.space.profile()

    def get_assistant_knowledge_summary(self) -> list[dict[str, str | int]]:
        """The assistant's facts in this space, as the reference's `{knowledge, timestamp}` records."""
        self.flush()
        return [
            {"knowledge": e.knowledge, "timestamp": e.timestamp, "entry_id": e.entry_id}
            for e in self.space.knowledge("assistant")
        ]

    def get_user_knowledge(self) -> list[dict[str, str | int]]:
        self.flush()
        return [
            {"knowledge": e.knowledge, "timestamp": e.timestamp, "entry_id": e.entry_id}
            for e in self.space.knowledge("user")
        ]

    def force_mid_term_analysis(self) -> None:
        """Analyze every segment with unanalyzed pages now, whatever its heat. Work postponed by earlier
        LLM failures (filing short-term overflow, rewrites after a delete) is tried now too, not when its
        backoff ends. Raises `LLMError` if the LLM fails on any of it; what succeeded is kept, what failed
        is left as it was and retried later — a failure is never reported as done."""
        self._work.consolidator.retry_now()
        self.flush()
        postponed = self._work.consolidator.postponed_error()
        segments = [s.segment_id for s in self.space.segments()]
        ready = [sid for sid in segments if self.space.unanalyzed_pages(sid)]
        self._work.run_now(lambda consolidator: consolidator.promote(self.space, ready))
        if postponed is not None:
            raise postponed

    def get_memory_stats(self) -> dict[str, Any]:
        return self.stats().model_dump()

    def stats(self) -> MemoryStats:
        self.flush()
        counts = self.space.store.count_pages()
        config = self.space.config
        weights = policy.HeatWeights(
            config.heat_alpha, config.heat_beta, config.heat_gamma, config.heat_tau_hours
        )
        now = self.clock()
        return MemoryStats(
            user_id=self.user_id,
            assistant_id=self.assistant_id,
            short_term_pages=counts.get("stm", 0),
            mid_term_pages=counts.get("mtm", 0),
            archived_pages=counts.get("archived", 0),
            segments=[_segment_stats(s, now, weights) for s in self.space.segments(count_pages=True)],
            user_knowledge=len(self.space.knowledge("user")),
            assistant_knowledge=len(self.space.knowledge("assistant")),
            profile_versions=self.space.store.profile_version_count(),
            embedding_model=self.space.embedding_model,
            embedding_dim=self.space.dim,
            promotion_threshold=config.mid_term_heat_threshold,
            storage_bytes=_directory_bytes(self.space.directory),
            llm_usage={op: usage.model_dump() for op, usage in self.llm.usage.items()},
        )

    # --- lifecycle ------------------------------------------------------------------------------------
    def forget_user(self) -> None:
        """Erase this space entirely, files included. The instance cannot be used afterwards.

        Raises `SpaceBusyError` (nothing erased, the instance still usable) while another process has the
        space open: its message names their pids.

        The `<tenant>/<user_id>/` directories above it go too once nothing else is in them, so a forgotten
        user's id does not stay on disk as a directory name. `rmdir` removes only empty directories, so
        other users' and assistants' spaces are never touched. The data directory goes when MemoryOS
        created it and nothing is left in it; a data directory that existed before is kept
        (`remove_empty_parents`)."""
        self._close_work()
        try:
            self.space.erase()
        except SpaceBusyError:  # nothing was erased: the instance keeps working
            self._work = SpaceWork(self._scheduler, self.space, self.embedder, self.llm, self.clock)
            raise
        # The process's embedding cache is shared by every space and keyed by text alone: emptied whole,
        # no text of this user stays in memory (the other spaces only re-encode what they ask again).
        self.embedder.forget_texts(None)
        remove_empty_parents(self.space.directory)

    def close(self) -> None:
        """Let a running consolidation pass finish, apply buffered visits, snapshot the index and close the
        store; a second call does nothing. Pages not yet embedded stay durable: the next open embeds them.

        Once the scheduler is closed (the process is exiting: it closes at interpreter exit, before any
        atexit hook, cancelling the passes in flight; or `memoryos` stopped it on Ctrl-C), only the space is
        closed: waiting for work that no thread will do would never end."""
        self._close_work()
        self.space.close()

    def _close_work(self) -> None:
        if not self._scheduler.closed:
            self._work.close()

    def __enter__(self) -> "Memoryos":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _directory_bytes(directory: Path) -> int:
    """Bytes of the files under `directory`; a file removed while they are counted (a snapshot replaced)
    counts as gone."""
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            if path.is_file():
                total += path.stat().st_size
    return total


def _segment_stats(segment: Segment, now: float, weights: policy.HeatWeights) -> SegmentStats:
    """A segment with its heat and that heat's parts, all from this one row at `now`, so the parts a
    view stacks always add up to the heat it shows (the same terms `policy.heat_of` ranks by)."""
    state = policy.SegmentState(
        segment.segment_id, segment.visit_count, segment.interaction_count, segment.last_visit_at
    )
    parts = policy.heat_parts(state, now, weights)
    return SegmentStats(
        segment_id=segment.segment_id,
        summary=segment.summary,
        page_count=segment.page_count,
        heat=parts.total,
        heat_visits=parts.visits,
        heat_length=parts.length,
        heat_recency=parts.recency,
    )


def forget_space(
    user_id: str,
    config: MemoryConfig,
    assistant_id: str = "default_assistant_profile",
    embedder: Embedder | None = None,
    fence: ShardFence | None = None,
) -> dict[str, int] | None:
    """Erase one space, as `Memoryos.forget_user`, without opening it: no model is loaded and pages still
    pending are not embedded first. Returns what the space held (`erase_space`). `embedder`: the process's
    embedder its other spaces share, whose cache is emptied as `forget_user` empties it (a service's);
    `fence`: a service worker's fencing number for the space's shard, with a database.

    Raises `SpaceNotFoundError` if there is no such space (nothing is created) and `SpaceBusyError`
    (nothing erased) while another process has it open; its message names their pids."""
    directory = config.space_dir(validate_id("user_id", user_id), validate_id("assistant_id", assistant_id))
    contents = erase_space(directory, config, fence)
    remove_empty_parents(directory)
    if embedder is not None:
        embedder.forget_texts(None)  # keyed by text alone and shared: emptied whole
    return contents


def _vector_wait(field: str, value: float | None) -> float | None:
    """A read's bound on waiting for vectors: None (wait until embedded) or seconds, at least 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(field, f"must be a finite number of seconds, at least 0, got {value!r}")
    return float(value)
