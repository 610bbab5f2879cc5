"""`service_entry`: a deployable of the service package (`services/`), found through the package's
`memoryos.services` entry points and imported only when its command runs.

The engine and `memoryos --help` never import FastAPI, Redis or MCP; a command that needs them (`serve`,
`worker`, `mcp`, anything with `--redis-url` or `--api-url`) loads its entry point here, and a missing
`service` extra becomes one error line naming it. The entry points (pyproject.toml) are where the engine's
command line meets the service: the one place that names both.
"""

from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUP = "memoryos.services"
"""The entry-point group pyproject.toml declares the service's deployables in."""


def service_entry(name: str) -> Any:
    """The deployable `name` (`serve`, `worker`, `mcp`, `remote`, `export-job`, `import-job`,
    `reindex-job`), imported now; `MissingExtraError` naming the extra when its packages are missing."""
    from memoryos.errors import MemoryOSError, MissingExtraError

    found: tuple[EntryPoint, ...] = tuple(entry_points(group=GROUP, name=name))
    if not found:
        raise MemoryOSError(
            f"no {GROUP} entry point {name!r}: install MemoryOS as a package (pip install -e .), "
            "not only its source on the path"
        )
    try:
        return found[0].load()
    except ModuleNotFoundError as missing:
        raise MissingExtraError("service", missing.name or "?") from None
