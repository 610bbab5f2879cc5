"""How each op changes a memory space: the body of `MemorySpace.apply`, one case per op kind.

`MemorySpace` (`memory_space.py`) owns the transaction, the idempotency log lookup and the page index; what an
op does to the store inside that transaction is here — the staleness test of consolidation ops, segment
placement and eviction, fact deduplication — so the rules of the state machine read in one place. Every
function works on the store alone: no clock, no model, no index.
"""

from collections.abc import Sequence

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError
from memoryos.space import apply_lifecycle, policy
from memoryos.space.apply_lifecycle import PROFILE_STALE_META, SPACE_TTL_META
from memoryos.space.filing_segments import FilingSegments
from memoryos.space.ops import (
    AddKnowledge,
    AddTurns,
    AnyOp,
    DeferAnalysis,
    DeleteFacts,
    DeletePages,
    EmbedPages,
    ExpireDue,
    FileTopic,
    ForgetSpace,
    LinkChain,
    MarkAnalyzed,
    RecordVisits,
    RewriteChain,
    RewriteSegment,
    SetSpaceTTL,
    UpdateFact,
    UpdatePage,
    UpdateProfile,
)
from memoryos.space.page_states import PageStates
from memoryos.storage.records.base import LAST_CHAINED_META, RecordStore
from memoryos.storage.records.vector_blobs import at_stored_precision, from_blobs
from memoryos.types import Segment

_NOTES_ITS_PAGES = (
    LinkChain,
    FileTopic,
    MarkAnalyzed,
    DeferAnalysis,
    RecordVisits,
    UpdateProfile,
    AddKnowledge,
    EmbedPages,
)
"""Ops whose changes to pages' tier, chain, segment or analysis `PageStates` is told of, or that make none:
after any other op the kept states are dropped."""

_NOTES_ITS_SEGMENTS = (*_NOTES_ITS_PAGES, AddTurns)
"""Ops that change no active segment's summary, keywords, vector or topic count except as `FilingSegments`
is told (a visit or an analysis changes only counters, which filing does not read): after any other op
the kept segments are dropped."""


class OpApplier:
    """Applies ops to one space's store, inside a transaction the caller holds (`MemorySpace.apply`)."""

    def __init__(self, store: RecordStore, config: MemoryConfig, dim: int) -> None:
        self.store = store
        self.config = config
        self.dim = dim
        self._pages = PageStates(store)
        self._segments = FilingSegments(store, dim)

    def begin(self, ops: Sequence[AnyOp]) -> None:
        """A transaction starts that will apply `ops`: the pages their checks read are read now, together
        (`PageStates`), with the page chained last when a link may continue it, and the active segments
        when one files a topic (`FilingSegments`)."""
        self._pages.forget()
        self._segments.forget()
        wanted = pages_checked(ops)
        if any(isinstance(op, LinkChain) and op.continues_previous for op in ops):
            last = self.store.get_meta(LAST_CHAINED_META)  # the same for every link: read once
            wanted += [] if last is None else [int(last)]
        self._pages.read(wanted)
        if any(isinstance(op, FileTopic) for op in ops):
            self._segments.active()  # read before any write waits: the ops' writes then go together

    def end(self) -> None:
        """The transaction ended (committed or not): what was kept of its pages and segments is no longer
        known."""
        self._pages.forget()
        self._segments.forget()

    def apply(self, op: AnyOp) -> tuple[dict[str, object], list[int], np.ndarray | None]:
        """Apply `op` inside the caller's transaction and log it: (the log detail — ids touched, with the
        ids created under "created" —, pages given vectors, those vectors — the op's own, already at the
        store's precision)."""
        created: list[int] = []
        embedded: list[int] = []
        vectors: np.ndarray | None = None
        stale = self._stale_because(op)
        detail: dict[str, object] = {}
        match op:
            case _ if stale is not None:
                detail = {"stale": stale}
            case AddTurns():
                if op.vectors is not None:
                    self._check_vectors("vectors", op.vectors, len(op.turns))
                ttl_s = op.ttl_s if op.ttl_s is not None else self.store.get_meta(SPACE_TTL_META)
                expires_at = None if ttl_s is None else op.at + float(ttl_s)
                created = self.store.insert_pages(op.turns, op.vectors, op.at, expires_at, op.op_id)
                if op.vectors is not None:
                    embedded, vectors = created, op.vectors
            case EmbedPages():
                self._check_vectors("vectors", op.vectors, len(op.page_ids))
                embedded, vectors = self.store.set_page_vectors(op.page_ids, op.vectors)
                detail = {"page_ids": embedded}
            case LinkChain():
                detail = self._link_chain(op)
            case FileTopic():
                self._check_vectors("vector", op.vector.reshape(1, -1), 1)
                segment_id = self._file_topic(op)
                detail = {"page_ids": op.page_ids, "segment_id": segment_id}
            case RecordVisits():
                for segment_id in op.segment_ids:
                    self.store.add_segment_counters(segment_id, visits=1, interactions=0, at=op.at)
                detail = {"segment_ids": op.segment_ids}
            case UpdateProfile():
                if op.rebuild:
                    self.store.delete_profile_versions()
                    self.store.delete_meta(PROFILE_STALE_META)
                if op.text.strip() and op.text.strip() != self.store.latest_profile():
                    self.store.insert_profile(
                        op.text.strip(), op.at, op.source_segment_id, op.source_page_ids
                    )
                detail = {"source_segment_id": op.source_segment_id, "rebuild": op.rebuild}
            case AddKnowledge():
                self._check_vectors("vectors", op.vectors, len(op.texts))
                created = self._add_knowledge(op, op.at)
                detail = {"kind": op.knowledge_kind}
            case MarkAnalyzed():
                self.store.set_page_fields(op.page_ids, analyzed=1)
                self._pages.note(op.page_ids, analyzed=True)
                self.store.update_segment(op.segment_id, visit_count=0, interaction_count=0)
                detail = {"segment_id": op.segment_id, "page_ids": op.page_ids}
            case DeferAnalysis():
                self.store.count_analysis_attempt(op.page_ids)
                detail = {"segment_id": op.segment_id, "page_ids": op.page_ids}
            case DeletePages():
                detail = apply_lifecycle.delete_pages(self.store, op)
            case UpdatePage():
                detail = apply_lifecycle.update_page(self.store, op)
            case DeleteFacts():
                detail = apply_lifecycle.delete_facts(self.store, op)
            case UpdateFact():
                self._check_vectors("vector", op.vector.reshape(1, -1), 1)
                created, detail = apply_lifecycle.update_fact(self.store, op, op.vector)
            case SetSpaceTTL():
                if op.ttl_s is None:
                    self.store.delete_meta(SPACE_TTL_META)
                else:
                    self.store.set_meta(SPACE_TTL_META, repr(op.ttl_s))
                detail = {"ttl_s": op.ttl_s}
            case ExpireDue():
                detail = apply_lifecycle.expire_due(self.store, op.at)
            case ForgetSpace():
                detail = apply_lifecycle.forget_space(self.store)
            case RewriteChain():
                detail = apply_lifecycle.rewrite_chain(self.store, op)
            case RewriteSegment():
                self._check_vectors("vector", op.vector.reshape(1, -1), 1)
                detail = apply_lifecycle.rewrite_segment(self.store, op)
        if not isinstance(op, _NOTES_ITS_PAGES):
            self._pages.forget()  # its effect on pages (new, deleted, edited, expired) is not noted
        if not isinstance(op, _NOTES_ITS_SEGMENTS):
            self._segments.forget()  # nor its effect on segments (rewritten, emptied)
        if created:
            detail["created"] = created
        write_id = op.write_id if isinstance(op, AddTurns) else None
        self.store.log_op(op.kind, op.at, detail, op.op_id, write_id)
        return detail, embedded, vectors

    def _stale_because(self, op: AnyOp) -> str | None:
        """Why a consolidation op no longer fits the space (its pages moved since it was planned, by
        another process or an earlier delivery of the same work), or None when it applies."""
        match op:
            case FileTopic():
                pages = self._pages.of(op.page_ids)
                if len(pages) != len(op.page_ids) or any(p.tier != "stm" for p in pages):
                    return "pages no longer all in short-term memory"
            case MarkAnalyzed() | DeferAnalysis():
                pages = self._pages.of(op.page_ids)
                if len(pages) != len(op.page_ids) or any(
                    p.segment_id != op.segment_id or p.analyzed for p in pages
                ):
                    return "pages analyzed already or not in the segment"
            case RewriteChain() | RewriteSegment():
                return apply_lifecycle.stale_rewrite_because(self.store, op)
            case UpdateProfile() if op.rebuild and self.store.get_meta(PROFILE_STALE_META) is None:
                return "no profile rebuild is due"
            case UpdateProfile() if not op.rebuild and self.store.get_meta(PROFILE_STALE_META) is not None:
                return "the profile awaits a rebuild"
        return None

    def _check_vectors(self, field: str, vectors: np.ndarray, rows: int) -> None:
        if vectors.ndim != 2 or vectors.shape != (rows, self.dim):
            raise InvalidInputError(field, f"expected shape ({rows}, {self.dim}), got {vectors.shape}")

    def _link_chain(self, op: LinkChain) -> dict[str, object]:
        """Link the page into the chain of the page chained last (continuing it) or into a chain of its
        own, unless the plan went stale; the op's log detail. The page and the one chained last are read
        together, when `begin` has not read them with the transaction's other pages."""
        last = self.store.get_meta(LAST_CHAINED_META)
        continued = int(last) if op.continues_previous and last is not None else None
        self._pages.read([op.page_id] if continued is None else [op.page_id, continued])
        page = self._pages.get(op.page_id)
        if page is None or page.tier != "stm" or page.chain_id is not None:
            return {"stale": "page already linked or no longer in short-term memory"}
        if op.previous_page_id is not None and op.previous_page_id != int(last or 0):
            return {"stale": "another page was chained since the plan"}
        previous = None if continued is None else self._pages.get(continued)
        chain_id = previous.chain_id if previous is not None and previous.chain_id is not None else op.page_id
        self.store.upsert_chain(chain_id, op.chain_summary)
        self.store.set_page_fields([op.page_id], chain_id=chain_id)
        self._pages.note([op.page_id], chain_id=chain_id)
        self.store.set_meta(LAST_CHAINED_META, str(op.page_id))
        return {"page_id": op.page_id, "continues": op.continues_previous}

    def _file_topic(self, op: FileTopic) -> int:
        segments, vectors, topic_counts = self._segments.active()
        ids = [s.segment_id for s in segments]
        target = policy.choose_segment(
            op.vector,
            op.keywords,
            ids,
            vectors,
            [s.keywords for s in segments],
            self.config.mid_term_similarity_threshold,
        )
        if target is None:  # born with the pages' interactions: no counters' update after its insert
            keywords = policy.merged_keywords([], op.keywords)
            target = self.store.insert_segment(op.summary, keywords, op.vector, op.at, len(op.page_ids))
            born = Segment(
                segment_id=target,
                summary=op.summary,
                keywords=keywords,
                interaction_count=len(op.page_ids),
                last_visit_at=op.at,
                created_at=op.at,
            )
            self._segments.added(born, at_stored_precision(op.vector))
            active = len(segments) + 1
        else:
            position = ids.index(target)
            topics = topic_counts[position]
            summary = policy.merged_summary(segments[position].summary, op.summary)
            keywords = policy.merged_keywords(segments[position].keywords, op.keywords)
            vector = policy.merged_vector(vectors[position], topics, op.vector)
            self.store.update_segment(
                target,
                summary=summary,
                keywords=keywords,
                vector=vector,
                topic_count=topics + 1,
                updated_at=op.at,
            )
            self.store.add_segment_counters(target, visits=0, interactions=len(op.page_ids), at=op.at)
            merged = segments[position].model_copy(update={"summary": summary, "keywords": keywords})
            self._segments.merged(merged, at_stored_precision(vector), topics + 1)
            active = len(segments)
        self.store.set_page_fields(op.page_ids, tier="mtm", segment_id=target)
        self._pages.note(op.page_ids, tier="mtm", segment_id=target)
        if active > self.config.mid_term_capacity:  # else no heat needs reading: nothing is evicted
            self._evict_cold_segments(op.at, keep=target)
        return target

    def _evict_cold_segments(self, now: float, keep: int) -> None:
        """Archive the coldest segments over capacity; their pages stay stored and searchable.

        The segment just filed into is never the one archived: its pages would leave before analysis.
        """
        heats = segment_heats(self.store, self.config, now)
        heats.pop(keep, None)
        for segment_id in policy.segments_to_evict(heats, self.config.mid_term_capacity - 1):
            self.store.update_segment(segment_id, archived=1)
            self._segments.archived(segment_id)
            archived = self.store.segment_page_ids(segment_id)
            self.store.set_page_fields(archived, tier="archived")
            self._pages.note(archived, tier="archived")

    def _add_knowledge(self, op: AddKnowledge, now: float) -> list[int]:
        """Each text joins the active facts of its kind: a restatement (same words) refreshes the fact
        and adds the op's pages to its sources; a near-duplicate (cosine) becomes a new version that
        replaces it; anything else is a new fact. Every version records only the pages it was itself
        drawn from: what it replaced still supports it through `replaced_by` (`fact_support`), so a fact
        restated over thousands of pages costs one source row per page and version, not a copy of its
        whole history per version (that copy made consolidating a 10k-page space quadratic)."""
        created: list[int] = []
        expires_at = self._expiry_of(op.source_page_ids)  # the same pages for every text of the op
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
                self.store.add_knowledge_sources(rows[duplicate]["entry_id"], op.source_page_ids)
                continue
            entry_id = self.store.insert_knowledge(
                op.knowledge_kind,
                text,
                op.timestamp,
                vector,
                now,
                op.source_page_ids,
                expires_at=expires_at,
            )
            created.append(entry_id)
            if duplicate is not None:
                # The new version stands on what supported the one it replaces too (through the link, not
                # a copy of its sources): it lives while any of those pages does.
                self.store.retire_knowledge(rows[duplicate]["entry_id"], replaced_by=entry_id)
        rows = self.store.active_knowledge(op.knowledge_kind)
        for entry_id in policy.knowledge_to_drop(
            {row["entry_id"]: row["updated_at"] for row in rows}, self.config.long_term_knowledge_capacity
        ):
            self.store.retire_knowledge(entry_id, replaced_by=None)
        return created

    def _expiry_of(self, page_ids: list[int]) -> float | None:
        """A fact drawn only from expiring pages expires with the last of them; otherwise never."""
        expiries = [p.expires_at for p in self.store.pages(page_ids)]
        if not expiries or any(e is None for e in expiries):
            return None
        return max(e for e in expiries if e is not None)


def pages_checked(ops: Sequence[AnyOp]) -> list[int]:
    """The pages consolidation's checks of `ops` read (`OpApplier.begin`, `PageStates`)."""
    named: list[int] = []
    for op in ops:
        match op:
            case LinkChain():
                named.append(op.page_id)
            case FileTopic() | MarkAnalyzed() | DeferAnalysis():
                named += op.page_ids
    return named


def pages_read_first(ops: Sequence[AnyOp]) -> list[int]:
    """The pages `ops` read before they write: those their checks read and those an embedding checks are
    still waiting for their vector. A database store reads them with the transaction's BEGIN
    (`RecordStore.transaction(pages=…)`), in the round trip that takes its lock."""
    return [*pages_checked(ops), *(pid for op in ops if isinstance(op, EmbedPages) for pid in op.page_ids)]


def segment_heats(store: RecordStore, config: MemoryConfig, now: float) -> dict[int, float]:
    """The heat of every mid-term segment at `now`: what eviction and promotion rank by."""
    return heats_of(store.active_segments(), config, now)


def heats_of(segments: Sequence[Segment], config: MemoryConfig, now: float) -> dict[int, float]:
    """The heat at `now` of each of these segments (as read: `segment_heats`, or a pass's marks)."""
    weights = policy.HeatWeights(
        config.heat_alpha, config.heat_beta, config.heat_gamma, config.heat_tau_hours
    )
    return {
        s.segment_id: policy.heat_of(
            policy.SegmentState(s.segment_id, s.visit_count, s.interaction_count, s.last_visit_at),
            now,
            weights,
        )
        for s in segments
    }
