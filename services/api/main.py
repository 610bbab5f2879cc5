"""The app factory: settings in, a FastAPI app out. Everything else lives in its own module."""

from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

import memoryos
from memoryos import MemoryConfig
from memoryos.tracing import tracing_enabled
from services.api.auth import KeyStore
from services.api.body_limit import BodyLimitMiddleware
from services.api.deps import ApiState
from services.api.errors import CatchAllMiddleware, install_error_handlers
from services.api.lifespan import lifespan
from services.api.metrics import ApiMetrics, LatencyMiddleware
from services.api.openapi import declare_bearer_auth
from services.api.rate_limit import RateLimiter
from services.api.routes import (
    bundles,
    dead_letters,
    health,
    jobs,
    lifecycle,
    memories,
    playground,
    profile,
    retrieve,
)
from services.api.settings import ApiSettings
from services.api.tracing import instrument_api
from services.queue.settings import QueueSettings
from services.spaces.embedded import EmbeddedSpaces
from services.spaces.protocol import Spaces
from services.spaces.queued import QueuedSpaces


def create_app(
    settings: ApiSettings | None = None,
    config: MemoryConfig | None = None,
    queue: QueueSettings | None = None,
    **parts: Any,
) -> FastAPI:
    """The API over `config`'s data directory (embedded), or, given `queue`, in front of its Redis and
    workers. `parts` (embedder, llm, clock, scheduler) go to every space opened embedded, as
    `Memoryos.from_config` takes them (tests inject fakes)."""
    settings = settings or ApiSettings()
    config = config or MemoryConfig()
    spaces: Spaces = (
        QueuedSpaces(config, queue, settings)
        if queue is not None
        else EmbeddedSpaces(config, settings, **parts)
    )
    state = ApiState(
        settings=settings,
        spaces=spaces,
        keys=KeyStore(settings.keys, settings.keys_file, settings.keys_reload_interval_s),
        limiter=RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst),
        metrics=ApiMetrics(spaces),
    )
    # FastAPIOffline: /docs and /redoc with Swagger UI's and ReDoc's assets served from the installed
    # package (/static-offline-docs), as FastAPI documents self-hosting them: behind a firewall with no
    # way to a CDN, FastAPI's own pages render blank.
    app = FastAPIOffline(
        title="MemoryOS",
        version=memoryos.__version__,
        summary="Long-term memory for LLM agents: write exchanges, retrieve context, act on what is remembered.",
        lifespan=lifespan,
    )
    app.state.api = state
    install_error_handlers(app)
    declare_bearer_auth(app)
    for module in (memories, retrieve, profile, lifecycle, bundles, dead_letters, health, playground):
        app.include_router(module.router)
    if queue is not None:  # rq jobs need Redis: embedded, the routes do not exist (404), not a 5xx
        app.include_router(jobs.router)
    app.add_middleware(CatchAllMiddleware)
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=settings.max_body_bytes,
        max_bundle_bytes=settings.max_bundle_bytes,
    )
    app.add_middleware(LatencyMiddleware, metrics=state.metrics)
    if tracing_enabled():  # the process's configure_tracing turned it on (docs/service.md, "Tracing")
        instrument_api(app)
    return app
