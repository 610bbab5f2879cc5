"""Start-up and shut-down of the API: load what the first call needs, run the spaces' upkeep (the embedded
backlog sampler), close the spaces."""

import contextlib
import gc
import logging
from collections.abc import AsyncIterator

import anyio
from anyio import to_thread
from fastapi import FastAPI

from services.api.deps import ApiState

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: ApiState = app.state.api
    if state.settings.preload_model:
        await to_thread.run_sync(state.spaces.preload)
    # What start-up loaded (the model, torch, FastAPI) lives as long as the server: in the permanent
    # generation, full collections stop walking it. Each walked it for 110-120 ms with every thread
    # paused, a write p99 over 100 ms in its window (docs/reliability.md, Load).
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
