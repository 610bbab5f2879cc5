"""Which memory space an MCP call reaches.

The tenant is always the caller's (the server's configuration over stdio, the API key over HTTP): no tool
argument names one. The user is the one the caller is bound to, if any — then a call naming another user is
refused, whatever an agent was told to try — else the call's `user_id`, else the server's default
(`memoryos mcp --user`). Ids are checked by the engine's rule before any file is touched.
"""

from dataclasses import dataclass

from memoryos.errors import InvalidInputError
from memoryos.space.pool import SpaceKey
from memoryos.validation import validate_id

DEFAULT_ASSISTANT_ID = "default_assistant_profile"
"""The reference's and the CLI's default assistant."""


@dataclass(frozen=True)
class Caller:
    """Who is calling: the tenant whose memory the call may touch and, for a key bound to one user, that
    user (None: any user of the tenant)."""

    tenant: str
    bound_user_id: str | None = None


@dataclass(frozen=True)
class Defaults:
    """What a call that names no user or assistant gets (`memoryos mcp --user/--assistant`)."""

    user_id: str | None = None
    assistant_id: str = DEFAULT_ASSISTANT_ID


class AccessDeniedError(Exception):
    """A call named a user its caller may not reach. Nothing was read or changed."""


def space_key(caller: Caller, defaults: Defaults, user_id: str | None, assistant_id: str | None) -> SpaceKey:
    """The space a call reaches, or `AccessDeniedError` / `InvalidInputError` (naming the field)."""
    user: str | None
    if caller.bound_user_id is not None:
        if user_id is not None and user_id != caller.bound_user_id:
            raise AccessDeniedError(
                f"user_id: this key may reach user {caller.bound_user_id!r} only, not {user_id!r}"
            )
        user = caller.bound_user_id
    else:
        user = user_id if user_id is not None else defaults.user_id
        if user is None:
            raise InvalidInputError("user_id", "required: name the user (this server has no default user)")
    return SpaceKey(
        caller.tenant,
        validate_id("user_id", user),
        validate_id("assistant_id", assistant_id if assistant_id is not None else defaults.assistant_id),
    )
