"""What consolidation made of a space: the user profile, the facts, the tier counts. Each waits for the
writes so far to be consolidated first (`Memoryos.flush`), as the engine's methods do."""

from typing import Annotated

from fastapi import APIRouter, Query, Response

from memoryos.types import KnowledgeEntry, KnowledgeKind, MemoryStats
from services.api.deps import SpaceDep, StateDep
from services.api.models import Profile
from services.api.openapi import SPACE_READ_ERRORS
from services.api.routes import SPACE_PREFIX
from services.spaces.calls import CONSOLIDATE, LIST_FACTS, PROFILE, STATS

router = APIRouter(prefix=SPACE_PREFIX, tags=["profile"], responses=SPACE_READ_ERRORS)


@router.get("/profile", summary="The user profile")
async def profile(key: SpaceDep, state: StateDep) -> Profile:
    return Profile(profile=await state.spaces.call(key, PROFILE))


@router.get("/facts", summary="Active facts about the user or the assistant")
async def list_facts(
    key: SpaceDep, state: StateDep, kind: Annotated[KnowledgeKind, Query()] = "user"
) -> list[KnowledgeEntry]:
    """With ids, times, origin and the pages each came from."""
    return await state.spaces.call(key, LIST_FACTS, kind=kind)


@router.get("/stats", summary="Tier counts, segments with heat, LLM usage")
async def stats(key: SpaceDep, state: StateDep) -> MemoryStats:
    return await state.spaces.call(key, STATS)


@router.post("/consolidate", status_code=204, summary="Consolidate now")
async def consolidate(key: SpaceDep, state: StateDep) -> Response:
    """File short-term pages into topic segments and promote hot segments to the profile and facts now,
    instead of when short-term memory next overflows (the engine's `force_mid_term_analysis`)."""
    await state.spaces.call(key, CONSOLIDATE)
    return Response(status_code=204)
