"""Input checks shared by every front end: ids that become path parts, texts, timestamps.

Each check raises `InvalidInputError` (a `ValueError`) naming the field, before anything is stored.
"""

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memoryos.errors import InvalidInputError
from memoryos.types import Turn

MAX_ID_CHARS = 128
"""Ids become directory names; 128 keeps paths far below every filesystem's limits."""

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
"""The reference package's timestamp format, kept for stored and returned timestamps."""

_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")
"""Matched whole (`fullmatch`): with `match` and `$`, a trailing newline would pass."""


def validate_id(field: str, value: object) -> str:
    """Return `value` if it is safe as one path component: no separators, no `..`, no NUL, bounded."""
    if not isinstance(value, str):
        raise InvalidInputError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidInputError(field, "must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(field, f"must be at most {MAX_ID_CHARS} characters, got {len(value)}")
    if "\x00" in value or "/" in value or "\\" in value or ".." in value:
        raise InvalidInputError(field, "must not contain '/', '\\', '..' or NUL")
    if not _ID_PATTERN.fullmatch(value):
        raise InvalidInputError(
            field, "may contain only letters, digits and . _ @ + -, and must start with a letter or digit"
        )
    return value


_KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What `ops.Key` accepts: write ids, op ids."""


def validate_key(field: str, value: object) -> str:
    """A client-chosen key such as a write id: 1-64 characters of [A-Za-z0-9_-] (safe in a queue key, a log
    line and a SQLite column), or `InvalidInputError` naming `field`."""
    if not isinstance(value, str) or not _KEY_PATTERN.fullmatch(value):
        raise InvalidInputError(field, f"must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-', got {value!r}")
    return value


def validate_text(field: str, value: object, max_chars: int) -> str:
    """Return `value` stripped of surrounding whitespace; reject empty and over-long texts.

    Texts are stored whole up to `max_chars`; longer ones are rejected rather than silently cut, so what
    the caller gets back is what they stored. (The embedding model reads only its own window of it.)
    """
    if not isinstance(value, str):
        raise InvalidInputError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInputError(field, "must not contain NUL characters")
    text = value.strip()
    if not text:
        raise InvalidInputError(field, "must not be empty or whitespace only")
    if len(text) > max_chars:
        raise InvalidInputError(
            field, f"is {len(text)} characters; the limit is {max_chars} (max_text_chars)"
        )
    return text


MAX_JSON_DEPTH = 32
"""How deeply `meta_data` may nest: deep enough for any real metadata, and a bound on the work (and the
error messages) a hostile body of a thousand nested lists would cost."""


def validate_json_value(field: str, value: Any) -> Any:
    """`value` if it is plain JSON that every store and client reads back as written: no NaN or
    Infinity (1e400 parses as Infinity; JSON has neither, and they came back as null), no NUL character in
    a key or a string, at most `MAX_JSON_DEPTH` levels. `InvalidInputError` naming `field` otherwise."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidInputError(field, f"nests deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidInputError(field, "must not hold NaN or Infinity (JSON numbers are finite)")
        if isinstance(item, str) and "\x00" in item:
            raise InvalidInputError(field, "must not contain NUL characters")
        if isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str) and "\x00" in key:
                    raise InvalidInputError(field, "must not contain NUL characters (in a key)")
                pending.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            pending.extend((child, depth + 1) for child in item)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:  # checked here, not mid-transaction with a TypeError
        raise InvalidInputError(field, f"must be JSON-serializable: {error}") from None
    return value


TURN_KEYS = ("user_input", "agent_response", "timestamp", "meta_data")
"""The keys of one turn (`add_memories`); any other key is refused, naming it."""


def validate_turn(raw: object, prefix: str, max_chars: int, now: datetime) -> Turn:
    """One turn as stored: texts checked and stripped, the timestamp parsed (`now` when absent), meta_data a
    JSON object. `prefix` ("turns[3].") starts the field names of errors; an unknown key is an error too,
    so a misspelt "timestamp" or "meta_data" is not dropped without a word."""
    field = prefix.rstrip(".") or "turn"
    if not isinstance(raw, Mapping):
        raise InvalidInputError(field, "must be a mapping with user_input and agent_response")
    unknown = sorted(str(key) for key in raw if key not in TURN_KEYS)
    if unknown:
        raise InvalidInputError(field, f"unknown key {unknown[0]!r}; a turn has {', '.join(TURN_KEYS)}")
    raw_meta = raw.get("meta_data")
    if raw_meta is not None and not isinstance(raw_meta, Mapping):
        raise InvalidInputError(f"{prefix}meta_data", "must be a JSON object")
    meta_data = validate_json_value(f"{prefix}meta_data", dict(raw_meta or {}))
    moment = parse_timestamp(f"{prefix}timestamp", raw.get("timestamp"), now)
    return Turn(
        user_input=validate_text(f"{prefix}user_input", raw.get("user_input"), max_chars),
        agent_response=validate_text(f"{prefix}agent_response", raw.get("agent_response"), max_chars),
        timestamp=format_timestamp(moment),
        meta_data=meta_data,
    )


def parse_timestamp(field: str, value: object, now: datetime | None = None) -> datetime:
    """Parse an ISO 8601 or `%Y-%m-%d %H:%M:%S` timestamp to naive UTC; None means now.

    Aware timestamps are converted to UTC; naive ones are taken as UTC, as the reference stores them.
    """
    if value is None:
        return (now or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None, microsecond=0)
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            parsed = datetime.strptime(text, TIMESTAMP_FORMAT)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise InvalidInputError(
                    field, f"could not parse {text!r}; use ISO 8601 or '{TIMESTAMP_FORMAT}'"
                ) from None
    else:
        raise InvalidInputError(field, f"must be an ISO 8601 string, got {value!r}")
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def format_timestamp(moment: datetime) -> str:
    """The stored/returned form of a timestamp (`TIMESTAMP_FORMAT`).

    Built by hand rather than with `strftime`, which writes year 999 as "999" on Linux: a form that
    `strptime` cannot read back, so such a page would fail consolidation on every later write.
    """
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def format_unix_timestamp(seconds: float) -> str:
    """The stored/returned form of a Unix time, in UTC."""
    return format_timestamp(datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None))
