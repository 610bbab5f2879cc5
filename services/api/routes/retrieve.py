"""Reads: retrieval over every tier, and an answer generated from memory.

The read contract is the engine's: a read sees every write acknowledged to the space before it arrived,
once searchable — the engine waits for those pages' vectors. `wait_for_write_ids` names writes the read
must see stored first (another client's, or, in service mode, a queued one not yet applied). A named id
the space never acknowledged is refused at once (422 naming `wait_for_write_ids`): it is not stored, and
it is not an id the API acknowledged and could still store (`Spaces.acknowledged_unstored`: with Redis,
the caller-chosen ids the queue recorded for the space in the last `write_digest_ttl_s`; embedded, none, as
a write is stored before it is acknowledged). Waiting for it would only end in a timeout, which an API
fuzzer — and any client — reads as a server failure. The writes that may still arrive are waited for up
to `wait_timeout_s`; a wait that runs out is 503 with `Retry-After` (they are acknowledged: asking again
later finds them), as is the owner not answering in time.

The read itself then waits for the vectors of every page stored before it, those writes' included, as
the engine does for any read, for what is left of its vector bound (`max_vector_wait_s`): the wait for the
writes spends it. One bound for both waits keeps a read's latency under a backlog (docs/reliability.md,
Reads under load). The vectors are left to the engine's wait, not polled here: it moves the pages ahead of
other spaces' in the embedding queue (`EmbeddingBatcher.notify`) and costs no poll interval.
"""

import time
from contextlib import AbstractContextManager
from typing import cast

import anyio
from fastapi import APIRouter
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from memoryos.errors import InvalidInputError
from memoryos.space.pool import SpaceKey
from memoryos.tracing import tracing_enabled, with_memory_text
from memoryos.tracing.attributes import MEMORY_QUERY_TEXT, SEARCH_MEMORY
from memoryos.tracing.spans import NO_SPAN, operation_span
from memoryos.types import RetrievedContext
from services.api.deps import ApiState, SpaceDep, StateDep
from services.api.models import GeneratedResponse, ResponseRequest, RetrieveRequest
from services.api.openapi import SPACE_ERRORS, WRITE_WAIT_ERRORS, error_responses
from services.api.routes import SPACE_PREFIX
from services.spaces.calls import RESPOND, RETRIEVE, WRITE_STATUS

router = APIRouter(prefix=SPACE_PREFIX, tags=["reads"], responses=SPACE_ERRORS)

POLL_FIRST_S = 0.002
POLL_MAX_S = 0.05
"""A write wait polls the write's status from 2 ms, doubling up to 50 ms: embedding a batch takes tens of
milliseconds on CPU, so a waiting read answers within one poll of its write becoming searchable."""


class WriteWaitTimeoutError(TimeoutError):
    """Writes a read waits for, acknowledged to the space, were not stored within its `wait_timeout_s`:
    503 with `Retry-After` (`services/spaces/errors.py` answers every `TimeoutError` so)."""


async def wait_for_writes(state: ApiState, key: SpaceKey, write_ids: list[str], timeout_s: float) -> None:
    """Return once every write in `write_ids` is stored in the space (the read that follows waits for
    their vectors). `InvalidInputError` on `wait_for_write_ids` at once for any the space never
    acknowledged; `WriteWaitTimeoutError` once `timeout_s` passed with some still missing."""
    deadline = time.monotonic() + timeout_s
    waiting = await _not_stored(state, key, list(dict.fromkeys(write_ids)))
    if not waiting:
        return
    acknowledged = await state.spaces.acknowledged_unstored(key, waiting)
    if never := [w for w in waiting if w not in acknowledged]:
        raise InvalidInputError(
            "wait_for_write_ids",
            f"write ids {never} were never acknowledged in this space: none is stored in it, and none is "
            "a write it acknowledged that is still to be stored; there is nothing to wait for",
        )
    pause = POLL_FIRST_S
    while waiting:
        if time.monotonic() >= deadline:
            raise WriteWaitTimeoutError(
                f"writes {waiting} were acknowledged but not stored within {timeout_s} s; retry later (one "
                "that can never be applied is listed by GET /v1/dead-letters)"
            )
        await anyio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, POLL_MAX_S)
        waiting = await _not_stored(state, key, waiting)


async def _not_stored(state: ApiState, key: SpaceKey, write_ids: list[str]) -> list[str]:
    """The ids among `write_ids` with no write stored in the space (the owner answers after every write
    acknowledged before the question)."""
    statuses = [await state.spaces.call(key, WRITE_STATUS, write_id=w) for w in write_ids]
    return [w for w, status in zip(write_ids, statuses, strict=True) if status is None]


def search_memory_span(key: SpaceKey, query: str) -> AbstractContextManager[Span | None]:
    """The read's `search_memory` span (GenAI memory conventions), the parent of its waits and its owner
    call (Redis) or its retrieval (embedded): the space's ids pseudonymised, the query only when memory
    text is allowed (`with_memory_text`); nothing with tracing off (`operation_span`)."""
    if not tracing_enabled():
        return NO_SPAN
    attributes = cast(dict[str, AttributeValue], with_memory_text({}, {MEMORY_QUERY_TEXT: query}))
    return operation_span(
        SEARCH_MEMORY, SEARCH_MEMORY, (key.tenant, key.user_id, key.assistant_id), attributes
    )


@router.post(
    "/retrieve",
    summary="Retrieve context for a query",
    responses={**error_responses(404, 413), **WRITE_WAIT_ERRORS},
)
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
    with search_memory_span(key, body.query):
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
