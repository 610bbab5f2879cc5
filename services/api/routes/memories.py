"""Writes and their status, and the paged list of a space's memories.

A write is acknowledged once it is durable: stored by the engine (embedded: SQLite), or held by Redis
(`--redis-url`: its owner applies it next, and the answer has no page ids yet). Its pages are embedded
after, and a read issued after the acknowledgement waits for them. Every write gets a write id — the
caller's, which makes a retry idempotent, or one chosen here — to ask for its status or to name in a
read. Over the backlog bound, writes are refused with 503 and `Retry-After`.
"""

import time
from contextlib import AbstractContextManager
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from opentelemetry.trace import Span

from memoryos.errors import InvalidInputError
from memoryos.facade.lifecycle import MAX_PAGE_LIST
from memoryos.space.ops import AddTurns
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from memoryos.tracing.attributes import CREATE_MEMORY, MEMORY_RECORD_COUNT
from memoryos.tracing.spans import operation_span
from memoryos.types import PageList, WriteStatus
from memoryos.validation import validate_key
from services.api.deps import ApiState, SpaceDep, StateDep
from services.api.models import (
    WRITE_ID_SCHEMA,
    AddBatchRequest,
    AddMemoryRequest,
    MemoryAdded,
    WriteAccepted,
)
from services.api.openapi import SPACE_ERRORS, error_responses
from services.api.routes import SPACE_PREFIX
from services.spaces.calls import LIST_PAGES, WRITE_STATUS

router = APIRouter(prefix=SPACE_PREFIX, tags=["memories"], responses=SPACE_ERRORS)


def plan(
    state: ApiState, turns: list[dict[str, Any]], write_id: str | None, ttl_s: float | None, field_prefix: str
) -> AddTurns:
    """The engine's check of a write (`plan_write`), before the space is opened: a refused write creates
    no space. Every write gets a write id, so its status can be asked for and a read can wait on it: the
    caller's, whose reuse for other content is refused (409), or a fresh one the engine draws (unique: not
    remembered for that check, nor kept in Redis)."""
    return plan_write(
        turns,
        max_text_chars=state.spaces.config.max_text_chars,
        at=time.time(),
        write_id=write_id,
        ttl_s=ttl_s,
        field_prefix=field_prefix,
    )


def create_memory_span(key: SpaceKey, turns: int) -> AbstractContextManager[Span | None]:
    """The write's `create_memory` span (GenAI memory conventions), the parent of its enqueue (Redis) or
    its commit (embedded): the space's ids pseudonymised, the number of turns, no text; nothing with
    tracing off (`operation_span`)."""
    return operation_span(
        CREATE_MEMORY,
        CREATE_MEMORY,
        (key.tenant, key.user_id, key.assistant_id),
        {MEMORY_RECORD_COUNT: turns},
    )


@router.post("/memories", status_code=201, summary="Remember one exchange", responses=error_responses(413))
async def add_memory(body: AddMemoryRequest, key: SpaceDep, state: StateDep) -> MemoryAdded:
    """Stores one exchange (creating the space on first write); returns its write id, and its page id
    once known (embedded mode: at once; with Redis, `GET .../writes/{write_id}` after it is applied)."""
    turn = body.model_dump(include={"user_input", "agent_response", "timestamp", "meta_data"})
    with create_memory_span(key, 1):
        op, page_ids = await state.spaces.write(
            key, lambda: plan(state, [turn], body.write_id, body.ttl_s, field_prefix="")
        )
    return MemoryAdded(
        write_id=op.write_id or "", page_ids=page_ids, page_id=page_ids[0] if page_ids else None
    )


@router.post(
    "/memories/batch",
    status_code=202,
    summary="Remember many exchanges as one write",
    responses=error_responses(413),
)
async def add_memories(body: AddBatchRequest, key: SpaceDep, state: StateDep) -> WriteAccepted:
    """All turns are checked before any is stored. 202: durable now, searchable once embedded — poll
    `GET .../writes/{write_id}` or name the write id in a read."""
    limit = state.settings.max_turns_per_batch
    if len(body.turns) > limit:
        raise InvalidInputError("turns", f"at most {limit} turns per batch, got {len(body.turns)}")
    turns = [turn.model_dump() for turn in body.turns]
    with create_memory_span(key, len(turns)):
        op, page_ids = await state.spaces.write(
            key, lambda: plan(state, turns, body.write_id, body.ttl_s, field_prefix="turns")
        )
    return WriteAccepted(write_id=op.write_id or "", page_ids=page_ids)


WriteIdPath = Annotated[
    str, Path(description="The write's id, as its answer gave it.", json_schema_extra=WRITE_ID_SCHEMA)
]


@router.get(
    "/writes/{write_id}", summary="Where an acknowledged write stands", responses=error_responses(404)
)
async def write_status(write_id: WriteIdPath, key: SpaceDep, state: StateDep) -> WriteStatus:
    """Its page ids and whether all are searchable; 404 if this space has no write with that id."""
    checked = validate_key("write_id", write_id)
    found = await state.spaces.call(key, WRITE_STATUS, write_id=checked)
    if found is None:
        raise HTTPException(404, f"no write {checked!r} in this memory space")
    return found


@router.get("/memories", summary="List the space's memories, paged", responses=error_responses(404))
async def list_memories(
    key: SpaceDep,
    state: StateDep,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_LIST)] = 50,
) -> PageList:
    """Pages in id order (every tier), with times and provenance, and the total count."""
    return await state.spaces.call(key, LIST_PAGES, offset=offset, limit=limit)
