"""Planners that move memory up the tiers: STM → MTM (dialogue chains, topic segments) and MTM → LPM
(profile, user facts, assistant facts).

Planners are coroutines: each `await` hands a request to the process's scheduler — an LLM task (pooled
with every other space's, at most `llm_max_concurrency` in flight) or texts to embed (into the shared
batcher's next batch) — and the code after it is the continuation that turns the results into plain ops
for `MemorySpace.apply_ops`. Calls that do not depend on each other are awaited together: the continuity
checks of all pages leaving STM, a run's chain summary and topic, a segment's profile and facts. The ops
of one step are applied together, in one transaction: a run's chain links with its filing, an analysed
slice's profile, facts and mark. One commit (an fsync) per step rather than per op, and a crash leaves
the step all done or not begun.

An LLM failure leaves the space as it was: the pages stay where they are and the work is retried later
(the scheduler backs off per space), so an error text can never become memory.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import numpy as np

from memoryos.backoff import Backoff
from memoryos.errors import LLMError
from memoryos.llm.base import AsyncMemoryLLM, TopicSummary
from memoryos.planning import guards, rebuild
from memoryos.planning.rebuild import ApplyOps
from memoryos.space import policy
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import (
    AddKnowledge,
    AnyOp,
    DeferAnalysis,
    FileTopic,
    LinkChain,
    MarkAnalyzed,
    UpdateProfile,
)
from memoryos.storage.records.base import PassMarks
from memoryos.types import Page
from memoryos.validation import TIMESTAMP_FORMAT, format_unix_timestamp

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 1.0
"""The pause after a first LLM failure of a unit of work; it doubles with each failure in a row."""

CHAIN_CONTEXT_PAGES = 8
"""Earlier chain pages shown when a chain's summary is refreshed: bounds the prompt of long chains."""

ANALYSIS_MAX_PAGES = 32
"""Pages analyzed into the profile and facts per LLM request: a segment holding more unanalyzed pages
(thousands, when every page of a large space joins one topic) is analyzed in slices of this many. Bounds
the prompt, the facts one AddKnowledge op applies under the space's lock, and the pages each fact records
as its sources (a fact per page over a 2,816-page slice wrote 8 M source rows and held the lock for
minutes, so reads waited)."""


MOVE_MAX_PAGES = 32
"""Pages leaving short-term memory per commit. After embedding lagged, thousands of pages may be due at
once; each filing scans the space's active segments under its lock, so slices keep reads from waiting
behind one long transaction."""


def _slices_of_runs(
    runs: list[tuple[bool, list[Page]]], max_pages: int
) -> list[list[tuple[bool, list[Page]]]]:
    """Consecutive runs grouped into commits of at most `max_pages` pages (a longer run is a commit alone:
    a run is filed under one topic, so it is not cut)."""
    slices: list[list[tuple[bool, list[Page]]]] = []
    pages_in_last = 0
    for run in runs:
        if not slices or pages_in_last + len(run[1]) > max_pages:
            slices.append([])
            pages_in_last = 0
        slices[-1].append(run)
        pages_in_last += len(run[1])
    return slices


def _moment(page: Page) -> datetime:
    return datetime.strptime(page.timestamp, TIMESTAMP_FORMAT)


EmbedTexts = Callable[[list[str]], Awaitable[np.ndarray]]
"""Vectors for texts that are not pages (new facts), from the scheduler's batcher."""


class Consolidator:
    """The tier transitions of one space, as coroutines the scheduler runs after writes and on demand.

    What failed on the LLM is not tried again on every write: moving the STM overflow and each segment's
    analysis have their own `Backoff` (1 s after a failure, doubling, at most `llm_backoff_max_s`), so a
    segment the LLM keeps failing on holds back neither new pages nor the other segments.
    """

    def __init__(
        self,
        llm: AsyncMemoryLLM,
        embed_texts: EmbedTexts,
        apply: ApplyOps,
        clock: Callable[[], float] = time.time,
        backoff_max_s: float = 300.0,
    ) -> None:
        self.llm = llm
        self.embed_texts = embed_texts
        self._apply = apply
        self._applied = 0
        """Calls of `apply` so far: a pass's marks answer its reads while this has not moved since."""
        self.clock = clock
        self._backoff_max_s = backoff_max_s
        self._overflow_backoff = self._new_backoff()
        self._rebuild_backoff = self._new_backoff()
        self._segment_backoffs: dict[int, Backoff] = {}
        self._step_errors: dict[str, LLMError] = {}
        """The LLM failure that postponed each step of `run` still postponed ("rebuild", "overflow")."""

    def _new_backoff(self) -> Backoff:
        return Backoff(FIRST_BACKOFF_S, self._backoff_max_s)

    async def apply(self, space: MemorySpace, *ops: AnyOp) -> list[list[int]]:
        """Apply `ops` together (the `apply` given), counted: what the pass read before may be out of date."""
        self._applied += 1
        return await self._apply(space, *ops)

    async def run(self, space: MemorySpace) -> PassMarks | None:
        """Erase what expired and rewrite what deletes left stale (`rebuild.py`), move STM overflow into
        mid-term memory, then promote every hot segment, skipping the work that is backing off. The steps
        fail independently: pages the LLM cannot file yet do not hold back the analysis of segments
        already hot. Failures are logged, not raised: they are retried when their backoff ends
        (`retry_in_s`).

        The pass reads what it needs in one look (`MemorySpace.pass_marks`), and again only after it
        applied something; returns those marks when nothing was applied after they were read (their next
        expiry is the space's), else None."""
        now = self.clock()
        marks = await rebuild.sweep_expired(space, self.apply, now, space.pass_marks(now))
        read_at = self._applied

        def current() -> PassMarks:
            nonlocal marks, read_at
            if self._applied != read_at:
                marks, read_at = space.pass_marks(self.clock()), self._applied
            return marks

        if self._rebuild_backoff.ready():
            try:
                await rebuild.rewrite_stale(space, self.llm, self.apply, self.clock, marks.rebuild)
                await rebuild.rebuild_profile(space, self.llm, self.apply, self.clock, marks.rebuild)
                self._rebuild_backoff.succeeded()
                self._step_errors.pop("rebuild", None)
            except LLMError as error:
                self._rebuild_backoff.failed()
                self._step_errors["rebuild"] = error
                log.warning("rewriting after a delete postponed: the LLM failed", extra={"error": str(error)})
        if self._overflow_backoff.ready():
            try:
                await self.move_overflow(space, current())
                self._overflow_backoff.succeeded()
                self._step_errors.pop("overflow", None)
            except LLMError as error:
                self._overflow_backoff.failed()
                self._step_errors["overflow"] = error
                log.warning(
                    "moving short-term overflow postponed: the LLM failed", extra={"error": str(error)}
                )
        due = [
            segment_id
            for segment_id in space.segments_to_promote(self.clock(), current())
            if self._segment_backoffs.get(segment_id) is None or self._segment_backoffs[segment_id].ready()
        ]
        try:
            await self.promote(space, due)
        except LLMError as error:
            log.warning("promotion postponed: the LLM failed", extra={"error": str(error)})
        return marks if self._applied == read_at else None

    def retry_now(self) -> None:
        """Make every step postponed by LLM failures due at once: the next `run` tries it (an explicit
        "consolidate now" must not be answered from a backoff set before the LLM recovered)."""
        for backoff in (self._overflow_backoff, self._rebuild_backoff, *self._segment_backoffs.values()):
            backoff.retry_now()

    def postponed_error(self) -> LLMError | None:
        """Why filing the short-term overflow or a rewrite after a delete is postponed, if it is: the LLM
        failure of its latest try (promotion failures are reported by `promote` itself)."""
        return next(iter(self._step_errors.values()), None)

    def retry_in_s(self) -> float | None:
        """Seconds until the earliest postponed work may be tried again; None when nothing is postponed."""
        backoffs = (self._overflow_backoff, self._rebuild_backoff, *self._segment_backoffs.values())
        waits = [b.wait_s() for b in backoffs]
        pending = [w for w in waits if w is not None]
        return min(pending) if pending else None

    async def move_overflow(self, space: MemorySpace, marks: PassMarks) -> None:
        """Pages beyond `short_term_capacity`, oldest first, join dialogue chains and then topic segments.

        Consecutive pages of one chain move as a run: one chain summary and one topic per run, not per page.
        A page already linked (a crash came between linking and filing) is filed without linking again.
        Every page's continuity check is asked at once (each compares a page with the one before it, known
        before any answer), and then the summaries of every run together.

        The runs' links and filings are applied together, up to `MOVE_MAX_PAGES` pages a commit: most of a
        busy worker's passes move a few pages that do not continue each other, and a commit per run would
        pay a transaction, an fsync and a store-thread handoff per page (docs/service.md). Where a run's
        summary fails, the runs before it are still applied and the failure is raised.

        `marks`: the pass's, read since its last apply (the overflow and the page chained last).
        """
        overflow = marks.overflow
        if not overflow:
            return
        previous = marks.last_chained
        last_linked = previous.page_id if previous is not None else 0  # as `apply` will see it
        befores = [previous, *overflow[:-1]]
        continuations = await asyncio.gather(
            *(self._continues(space, before, page) for before, page in zip(befores, overflow, strict=True))
        )
        runs: list[tuple[bool, list[Page]]] = []
        for page, continues in zip(overflow, continuations, strict=True):
            if runs and continues:
                runs[-1][1].append(page)
            else:
                runs.append((continues, [page]))
        for commit in _slices_of_runs(runs, MOVE_MAX_PAGES):
            # Only the first run can continue a chain already stored (each later run begins where a page
            # did not continue), so no run's summary waits for an earlier run's links to be applied.
            summaries = await asyncio.gather(
                *(self._summaries(space, previous, continues, pages) for continues, pages in commit),
                return_exceptions=True,
            )
            ops: list[AnyOp] = []
            failure: BaseException | None = None
            filed_ids = [page.page_id for _, pages in commit for page in pages]
            vectors = dict(zip(filed_ids, space.page_vectors(filed_ids), strict=True))  # one read a commit
            for (continues, pages), summarized in zip(commit, summaries, strict=True):
                if isinstance(summarized, BaseException):
                    failure = summarized
                    break
                topic, summary = summarized
                for position, page in enumerate(p for p in pages if p.chain_id is None):
                    first = position == 0 and page is pages[0]
                    ops.append(
                        LinkChain(
                            page_id=page.page_id,
                            continues_previous=continues if first else True,
                            chain_summary=summary or "",
                            previous_page_id=last_linked,
                            at=self.clock(),
                        )
                    )
                    last_linked = page.page_id
                ops.append(self._filing(pages, topic, [vectors[page.page_id] for page in pages]))
            if ops:
                await self.apply(space, *ops)  # the slice's links and filings: one commit
            if failure is not None:
                raise failure

    async def _summaries(
        self, space: MemorySpace, previous: Page | None, continues: bool, pages: Sequence[Page]
    ) -> tuple[TopicSummary, str | None]:
        """A run's topic, and the summary of the chain it joins or starts (None when every page of the run
        was linked before a crash). `previous`: the last page chained before this pass, which only the
        pass's first run can continue."""
        unlinked = any(p.chain_id is None for p in pages)
        earlier = _chain_of(space, previous) if unlinked and continues else []
        topic, summary = await asyncio.gather(
            self.llm.summarize_topic(pages),
            self.llm.summarize_chain([*earlier[-CHAIN_CONTEXT_PAGES:], *pages]) if unlinked else _none(),
        )
        return topic, summary

    async def _continues(self, space: MemorySpace, previous: Page | None, page: Page) -> bool:
        if page.chain_id is not None:
            return True  # linked before a crash: it continues what it was linked to
        if previous is None:
            return False
        gap_hours = abs((_moment(page) - _moment(previous)).total_seconds()) / 3600
        if gap_hours > space.config.chain_max_gap_hours:
            return False
        return await self.llm.is_continuation(previous, page)

    def _filing(self, pages: Sequence[Page], topic: TopicSummary, vectors: list[np.ndarray]) -> FileTopic:
        """The op filing a run under its topic. The topic's vector is the mean of the pages' vectors: it
        stands for what the pages say rather than for a summary of them, and costs no extra encode."""
        return FileTopic(
            page_ids=[p.page_id for p in pages],
            summary=topic.summary,
            keywords=topic.keywords,
            vector=policy.unit_mean(np.stack(vectors)),
            at=self.clock(),
        )

    async def promote(self, space: MemorySpace, segment_ids: Sequence[int]) -> None:
        """Analyze each segment's unanalyzed pages into the profile and long-term facts, then reset it.

        A segment whose analysis fails keeps its pages unanalyzed (retried later) and does not stop the
        others: one segment the LLM keeps failing on must not starve every segment behind it. The first
        failure is raised once the rest are done. Segments go one after another because each profile
        update merges into the one before it.
        """
        failure: LLMError | None = None
        for segment_id in segment_ids:
            backoff = self._segment_backoffs.setdefault(segment_id, self._new_backoff())
            try:
                await self._promote_one(space, segment_id)
                del self._segment_backoffs[segment_id]
            except LLMError as error:
                backoff.failed()
                failure = failure or error
        if failure is not None:
            raise failure

    async def _promote_one(self, space: MemorySpace, segment_id: int) -> None:
        """Analyze the segment's unanalyzed pages, `ANALYSIS_MAX_PAGES` at a time, oldest first; a slice
        is marked analyzed once its profile and facts are applied, so a failure keeps what came before."""
        pages = space.unanalyzed_pages(segment_id)
        for start in range(0, len(pages), ANALYSIS_MAX_PAGES):
            await self._analyze(space, segment_id, pages[start : start + ANALYSIS_MAX_PAGES])

    async def _analyze(self, space: MemorySpace, segment_id: int, pages: Sequence[Page]) -> None:
        """One slice's profile and facts, as the LLM proposes them less what the guards refuse
        (`guards.py`): a refused profile leaves the previous one, a refused fact is left out, and what
        passed is applied. A slice with a refusal is not marked analyzed but deferred, so a later pass
        analyses it again (with the pages that joined the segment since, under the profile of the time),
        until `guard_analysis_attempts` analyses of it were refused: it is then marked analyzed, and
        counted as given up."""
        previous = space.profile()
        profile, knowledge = await asyncio.gather(
            self.llm.update_profile(previous, pages), self.llm.extract_knowledge(pages)
        )
        user, assistant = knowledge.user_facts, knowledge.assistant_facts
        profile_kept, refused = True, False
        if guards.guards_enabled(space.config):
            guard = guards.ProposalGuard(guards.GuardSettings.of(space.config), space.directory.name, pages)
            kept_user = guard.facts("user", user)
            kept_assistant = guard.facts("assistant", assistant)
            profile_kept = guard.profile(previous, profile)
            refused = not profile_kept or len(kept_user) < len(user) or len(kept_assistant) < len(assistant)
            user, assistant = kept_user, kept_assistant
        timestamp = format_unix_timestamp(self.clock())
        sources = [p.page_id for p in pages]
        vectors = await self.embed_texts([*user, *assistant]) if user or assistant else None
        ops: list[AnyOp] = []
        if profile_kept:
            ops.append(
                UpdateProfile(
                    text=profile, source_segment_id=segment_id, source_page_ids=sources, at=self.clock()
                )
            )
        for kind, texts, start in (("user", user, 0), ("assistant", assistant, len(user))):
            if texts and vectors is not None:  # one embedding request for both kinds
                ops.append(
                    AddKnowledge(
                        knowledge_kind=kind,
                        texts=texts,
                        vectors=vectors[start : start + len(texts)],
                        timestamp=timestamp,
                        source_page_ids=sources,
                        at=self.clock(),
                    )
                )
        ops.append(self._analysis_mark(space, segment_id, sources, refused))
        await self.apply(space, *ops)  # the slice's profile, facts and mark: one commit, all or none

    def _analysis_mark(
        self, space: MemorySpace, segment_id: int, page_ids: list[int], refused: bool
    ) -> MarkAnalyzed | DeferAnalysis:
        """Analyzed, or deferred while a refused slice has attempts left. Facts that passed are stored
        either way: asked again, the model restates them, and a restatement refreshes the stored fact."""
        if not refused:
            return MarkAnalyzed(segment_id=segment_id, page_ids=page_ids, at=self.clock())
        attempt = space.analysis_attempts(page_ids) + 1
        deferred = attempt < space.config.guard_analysis_attempts
        guards.REFUSALS.record("analysis_deferred" if deferred else "analysis_given_up")
        log.info(
            "slice with refused proposals " + ("deferred" if deferred else "given up"),
            extra={"space": space.directory.name, "segment_id": segment_id, "attempt": attempt},
        )
        mark = DeferAnalysis if deferred else MarkAnalyzed
        return mark(segment_id=segment_id, page_ids=page_ids, at=self.clock())


def _chain_of(space: MemorySpace, page: Page | None) -> list[Page]:
    """The pages of `page`'s chain (none when it is in none): the chain the next page would continue."""
    if page is None or page.chain_id is None:
        return []
    return space.chain_pages(page.chain_id)


async def _none() -> None:
    return None
