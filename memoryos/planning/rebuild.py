"""Planners for the lifecycle's deferred work: the expiry sweep, and rewriting what a deleted or edited
page leaves behind (chain and segment summaries marked stale, the profile).

A delete applies at once and removes the page's own text everywhere; texts *derived* from it need the LLM
again, so `memoryos/space/apply_lifecycle.py` only marks them, and the consolidation pass calls these planners first:
`sweep_expired` deletes what expired, `rewrite_stale` re-summarizes stale chains and segments from their
remaining pages, `rebuild_profile` rebuilds the profile from every page still analyzed. Each ends in an
op whose `apply` checks that the pages it was planned from are still the same (a stale plan is a no-op),
so a delete racing a rewrite is rewritten again by the next pass.
"""

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from memoryos.llm.base import AsyncMemoryLLM
from memoryos.space import policy
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AnyOp, ExpireDue, RewriteChain, RewriteSegment, UpdateProfile
from memoryos.storage.records.base import PassMarks, RebuildMarks

log = logging.getLogger(__name__)

PROFILE_REBUILD_PAGES = 20
"""Pages merged into the profile per LLM call of a rebuild: the size of one promotion's batch."""


class ApplyOps(Protocol):
    """`space.apply_ops(ops)` off the event loop: a commit waits for an fsync. The ops of one call are
    applied in order in one transaction, all or none — what consolidation's steps want together."""

    def __call__(self, space: MemorySpace, *ops: AnyOp) -> Awaitable[list[list[int]]]: ...


async def sweep_expired(space: MemorySpace, apply: ApplyOps, now: float, marks: PassMarks) -> PassMarks:
    """Erase pages and facts whose expiry has passed (they were already never returned), when the pass's
    `marks` show any; the marks the rest of the pass works from, read again after the erase (which may
    leave summaries stale, and moves the overflow and the next expiry)."""
    if not marks.rebuild.expired:
        return marks
    await apply(space, ExpireDue(at=now))
    return space.pass_marks(now)


def next_expiry(space: MemorySpace) -> float | None:
    """Unix seconds when the next page or fact expires, for the sweep's timer (None: nothing expires)."""
    with space.lock:
        return space.store.next_expiry()


async def rewrite_stale(
    space: MemorySpace, llm: AsyncMemoryLLM, apply: ApplyOps, clock: Callable[[], float], marks: RebuildMarks
) -> None:
    """Re-summarize every stale chain and segment from the pages left in it. A segment with a page still
    waiting for its new vector (an edit) waits for the next pass: its topic vector is the pages' mean."""
    if not (marks.stale_chain_ids or marks.stale_segment_ids):
        return
    with space.lock:
        chains = {cid: space.store.chain_page_ids(cid) for cid in marks.stale_chain_ids}
        segments = {sid: space.store.segment_page_ids(sid) for sid in marks.stale_segment_ids}
    for chain_id, page_ids in chains.items():
        summary = await llm.summarize_chain(space.pages(page_ids))
        await apply(space, RewriteChain(chain_id=chain_id, summary=summary, page_ids=page_ids, at=clock()))
    for segment_id, page_ids in segments.items():
        embedded, vectors = space.embedded_page_vectors(page_ids)
        if len(embedded) != len(page_ids):
            continue
        topic = await llm.summarize_topic(space.pages(page_ids))
        await apply(
            space,
            RewriteSegment(
                segment_id=segment_id,
                summary=topic.summary,
                keywords=topic.keywords,
                vector=policy.unit_mean(vectors),
                page_ids=page_ids,
                at=clock(),
            ),
        )


async def rebuild_profile(
    space: MemorySpace, llm: AsyncMemoryLLM, apply: ApplyOps, clock: Callable[[], float], marks: RebuildMarks
) -> None:
    """When due, the profile again from scratch over every page still analyzed, in promotion-sized
    batches; the op replaces every older version (each may carry a removed page's text)."""
    if not marks.profile_stale:
        return
    with space.lock:
        page_ids = space.store.analyzed_page_ids()
    profile = ""
    for start in range(0, len(page_ids), PROFILE_REBUILD_PAGES):
        profile = await llm.update_profile(
            profile, space.pages(page_ids[start : start + PROFILE_REBUILD_PAGES])
        )
    await apply(space, UpdateProfile(text=profile, source_page_ids=page_ids, rebuild=True, at=clock()))
    log.info("profile rebuilt after a delete or edit", extra={"pages": len(page_ids)})
