"""`memoryos mcp`: the MCP server over stdio on the embedded engine, for a client that spawns it (Claude
Desktop, Cline, Cursor), one process per client — or, with `--api-url` (and `--api-key`), as a thin client
of a running API (`remote.py`): no store, no model in this process.

Stdout carries protocol only: logging goes to stderr (WARNING, or INFO with `--verbose`), and while it
serves, the SDK points file descriptor 1 at stderr so a stray print cannot corrupt the stream. Nothing
heavy happens before the handshake: the embedding model loads on the first call that opens a space.

Several clients may each spawn `memoryos mcp` on one data directory: every process reads the others'
writes (docs/engine.md, "Several processes on one space"); `forget_user` needs the space alone and names
the other processes' pids otherwise. On EOF or SIGTERM the open spaces are closed: pages not yet embedded
stay durable and are embedded by the next process that opens them.
"""

import argparse
import logging
import sys

from memoryos import MemoryConfig
from memoryos.cli.session import config_of
from memoryos.tracing import configure_tracing
from memoryos.validation import validate_id
from services.api.settings import ApiSettings
from services.mcp.access import MemoryAccess
from services.mcp.scope import DEFAULT_ASSISTANT_ID, Caller, Defaults
from services.mcp.server import build_server
from services.spaces.embedded import EmbeddedSpaces
from services.spaces.protocol import Spaces

MCP_SERVICE_NAME = "memoryos-mcp"
"""`memoryos mcp`'s `service.name` in traces, unless `OTEL_SERVICE_NAME` names another. Its tool calls
are the MCP SDK's own spans (`tools/call <tool>`, parented on a `traceparent` in the request's `_meta`)."""


def configure_stderr_logging(verbose: bool) -> None:
    """Log lines on stderr only (WARNING; INFO for memoryos with --verbose). Set before the SDK's own
    `basicConfig`, which then adds no handler of its own."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr, force=True)
    if verbose:
        logging.getLogger("memoryos").setLevel(logging.INFO)


def _spaces(config: MemoryConfig, api_url: str | None, api_key: str | None) -> Spaces:
    """The engine in this process, or a running API's (imported only then: the start stays short)."""
    if not api_url:
        return EmbeddedSpaces(config, ApiSettings(preload_model=False))
    from services.client import AsyncMemoryClient
    from services.mcp.remote import RemoteSpaces

    return RemoteSpaces(config, AsyncMemoryClient(api_url, api_key=api_key))


def run_stdio(args: argparse.Namespace) -> None:
    """Serve until the client closes stdin. `args`: the CLI's `--data-dir`, `--verbose`, `--user` (optional:
    without it every call names its user), `--assistant`, and `--api-url` / `--api-key`."""
    configure_stderr_logging(bool(getattr(args, "verbose", False)))
    configure_tracing(MCP_SERVICE_NAME)  # off unless OTEL_EXPORTER_OTLP_ENDPOINT is set; never on stdout
    user = validate_id("user", args.user) if args.user is not None else None  # a typo fails before serving
    assistant = validate_id("assistant", args.assistant or DEFAULT_ASSISTANT_ID)
    config = config_of(args)
    spaces = _spaces(config, getattr(args, "api_url", None), getattr(args, "api_key", None))
    caller = Caller(config.tenant)
    access = MemoryAccess(spaces, lambda _ctx: caller, Defaults(user, assistant))
    server = build_server(access)
    try:
        server.run("stdio")
    finally:
        spaces.close()
