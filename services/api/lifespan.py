"""Start-up and shut-down of the API: load what the first call needs, run the spaces' upkeep (the embedded
backlog sampler), close the spaces."""

import contextlib
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
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(state.spaces.maintain)
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            tasks.cancel_scope.cancel()
    await to_thread.run_sync(state.spaces.close)
