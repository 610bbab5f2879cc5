"""The lifecycle half of the `Memoryos` facade: list, read, edit and delete single items, fact history,
expiry. Every change is an op through `space.apply` (`memoryos/space/apply_lifecycle.py` says what each removes).

Item ids are the store's: `page_id` as `retrieve` returns it on every page, `entry_id` on every fact.
They are stable — an edited page keeps its id; an edited fact gets a new version whose history leads back
to the old one — so a user can act on what a result showed them, and REST and MCP expose the same ids.
"""

from collections.abc import Callable, Mapping
from typing import Any

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder
from memoryos.errors import InvalidInputError, ItemNotFoundError
from memoryos.scheduler.space_work import SpaceWork
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import DeleteFacts, DeletePages, SetSpaceTTL, UpdateFact, UpdatePage
from memoryos.types import DeleteResult, FactHistory, KnowledgeEntry, KnowledgeKind, Page, PageList
from memoryos.validation import format_unix_timestamp, validate_text

MAX_PAGE_LIST = 1000
"""The most pages one `list_pages` call returns: a bounded response whatever the space's size."""


def _item_id(field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidInputError(field, f"must be a positive integer id, got {value!r}")
    return value


def _removed(detail: Mapping[str, object], key: str) -> list[int]:
    ids = detail.get(key, [])
    return [int(i) for i in ids] if isinstance(ids, list) else []


class MemoryLifecycle:
    """Mixed into `Memoryos`, which provides these attributes."""

    config: MemoryConfig
    space: MemorySpace
    embedder: Embedder
    clock: Callable[[], float]
    _work: SpaceWork

    # --- reading items ----------------------------------------------------------------------------------
    def list_pages(self, offset: int = 0, limit: int = 50) -> PageList:
        """The space's pages in id order (every tier), `limit` from `offset`, with the total: a user's
        memories, paged. Expired pages not yet swept are left out."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidInputError("offset", f"must be a non-negative integer, got {offset!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_LIST:
            raise InvalidInputError("limit", f"must be an integer from 1 to {MAX_PAGE_LIST}, got {limit!r}")
        now = self.clock()
        with self.space.lock:
            pages, total = self.space.store.page_list(offset, limit)
        live = [p for p in pages if p.expires_at is None or p.expires_at > now]
        return PageList(pages=live, total=total, offset=offset, limit=limit)

    def get_page(self, page_id: int) -> Page:
        """One page with its times and provenance; `ItemNotFoundError` if the space holds none by that id."""
        found = self.space.pages([_item_id("page_id", page_id)])
        if not found or (found[0].expires_at is not None and found[0].expires_at <= self.clock()):
            raise ItemNotFoundError("page", page_id)
        return found[0]

    def list_facts(self, kind: KnowledgeKind = "user") -> list[KnowledgeEntry]:
        """The active facts of one kind ("user" or "assistant") with ids, times, origin and sources."""
        if kind not in ("user", "assistant"):
            raise InvalidInputError("kind", f"must be 'user' or 'assistant', got {kind!r}")
        self._work.flush()  # facts of the writes so far
        now = self.clock()
        with self.space.lock:
            entries = self.space.store.active_entries(kind)
        return [e for e in entries if e.expires_at is None or e.expires_at > now]

    def get_fact(self, entry_id: int) -> KnowledgeEntry:
        """One fact (any version) by id; `ItemNotFoundError` if there is none."""
        with self.space.lock:
            found = self.space.store.knowledge_entries([_item_id("entry_id", entry_id)])
        if not found:
            raise ItemNotFoundError("fact", entry_id)
        return found[0]

    def fact_history(self, entry_id: int) -> FactHistory:
        """Every version of the fact `entry_id` belongs to, oldest first: what it said, when, whether a
        user edit or a newer extraction replaced it, and the pages (turns) each version came from."""
        self.get_fact(entry_id)
        with self.space.lock:
            versions = self.space.store.knowledge_entries(self.space.store.fact_version_ids(entry_id))
        return FactHistory(entry_id=entry_id, versions=versions)

    # --- changing items ---------------------------------------------------------------------------------
    def update_page(
        self,
        page_id: int,
        user_input: str | None = None,
        agent_response: str | None = None,
        meta_data: Mapping[str, Any] | None = None,
    ) -> Page:
        """Correct a stored exchange; fields left None keep their value. The page keeps its id, is
        embedded again (a read waits for it, as for a new write) and analyzed again; facts drawn only
        from its old text are removed, and summaries and the profile drawn from it are rewritten by the
        next consolidation."""
        page = self.get_page(page_id)
        limit = self.config.max_text_chars
        new_input = page.user_input if user_input is None else validate_text("user_input", user_input, limit)
        new_response = (
            page.agent_response
            if agent_response is None
            else validate_text("agent_response", agent_response, limit)
        )
        if meta_data is not None and not isinstance(meta_data, Mapping):
            raise InvalidInputError("meta_data", f"must be an object, got {type(meta_data).__name__}")
        new_meta = page.meta_data if meta_data is None else dict(meta_data)
        op = UpdatePage(
            page_id=page_id,
            user_input=new_input,
            agent_response=new_response,
            meta_data=new_meta,
            at=self.clock(),
        )
        if "missing" in self.space.apply_for_detail(op):
            raise ItemNotFoundError("page", page_id)
        self.embedder.forget_texts([page.text()])
        self._work.pages_written()
        return self.get_page(page_id)

    def delete_page(self, page_id: int) -> DeleteResult:
        """Remove one page: its text, vector and index entries, and the facts that came only from it.
        Summaries and the profile that drew on it are rewritten by the next consolidation (`flush`)."""
        page = self.get_page(page_id)
        detail = self.space.apply_for_detail(DeletePages(page_ids=[page_id], at=self.clock()))
        if "missing" in detail:
            raise ItemNotFoundError("page", page_id)
        self.embedder.forget_texts([page.text()])
        self._work.request_consolidation()
        return DeleteResult(
            page_ids=_removed(detail, "page_ids"),
            fact_ids=_removed(detail, "fact_ids"),
            profile_rebuild=bool(detail.get("profile_rebuild")),
        )

    def update_fact(self, entry_id: int, text: str) -> KnowledgeEntry:
        """Correct an active fact: a new version with origin "user" replaces it (the old one is history,
        `fact_history`). Returns the new version."""
        old = self.get_fact(entry_id)
        if not old.active:
            raise InvalidInputError(
                "entry_id", f"fact {entry_id} was replaced by {old.replaced_by}: edit that"
            )
        new_text = validate_text("text", text, self.config.max_text_chars)
        vector = self._work.encode_texts([new_text])[0]
        op = UpdateFact(
            entry_id=entry_id,
            text=new_text,
            vector=vector,
            timestamp=format_unix_timestamp(self.clock()),
            at=self.clock(),
        )
        detail = self.space.apply_for_detail(op)
        created = _removed(detail, "created")
        if not created:
            raise ItemNotFoundError("fact", entry_id)
        return self.get_fact(created[0])

    def delete_fact(self, entry_id: int) -> DeleteResult:
        """Remove a fact with every version of its history."""
        self.get_fact(entry_id)
        detail = self.space.apply_for_detail(DeleteFacts(entry_ids=[entry_id], at=self.clock()))
        return DeleteResult(fact_ids=_removed(detail, "fact_ids"))

    def set_ttl(self, ttl_s: float | None) -> None:
        """Keep pages written from now on for `ttl_s` seconds (None: forever). Expired pages are never
        returned, and the scheduler's timer erases them (with the facts drawn only from them)."""
        if ttl_s is not None and (
            not isinstance(ttl_s, int | float) or isinstance(ttl_s, bool) or not 0 < ttl_s < float("inf")
        ):
            raise InvalidInputError("ttl_s", f"must be a positive number of seconds or None, got {ttl_s!r}")
        self.space.apply(SetSpaceTTL(ttl_s=ttl_s, at=self.clock()))
