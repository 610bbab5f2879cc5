"""How the lifecycle ops change a memory space: edits, deletes, expiry, and rewrites of derived texts.

Kept apart from `memoryos/space/apply.py` (the ops of the memory hierarchy itself) because these rules answer a
different question: when a user removes or corrects something, what else must go with it. The answer
here:
- a deleted page takes its text, vector and full-text entries, and every fact whose only recorded sources
  were deleted pages (all versions of such a fact: each came from the removed text);
- chain and segment summaries that may quote it are marked stale and rewritten by the next consolidation
  (removed at once when no page is left under them);
- if the page had been analyzed into the profile, every profile version may carry its text: the profile
  is rebuilt from the remaining pages by the next consolidation, and the rebuild replaces all versions;
- an edited page is handled like a delete for what was derived from it, then waits for a new vector and
  a new analysis under its old id.

Every function works inside the caller's transaction on the store alone (no clock, no model) and returns
the op log detail: ids and flags, never text. Ops naming items that no longer exist are logged no-ops
(`missing`), so applying one is deterministic and idempotent; the facade turns `missing` into an error.
"""

import numpy as np

from memoryos.space.ops import DeleteFacts, DeletePages, RewriteChain, RewriteSegment, UpdateFact, UpdatePage
from memoryos.storage.records.base import RecordStore
from memoryos.types import Page

PROFILE_STALE_META = "profile_stale"
"""Meta key set while the profile must be rebuilt because a page under it was deleted or edited."""
SPACE_TTL_META = "ttl_s"
"""Meta key of the space's TTL in seconds, for pages written from then on."""


def _forget_derived(store: RecordStore, pages: list[Page]) -> dict[str, object]:
    """What removing (or rewriting) `pages` takes with it: facts sourced only by them, stale summaries,
    a profile rebuild. Call after the pages are deleted or rewritten."""
    page_ids = [p.page_id for p in pages]
    fact_ids = store.facts_only_from(page_ids)
    store.delete_knowledge(fact_ids)
    store.remove_knowledge_sources(page_ids)
    store.mark_stale(
        sorted({p.chain_id for p in pages if p.chain_id is not None}),
        sorted({p.segment_id for p in pages if p.segment_id is not None}),
    )
    profile_rebuild = any(p.analyzed for p in pages) and store.latest_profile_version() is not None
    if profile_rebuild:
        store.set_meta(PROFILE_STALE_META, "1")
    store.compact_text_index()
    return {"fact_ids": fact_ids, "profile_rebuild": profile_rebuild}


def delete_pages(store: RecordStore, op: DeletePages) -> dict[str, object]:
    pages = store.pages(op.page_ids)
    found = {p.page_id for p in pages}
    store.delete_pages(pages)
    detail: dict[str, object] = {"page_ids": sorted(found), "reason": op.reason}
    detail.update(_forget_derived(store, pages))
    missing = [pid for pid in op.page_ids if pid not in found]
    if missing:
        detail["missing"] = missing
    return detail


def expire_due(store: RecordStore, at: float) -> dict[str, object]:
    """Pages and facts expired at `at`, deleted as a user's delete would (what depended on them alone too)."""
    detail: dict[str, object] = {"reason": "expired", "page_ids": [], "fact_ids": []}
    pages = store.expired_page_ids(at)
    if pages:
        detail.update(delete_pages(store, DeletePages(page_ids=pages, reason="expired", at=at)))
    facts = [f for f in store.expired_knowledge_ids(at) if store.knowledge_entries([f])]
    if facts:
        removed = delete_facts(store, DeleteFacts(entry_ids=facts, reason="expired", at=at))
        detail["fact_ids"] = sorted({*_ids(detail["fact_ids"]), *_ids(removed["fact_ids"])})
    return detail


def _ids(value: object) -> list[int]:
    return [int(i) for i in value] if isinstance(value, list) else []


def update_page(store: RecordStore, op: UpdatePage) -> dict[str, object]:
    found = store.pages([op.page_id])
    if not found:
        return {"page_ids": [], "missing": [op.page_id]}
    page = found[0]
    store.replace_page_text(page, op.user_input, op.agent_response, op.meta_data, op.at)
    return {"page_ids": [op.page_id], **_forget_derived(store, [page])}


def delete_facts(store: RecordStore, op: DeleteFacts) -> dict[str, object]:
    versions: set[int] = set()
    missing: list[int] = []
    for entry_id in op.entry_ids:
        if store.knowledge_entries([entry_id]):
            versions.update(store.fact_version_ids(entry_id))
        else:
            missing.append(entry_id)
    store.delete_knowledge(sorted(versions))
    detail: dict[str, object] = {"fact_ids": sorted(versions), "reason": op.reason}
    if missing:
        detail["missing"] = missing
    return detail


def update_fact(
    store: RecordStore, op: UpdateFact, vector: np.ndarray
) -> tuple[list[int], dict[str, object]]:
    """A new version replacing an active fact; an inactive or missing one is a no-op (`missing`)."""
    found = store.knowledge_entries([op.entry_id])
    if not found or not found[0].active:
        return [], {"missing": [op.entry_id]}
    old = found[0]
    entry_id = store.insert_knowledge(
        old.kind, op.text, op.timestamp, vector, op.at, old.source_page_ids, "user", old.expires_at
    )
    store.retire_knowledge(old.entry_id, replaced_by=entry_id)
    return [entry_id], {"entry_id": op.entry_id, "replaced_by": entry_id}


_FORGOTTEN_TABLES = (
    "knowledge_sources",
    "knowledge",
    "profile_versions",
    "pages",
    "segments",
    "chains",
    "withdrawn_vectors",
)
"""Every table that holds an item or an id of one, children before parents (foreign keys)."""
_KEPT_META = ("schema_version", "embedding_model", "embedding_dim")


def forget_space(store: RecordStore) -> dict[str, object]:
    """Empty the store: every item goes; the vector generation moves on, so no index snapshot of the
    forgotten vectors is trusted again (an open process's index is rebuilt empty)."""
    counts = store.count_pages()
    store.clear_full_text_index()
    generation = int(store.get_meta("vector_generation") or 0) + 1
    store.delete_all(_FORGOTTEN_TABLES, keep_meta=_KEPT_META)
    store.set_meta("vector_generation", str(generation))
    return {"pages": sum(counts.values())}


def rewrite_chain(store: RecordStore, op: RewriteChain) -> dict[str, object]:
    store.upsert_chain(op.chain_id, op.summary)
    return {"chain_id": op.chain_id}


def rewrite_segment(store: RecordStore, op: RewriteSegment) -> dict[str, object]:
    store.update_segment(
        op.segment_id,
        summary=op.summary,
        keywords=op.keywords,
        vector=op.vector,
        topic_count=1,
        stale=0,
        updated_at=op.at,
    )
    return {"segment_id": op.segment_id}


def stale_rewrite_because(store: RecordStore, op: RewriteChain | RewriteSegment) -> str | None:
    """A rewrite planned from pages that changed since (another delete, a page filed) no longer fits."""
    if isinstance(op, RewriteChain):
        if op.chain_id not in store.stale_chain_ids() or store.chain_page_ids(op.chain_id) != op.page_ids:
            return "chain changed since the rewrite was planned"
    elif (
        op.segment_id not in store.stale_segment_ids() or store.segment_page_ids(op.segment_id) != op.page_ids
    ):
        return "segment changed since the rewrite was planned"
    return None
