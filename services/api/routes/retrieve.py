"""Reads: retrieval over every tier, and an answer generated from memory.

The read contract is the engine's: a read sees every write acknowledged to the space before it arrived,
once searchable — the engine waits for those pages' vectors. `wait_for_write_ids` extends it to writes
this read did not see acknowledged (another client's, or, in service mode, a queued one): the read first
waits until each named write is stored, and answers 504 if that takes over `wait_timeout_s`; the read
itself then waits for the vectors of every page stored before it, those writes' included, as the engine
does for any read, for what is left of its vector bound (`max_vector_wait_s`): the wait for the writes
spends it. One bound for both waits keeps a read's latency under a backlog (docs/reliability.md, Reads
under load). The vectors are left to the engine's wait, not polled here: it moves the pages ahead of other
spaces' in the embedding queue (`EmbeddingBatcher.notify`) and costs no poll interval.
"""

import time

import anyio
from fastapi import APIRouter, HTTPException

from memoryos.errors import InvalidInputError
from memoryos.space.pool import SpaceKey
from memoryos.types import RetrievedContext
from services.api.deps import ApiState, SpaceDep, StateDep
from services.api.models import GeneratedResponse, ResponseRequest, RetrieveRequest
from services.api.openapi import SPACE_ERRORS, error_responses
from services.api.routes import SPACE_PREFIX
from services.spaces.calls import RESPOND, RETRIEVE, WRITE_STATUS

router = APIRouter(prefix=SPACE_PREFIX, tags=["reads"], responses=SPACE_ERRORS)

POLL_FIRST_S = 0.002
POLL_MAX_S = 0.05
"""A write wait polls the write's status from 2 ms, doubling up to 50 ms: embedding a batch takes tens of
milliseconds on CPU, so a waiting read answers within one poll of its write becoming searchable."""


async def wait_for_writes(state: ApiState, key: SpaceKey, write_ids: list[str], timeout_s: float) -> None:
    """Return once every write in `write_ids` is stored in the space (the read that follows waits for
    their vectors); 504 after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    waiting = list(dict.fromkeys(write_ids))
    pause = POLL_FIRST_S
    while waiting:
        statuses = [await state.spaces.call(key, WRITE_STATUS, write_id=w) for w in waiting]
        waiting = [w for w, status in zip(waiting, statuses, strict=True) if status is None]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise HTTPException(
                504, f"writes {waiting} not stored within {timeout_s} s (not acknowledged in this space?)"
            )
        await anyio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, POLL_MAX_S)


@router.post("/retrieve", summary="Retrieve context for a query", responses=error_responses(404, 413, 504))
async def retrieve(body: RetrieveRequest, key: SpaceDep, state: StateDep) -> RetrievedContext:
    """Short-term pages, the best mid-term pages, facts and the profile, each item with its id."""
    limit = state.settings.max_wait_for_writes_s
    if body.wait_for_write_ids and body.wait_timeout_s > limit:
        raise InvalidInputError("wait_timeout_s", f"must be at most {limit} s, got {body.wait_timeout_s}")
    vector_wait = body.max_vector_wait_s
    if vector_wait is None:
        vector_wait = state.settings.read_vector_wait_s
    elif vector_wait > limit:
        raise InvalidInputError("max_vector_wait_s", f"must be at most {limit} s, got {vector_wait}")
    if body.wait_for_write_ids:
        began = time.monotonic()
        await wait_for_writes(state, key, body.wait_for_write_ids, body.wait_timeout_s)
        vector_wait = max(0.0, vector_wait - (time.monotonic() - began))
    context = await state.spaces.call(
        key,
        RETRIEVE,
        query=body.query,
        top_k=body.top_k,
        knowledge_top_k=body.knowledge_top_k,
        max_vector_wait_s=vector_wait,
    )
    state.metrics.read_answered(context)
    return context


@router.post(
    "/response",
    summary="Answer a query from memory (then remember the exchange)",
    responses=error_responses(413, 502),
)
async def generate_response(body: ResponseRequest, key: SpaceDep, state: StateDep) -> GeneratedResponse:
    """The LLM's answer from the retrieved context; the exchange is stored as a new memory."""
    answer = await state.spaces.call(
        key,
        RESPOND,
        query=body.query,
        relationship_with_user=body.relationship_with_user,
        style_hint=body.style_hint,
        user_conversation_meta_data=body.user_conversation_meta_data,
    )
    return GeneratedResponse(response=answer)
