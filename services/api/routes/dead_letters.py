"""What the write queue could not do: the caller's dead letters (with `--redis-url`; embedded, a write the
engine refuses is refused before it is acknowledged, so there are none)."""

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.deps import CallerDep, StateDep
from services.api.openapi import KEYED_ERRORS
from services.api.routes import API_PREFIX
from services.spaces.protocol import DeadLetter

router = APIRouter(prefix=API_PREFIX, tags=["queue"], responses=KEYED_ERRORS)


@router.get("/dead-letters", summary="Acknowledged writes that could never be applied")
async def dead_letters(
    caller: CallerDep, state: StateDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[DeadLetter]:
    """The caller's tenant's (a key bound to one user: that user's), oldest first, without their text.
    A forget of the user removes theirs."""
    return await state.spaces.dead_letters(caller.tenant, caller.user_id, limit)
