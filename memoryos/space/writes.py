"""A write, checked and turned into the op that stores it: what the facade applies at once and what a
service puts on its queue for the space's owner to apply later.

Checking happens here, before anything is stored or acknowledged, so a write a queue accepted can only
fail to apply for reasons outside the caller's input (a full disk, a model of another dimension), and a
service never acknowledges a write its worker would refuse.
"""

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memoryos.errors import InvalidInputError
from memoryos.space.ops import AddTurns
from memoryos.validation import validate_key, validate_turn


def plan_write(
    turns: Iterable[Mapping[str, Any]],
    *,
    max_text_chars: int,
    at: float,
    write_id: str | None = None,
    ttl_s: float | None = None,
    field_prefix: str = "turns",
) -> AddTurns:
    """The `AddTurns` op storing `turns` (pending: embedded after it is applied), or `InvalidInputError`
    naming the first bad field (`turns[2].user_input`). `write_id` makes it idempotent: the op of a retried
    write carries the same id and is stored once. `ttl_s`: seconds until the pages expire (None: the
    space's TTL, if any)."""
    now = datetime.fromtimestamp(at, UTC)
    validated = [
        validate_turn(turn, f"{field_prefix}[{i}]." if field_prefix else "", max_text_chars, now)
        for i, turn in enumerate(turns)
    ]
    if not validated:
        raise InvalidInputError(field_prefix or "turns", "must contain at least one turn")
    if ttl_s is not None and (
        not isinstance(ttl_s, int | float) or isinstance(ttl_s, bool) or not 0 < ttl_s < float("inf")
    ):
        raise InvalidInputError("ttl_s", f"must be a positive number of seconds, got {ttl_s!r}")
    op = AddTurns(turns=validated, at=at, ttl_s=ttl_s)
    if write_id is not None:
        op = op.model_copy(update={"write_id": validate_key("write_id", write_id)})
    return op
