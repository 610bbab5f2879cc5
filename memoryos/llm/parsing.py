"""Turning model replies into data: reasoning removed, JSON found wherever the model put it.

Models wrap JSON in ```json fences, surround it with prose, or prefix it with `<think>` reasoning; the
reference failed on fences and filed every such page into one catch-all segment. Here any reply holding a
JSON object parses, and one holding none raises `LLMError` so the caller can retry or keep its state.
"""

import json
import re
from collections.abc import Iterable
from typing import Any

from memoryos.errors import LLMError

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UP_TO_ORPHAN_CLOSE = re.compile(r"^.*</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_OPEN = re.compile(r"^\s*<think>.*\Z", re.DOTALL | re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_EMPTY_MARKERS = frozenset({"none", "null", "n/a", "na", "nothing", "-"})


def strip_think(text: str) -> str:
    """The reply without reasoning blocks, stripped of surrounding whitespace.

    Besides whole `<think>…</think>` blocks this drops everything before an orphan `</think>` (some chat
    templates put the opening tag in the prompt, so the reply starts inside the block), and a leading
    `<think>` that never closes (reasoning cut off by the token limit) leaves nothing: there is no answer.
    """
    text = _THINK_BLOCK.sub("", text)
    text = _UP_TO_ORPHAN_CLOSE.sub("", text)
    text = _UNCLOSED_OPEN.sub("", text)
    return text.strip()


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in the reply, inside code fences or prose alike.

    Reasoning blocks are removed first, so a draft inside `<think>` is never taken for the answer. An
    array of objects yields its first object. Raises `LLMError` (without the reply text, which is memory
    content) when the reply holds no JSON object.
    """
    text = strip_think(text)
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise LLMError(f"no JSON object in the model reply ({len(text)} chars)")


def parse_yes_no(text: str) -> bool:
    """A yes/no verdict from the reply's first word ("yes"/"true" or "no"/"false", any case or punctuation).

    Raises `LLMError` for anything else: guessing would silently split or merge dialogue chains.
    """
    words = re.findall(r"[a-z]+", strip_think(text).casefold())
    if words and words[0] in ("yes", "true"):
        return True
    if words and words[0] in ("no", "false"):
        return False
    raise LLMError("the model reply is neither yes nor no")


def coerce_keywords(value: object, *, limit: int = 5) -> list[str]:
    """Keywords from a JSON value: a list, or one comma-separated string; deduplicated ignoring case."""
    items = re.split(r"[,;\n]", value) if isinstance(value, str) else _as_items(value)
    cleaned = (item.strip().strip("\"'#").strip() for item in items)
    return _dedupe(cleaned)[:limit]


def coerce_facts(value: object) -> list[str]:
    """Facts from a JSON value: a list, or one string with a fact per line; bullets and "None" dropped."""
    items = value.splitlines() if isinstance(value, str) else _as_items(value)
    return _dedupe(_BULLET.sub("", item).strip() for item in items)


def _as_items(value: object) -> list[str]:
    """The string (or number) elements of a JSON list; anything else holds no usable text."""
    if not isinstance(value, list):
        return []
    return [str(item) for item in value if isinstance(item, str | int | float) and not isinstance(item, bool)]


def _dedupe(items: Iterable[str]) -> list[str]:
    """Non-empty items, first spelling kept, later case-insensitive repeats and "None" markers dropped."""
    seen: set[str] = set()
    kept: list[str] = []
    for item in items:
        key = item.casefold()
        if not item or key.rstrip(".") in _EMPTY_MARKERS or key in seen:
            continue
        seen.add(key)
        kept.append(item)
    return kept
