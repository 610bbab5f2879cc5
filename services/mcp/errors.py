"""Engine errors as MCP errors with a message the agent can act on, in one place.

A tool's failure must reach the client as a tool error (`isError`, the message as text) and leave the
server running: the SDK turns a `ToolError` into exactly that. Messages never name server paths (a
missing space says which user and assistant, not where the data directory is). An unexpected exception is
a bug: the client gets its class name only, the log gets the class at WARNING and the traceback at DEBUG
only, since an exception's text may quote memory.
"""

import contextlib
import logging
from collections.abc import Iterator

from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from memoryos.errors import InvalidInputError, SpaceNotFoundError, StorageError
from memoryos.storage.space_lock import SpaceBusyError
from services.mcp.scope import AccessDeniedError
from services.spaces.errors import answer_for, message_for

log = logging.getLogger(__name__)


class RemoteRefusal(Exception):
    """A running API refused a call (`memoryos mcp --api-url`); its message is written for callers."""


def message_of(error: Exception) -> str | None:
    """What the client is told about an error of the spaces (their one table, `services/spaces/errors.py`,
    worded for an agent); None for an error that is no error of theirs."""
    if isinstance(error, AccessDeniedError | RemoteRefusal):
        return str(error)
    answer = answer_for(error)
    if answer is None:
        return None
    if isinstance(error, InvalidInputError):
        return f"invalid {error}"
    if isinstance(error, SpaceNotFoundError):
        return f"{message_for(error, answer)} yet; add_memory creates it"
    if isinstance(error, SpaceBusyError):  # the space named by its user and assistant, not its path
        space = f"of user {error.directory.parent.name!r} (assistant {error.directory.name!r})"
        return str(error).replace(str(error.directory), space)
    if isinstance(error, StorageError):
        log.warning("memory store error", extra={"error": str(error)})
        return "the memory store could not be read; the server's log says why"
    return message_for(error, answer)


@contextlib.contextmanager
def reported_as(kind: type[ToolError] | type[ResourceError], operation: str) -> Iterator[None]:
    """Run a tool's (`ToolError`) or a resource's (`ResourceError`) work; any exception leaves as `kind`
    with a message for the client."""
    try:
        yield
    except (ToolError, ResourceError):
        raise
    except Exception as error:
        message = message_of(error)
        if message is None:
            log.warning("%s failed unexpectedly (%s)", operation, type(error).__name__)
            log.debug("%s traceback", operation, exc_info=True)
            message = f"internal error ({type(error).__name__}); the server keeps running"
        raise kind(message) from error
