"""What consolidation's checks read of a page — its tier, chain, segment and whether it was analyzed —
kept through one write transaction, so each op's check need not ask the store again.

Why this is safe: no other writer can change a space while a transaction holds it (the space's row lock
on PostgreSQL, `BEGIN IMMEDIATE` on SQLite), so within it the pages change only by the transaction's own
writes, and the applier notes each one it makes (`note`). Why it is worth it: consolidation links and
files every page it moves with two checks, each a statement and, on a database, a round trip that also
carries the writes waiting before it; a run's pages are read once instead.
"""

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from memoryos.storage.records.base import RecordStore


class PageState(NamedTuple):
    """The fields of a page that consolidation's checks read."""

    tier: str
    chain_id: int | None
    segment_id: int | None
    analyzed: bool


class PageStates:
    """The states of the pages a transaction's ops name, read together on first need and then kept as the
    transaction's own writes change them. `forget` drops them all: an op whose effect on pages is not
    noted (a delete, an edit, an expiry) must not leave a state that is no longer true."""

    def __init__(self, store: RecordStore) -> None:
        self._store = store
        self._states: dict[int, PageState] = {}
        self._asked: set[int] = set()

    def read(self, page_ids: Iterable[int]) -> None:
        """Read the states of the pages not yet known, in one call to the store."""
        missing = list(dict.fromkeys(pid for pid in page_ids if pid not in self._asked))
        if not missing:
            return
        for page in self._store.pages(missing):
            self._states[page.page_id] = PageState(page.tier, page.chain_id, page.segment_id, page.analyzed)
        self._asked.update(missing)

    def of(self, page_ids: Sequence[int]) -> list[PageState]:
        """The states of those of `page_ids` that exist, in order (read if not known)."""
        self.read(page_ids)
        return [self._states[pid] for pid in page_ids if pid in self._states]

    def get(self, page_id: int) -> PageState | None:
        """The page's state, or None when there is no such page (read if not known)."""
        self.read([page_id])
        return self._states.get(page_id)

    def note(self, page_ids: Iterable[int], **fields: Any) -> None:
        """What this transaction just wrote to these pages' fields (pages not known are left unknown)."""
        for pid in page_ids:
            state = self._states.get(pid)
            if state is not None:
                self._states[pid] = state._replace(**fields)

    def forget(self) -> None:
        self._states.clear()
        self._asked.clear()
