"""`service_entry`: a function of the service package (`services/`), imported only when its command runs.

The engine and `memoryos --help` never import FastAPI, Redis or MCP; a command that needs them (`serve`,
`worker`, `mcp`, anything with `--redis-url`) imports them here, and a missing `service` extra becomes one
error line naming it.
"""

import importlib
from typing import Any


def service_entry(module: str, name: str) -> Any:
    """A function of the service package, imported only when its command runs (the engine and
    `memoryos --help` never import FastAPI, Redis or MCP), or `MissingExtraError` naming the extra."""
    from memoryos.errors import MissingExtraError

    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as missing:
        raise MissingExtraError("service", missing.name or "?") from None
