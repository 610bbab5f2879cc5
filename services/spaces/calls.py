"""What the owner of a space can be asked to run: facade methods of `Memoryos`, named, with JSON
arguments and a typed result.

One list serves both modes of the API. Embedded, the call runs on the process's own open space; with
Redis, the API sends the method's name and arguments to the worker that owns the space
(`services/queue/owner_calls.py`), the worker runs the same method (`run_call`) and answers the result as JSON,
and the API turns it back into the same type (`OwnerCall.result`). Nothing outside this list can be run
remotely: a request naming any other method is refused.

Writes of new exchanges are not here: they travel through the write streams, durable before they are
acknowledged. These calls are reads, and edits the owner applies at once (in order after every write
accepted before them) and answers only once they are durable.
"""

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter

from memoryos import Memoryos
from memoryos.portability.bundles import ImportReport
from memoryos.types import (
    DeleteResult,
    FactHistory,
    KnowledgeEntry,
    MemoryStats,
    Page,
    PageList,
    RetrievedContext,
    WriteStatus,
)

T = TypeVar("T")


@dataclass(frozen=True)
class OwnerCall(Generic[T]):
    """One facade method the owner of a space runs on request."""

    method: str
    result: TypeAdapter[T] = field(compare=False)
    creates: bool = False
    """Whether the call may create the space (it stores an exchange); the others need an existing one."""
    facade: bool = True
    """A method of the open space's `Memoryos` (`run_call`); False: a call a worker runs on the space's
    files — a bundle call (`services/worker/bundles.py`; embedded, the API runs export and import itself)
    or a reindex (`services/worker/reindex.py`)."""


class BundleSent(BaseModel):
    """An exported bundle, waiting in Redis for the API (`services/queue/bundle_transfer.py`)."""

    transfer_id: str
    size_bytes: int


class ReindexReport(BaseModel):
    """What a reindex did: the model the space is now embedded with, and what was re-embedded."""

    model: str
    dim: int
    pages: int
    facts: int


RETRIEVE = OwnerCall("retrieve", TypeAdapter(RetrievedContext))
WRITE_STATUS: OwnerCall[WriteStatus | None] = OwnerCall("write_status", TypeAdapter(WriteStatus | None))
STATS = OwnerCall("stats", TypeAdapter(MemoryStats))
PROFILE = OwnerCall("get_user_profile_summary", TypeAdapter(str))
LIST_PAGES = OwnerCall("list_pages", TypeAdapter(PageList))
GET_PAGE = OwnerCall("get_page", TypeAdapter(Page))
LIST_FACTS = OwnerCall("list_facts", TypeAdapter(list[KnowledgeEntry]))
GET_FACT = OwnerCall("get_fact", TypeAdapter(KnowledgeEntry))
FACT_HISTORY = OwnerCall("fact_history", TypeAdapter(FactHistory))
UPDATE_PAGE = OwnerCall("update_page", TypeAdapter(Page))
DELETE_PAGE = OwnerCall("delete_page", TypeAdapter(DeleteResult))
UPDATE_FACT = OwnerCall("update_fact", TypeAdapter(KnowledgeEntry))
DELETE_FACT = OwnerCall("delete_fact", TypeAdapter(DeleteResult))
CONSOLIDATE = OwnerCall("force_mid_term_analysis", TypeAdapter(type(None)))
RESPOND = OwnerCall("get_response", TypeAdapter(str), creates=True)
EXPORT_BUNDLE = OwnerCall("export_bundle", TypeAdapter(BundleSent), facade=False)
IMPORT_BUNDLE = OwnerCall("import_bundle", TypeAdapter(ImportReport), creates=True, facade=False)
REINDEX = OwnerCall("reindex", TypeAdapter(ReindexReport), facade=False)

OWNER_CALLS: dict[str, OwnerCall[Any]] = {
    call.method: call
    for call in (
        RETRIEVE,
        WRITE_STATUS,
        STATS,
        PROFILE,
        LIST_PAGES,
        GET_PAGE,
        LIST_FACTS,
        GET_FACT,
        FACT_HISTORY,
        UPDATE_PAGE,
        DELETE_PAGE,
        UPDATE_FACT,
        DELETE_FACT,
        CONSOLIDATE,
        RESPOND,
        EXPORT_BUNDLE,
        IMPORT_BUNDLE,
        REINDEX,
    )
}


def owner_call(method: str) -> OwnerCall[Any]:
    """The call named `method`; `ValueError` for anything else (a request must not run any method)."""
    found = OWNER_CALLS.get(method)
    if found is None:
        raise ValueError(f"kind: not a call the owner answers: {method!r}")
    return found


def run_call(memory: Memoryos, call: OwnerCall[T], args: dict[str, Any]) -> T:
    """The call on an open space, in this process."""
    if not call.facade:
        raise ValueError(f"kind: {call.method} is not run on an open space")
    result: T = getattr(memory, call.method)(**args)
    return result
