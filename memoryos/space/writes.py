"""A write, checked and turned into the op that stores it: what the facade applies at once and what a
service puts on its queue for the space's owner to apply later.

Checking happens here, before anything is stored or acknowledged, so a write a queue accepted can only
fail to apply for reasons outside the caller's input (a full disk, a model of another dimension), and a
service never acknowledges a write its worker would refuse.

A write whose id the caller chose gets an op id made from that id and its content (`content_id`): the
store then tells a retry (the same op id) from the id reused for another write (`WriteIdConflictError`),
and a service's queue can tell them apart before it acknowledges either.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memoryos.errors import InvalidInputError
from memoryos.space.ops import AddTurns
from memoryos.storage.records.base import CONTENT_ID_PREFIX
from memoryos.types import Turn
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
    write carries the same id and op id (`content_id`) and is stored once; under other content the store
    refuses it (`WriteIdConflictError`). `ttl_s`: seconds until the pages expire (None: the
    space's TTL, if any)."""
    now = datetime.fromtimestamp(at, UTC)
    given = list(turns)
    validated = [
        validate_turn(turn, f"{field_prefix}[{i}]." if field_prefix else "", max_text_chars, now)
        for i, turn in enumerate(given)
    ]
    if not validated:
        raise InvalidInputError(field_prefix or "turns", "must contain at least one turn")
    if ttl_s is not None and (
        not isinstance(ttl_s, int | float) or isinstance(ttl_s, bool) or not 0 < ttl_s < float("inf")
    ):
        raise InvalidInputError("ttl_s", f"must be a positive number of seconds, got {ttl_s!r}")
    op = AddTurns(turns=validated, at=at, ttl_s=ttl_s)
    if write_id is not None:
        key = validate_key("write_id", write_id)
        timestamped = [turn.get("timestamp") is not None for turn in given]
        op_id = content_id(key, validated, timestamped, ttl_s)
        op = op.model_copy(update={"write_id": key, "op_id": op_id})
    return op


def content_id(write_id: str, turns: list[Turn], timestamped: list[bool], ttl_s: float | None) -> str:
    """The op id of a write under a caller's `write_id`: `CONTENT_ID_PREFIX` and the SHA-256 of the
    canonical JSON of the write id, the turns as stored and `ttl_s`.

    A turn's timestamp counts only where the caller gave it (`timestamped`): one left out is "now", which
    a retry a second later must not turn into other content. Texts count as stored (stripped), a
    timestamp in its stored form, so spellings that store the same pages are the same write."""
    canonical = {
        "write_id": write_id,
        "turns": [
            {**turn.model_dump(), "timestamp": turn.timestamp if given else None}
            for turn, given in zip(turns, timestamped, strict=True)
        ],
        "ttl_s": None if ttl_s is None else float(ttl_s),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    return CONTENT_ID_PREFIX + digest[: 64 - len(CONTENT_ID_PREFIX)]  # an op id: 64 characters at most


def caller_content_id(op: AddTurns) -> str | None:
    """The content id of a write whose id the caller chose (`content_id`), else None: what a service's
    queue remembers per write id to refuse its reuse before acknowledging."""
    return op.op_id if op.op_id.startswith(CONTENT_ID_PREFIX) else None
