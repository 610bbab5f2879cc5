"""`memoryos serve`: the embedded API in this process — local data directory, the engine's in-process
scheduler, no Redis — or, with `--redis-url`, the API alone in front of Redis and `memoryos worker`
processes (it loads no model). Imported by the CLI only when the command runs, so `memoryos --help` and
the engine never import FastAPI or uvicorn."""

import argparse

import uvicorn

from memoryos.cli.session import config_of
from services.allocator import fix_mmap_threshold
from services.api.main import create_app
from services.api.settings import ApiSettings, check_bind
from services.queue.settings import QueueSettings, redacted_url


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
    config = config_of(args)
    queue = QueueSettings(redis_url=args.redis_url) if getattr(args, "redis_url", None) else None
    if queue is None:  # embedded: this process opens and evicts the spaces (off unless configured)
        fix_mmap_threshold(settings.mmap_threshold_kb * 1024)
    app = create_app(settings, config, queue)
    url = f"http://{settings.host}:{settings.port}"
    auth = "API keys required" if settings.authenticated else "no API key (single tenant 'default')"
    behind = f"queue {redacted_url(queue.redis_url)}" if queue else f"data {config.data_dir}"
    print(f"MemoryOS API on {url} — docs {url}/docs; {behind}; {auth}", flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)
