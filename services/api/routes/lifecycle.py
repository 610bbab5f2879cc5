"""Acting on single items a result showed — read, correct, delete a page or a fact, a fact's history —
and forgetting a whole space. Ids are the engine's (`page_id`, `entry_id`), stable across edits."""

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from memoryos.types import DeleteResult, FactHistory, KnowledgeEntry, Page
from services.api.deps import SpaceDep, StateDep
from services.api.models import FactUpdate, PageUpdate
from services.api.openapi import SPACE_READ_ERRORS, error_responses
from services.api.routes import SPACE_PREFIX
from services.spaces.calls import (
    DELETE_FACT,
    DELETE_PAGE,
    FACT_HISTORY,
    GET_FACT,
    GET_PAGE,
    UPDATE_FACT,
    UPDATE_PAGE,
)

router = APIRouter(prefix=SPACE_PREFIX, tags=["lifecycle"], responses=SPACE_READ_ERRORS)

ItemId = Annotated[int, Path(ge=1, le=2**63 - 1, description="An id as results show it.")]


@router.get("/memories/{page_id}", summary="One stored exchange")
async def get_page(page_id: ItemId, key: SpaceDep, state: StateDep) -> Page:
    return await state.spaces.call(key, GET_PAGE, page_id=page_id)


@router.patch("/memories/{page_id}", summary="Correct a stored exchange", responses=error_responses(413))
async def update_page(page_id: ItemId, body: PageUpdate, key: SpaceDep, state: StateDep) -> Page:
    """Same id; embedded and analyzed again, facts drawn only from the old text removed."""
    return await state.spaces.call(
        key,
        UPDATE_PAGE,
        page_id=page_id,
        user_input=body.user_input,
        agent_response=body.agent_response,
        meta_data=body.meta_data,
    )


@router.delete("/memories/{page_id}", summary="Delete a stored exchange")
async def delete_page(page_id: ItemId, key: SpaceDep, state: StateDep) -> DeleteResult:
    """Its text, vector and index entries, and the facts that came only from it."""
    return await state.spaces.call(key, DELETE_PAGE, page_id=page_id)


@router.get("/facts/{entry_id}", summary="One fact, any version")
async def get_fact(entry_id: ItemId, key: SpaceDep, state: StateDep) -> KnowledgeEntry:
    return await state.spaces.call(key, GET_FACT, entry_id=entry_id)


@router.patch("/facts/{entry_id}", summary="Correct a fact (a new version)", responses=error_responses(413))
async def update_fact(entry_id: ItemId, body: FactUpdate, key: SpaceDep, state: StateDep) -> KnowledgeEntry:
    return await state.spaces.call(key, UPDATE_FACT, entry_id=entry_id, text=body.text)


@router.delete("/facts/{entry_id}", summary="Delete a fact with its history")
async def delete_fact(entry_id: ItemId, key: SpaceDep, state: StateDep) -> DeleteResult:
    return await state.spaces.call(key, DELETE_FACT, entry_id=entry_id)


@router.get("/facts/{entry_id}/history", summary="Every version of a fact")
async def fact_history(entry_id: ItemId, key: SpaceDep, state: StateDep) -> FactHistory:
    return await state.spaces.call(key, FACT_HISTORY, entry_id=entry_id)


@router.delete(
    "",
    status_code=204,
    summary="Forget the user: erase the whole space",
    responses={
        202: {"description": "Queued, not erased yet: `Location` (the space's stats) answers 404 once it is"}
    },
)
async def forget(key: SpaceDep, state: StateDep, request: Request) -> Response:
    """Every page, fact, profile version and file of the space; 404 if there is none (embedded mode).
    With Redis the forget is queued behind the space's accepted writes, which are purged from Redis, and
    answered 204 once its owner erased it; 202 when that was not seen within the read timeout (the owner
    busy or away): the forget stays queued and is retried until it applies, and `Location` names the
    space's stats, which answer 404 once it is done."""
    if await state.spaces.forget(key):
        return Response(status_code=204)
    return Response(status_code=202, headers={"Location": f"{request.url.path}/stats"})
