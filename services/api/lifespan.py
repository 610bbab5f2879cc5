"""Start-up and shut-down of the API: erase what a restore brought back of forgotten users (embedded), load
what the first call needs, run the spaces' upkeep (the embedded backlog sampler), close the spaces."""

import contextlib
import gc
import logging
from collections.abc import AsyncIterator

import anyio
from anyio import to_thread
from fastapi import FastAPI

from memoryos.facade.memoryos import forget_space
from memoryos.space import tombstones
from services.api.deps import ApiState
from services.spaces.embedded import EmbeddedSpaces

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: ApiState = app.state.api
    # Embedded only: in Redis mode the workers check, before taking shards (services/worker/tombstones.py).
    if isinstance(state.spaces, EmbeddedSpaces):
        await to_thread.run_sync(_erase_restored, state.spaces)
    if state.settings.preload_model:
        await to_thread.run_sync(state.spaces.preload)
    # What start-up loaded (the model, torch, FastAPI) lives as long as the server: in the permanent
    # generation, full collections stop walking it with every thread paused (docs/reliability.md, Load).
    gc.freeze()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(state.spaces.maintain)
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            tasks.cancel_scope.cancel()
    await to_thread.run_sync(state.spaces.close)
    gc.unfreeze()  # collectable again where the process goes on (tests start many apps)


def _erase_restored(spaces: EmbeddedSpaces) -> None:
    """Before any request: erase every space directory that a restore of the data directory brought back
    from before its user's forget (`memoryos/space/tombstones.py`); nothing is open yet."""
    tombstones.erase_restored(
        spaces.config,
        tombstones.read_all(spaces.config),
        lambda key, _: forget_space(key.user_id, spaces.tenant_config(key.tenant), key.assistant_id),
    )
