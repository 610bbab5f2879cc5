"""`memoryos serve`: the REST API with the MCP server mounted at `/mcp` (the same keys and spaces), embedded
in this process — local data directory, the engine's in-process scheduler, no Redis — or, with
`--redis-url`, in front of Redis and `memoryos worker` processes (it loads no model). Reached through the
`memoryos.services` entry points only when the command runs, so `memoryos --help` and the engine never
import FastAPI or uvicorn."""

import argparse
from typing import Any

import uvicorn
from fastapi import FastAPI

from memoryos import MemoryConfig
from memoryos.cli.session import config_of
from memoryos.tracing import configure_tracing
from services.allocator import fix_mmap_threshold
from services.api.main import create_app
from services.api.settings import ApiSettings, check_bind, check_keys
from services.mcp.http_app import mount_mcp
from services.queue.settings import QueueSettings, redacted_url

API_SERVICE_NAME = "memoryos-api"
"""The API's `service.name` in traces, unless `OTEL_SERVICE_NAME` names another."""


def create_served_app(
    settings: ApiSettings | None = None,
    config: MemoryConfig | None = None,
    queue: QueueSettings | None = None,
    **parts: Any,
) -> FastAPI:
    """What `memoryos serve` serves: the API (`services.api.main.create_app`, the same arguments) with MCP
    over streamable HTTP at `/mcp`, behind the same keys and over the same spaces."""
    app = create_app(settings, config, queue, **parts)
    mount_mcp(app)
    return app


def settings_of(args: argparse.Namespace) -> ApiSettings:
    """`MEMORYOS_API_*` variables, with the command's flags over them."""
    overrides: dict[str, object] = {}
    for flag in ("host", "port", "keys_file"):
        if getattr(args, flag, None) is not None:
            overrides[flag] = getattr(args, flag)
    if getattr(args, "allow_unauthenticated", False):
        overrides["allow_unauthenticated"] = True
    return ApiSettings(**overrides)  # type: ignore[arg-type]


def run_server(args: argparse.Namespace) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn's graceful shutdown: requests in flight finish, spaces
    close, pages not yet embedded stay durable for the next start)."""
    settings = settings_of(args)
    check_bind(settings)  # before anything is loaded or bound
    check_keys(settings)
    config = config_of(args)
    configure_tracing(API_SERVICE_NAME)  # off unless OTEL_EXPORTER_OTLP_ENDPOINT is set
    queue = QueueSettings(redis_url=args.redis_url) if getattr(args, "redis_url", None) else None
    if queue is None:  # embedded: this process opens and evicts the spaces (off unless configured)
        fix_mmap_threshold(settings.mmap_threshold_kb * 1024)
    app = create_served_app(settings, config, queue)
    url = f"http://{settings.host}:{settings.port}"
    auth = "API keys required" if settings.authenticated else "no API key (single tenant 'default')"
    behind = f"queue {redacted_url(queue.redis_url)}" if queue else f"data {config.data_dir}"
    print(f"MemoryOS API on {url} — docs {url}/docs; {behind}; {auth}", flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)
