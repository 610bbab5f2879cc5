"""A JSON reply checked against its task's schema, since a server may ignore `response_format`.

An endpoint that accepts `response_format` without enforcing it (a proxy that drops it, a server whose
guided decoding is off) answers as if it were plain text: `{"user_facts": [{"fact": "...", "score": 1}]}`
or `{"summary": ["..."]}`. The parsers read free text leniently, and would silently drop what they cannot
read: the slice would be marked analyzed with its facts lost. So a property the schema names whose value
has another type is a violation, and the reply is refused (asked for again, then the work is retried).

Two departures from the schema are read rather than refused, as the free-text fallback always read them
(docs/reliability.md, "Bounded LLM calls"): a string where an array of strings is expected (a list written
one item per line), and a property missing or added (strict mode requires every property for the server's
grammar; a reply without `assistant_facts` says there is none).
"""

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "array": (list,),
    "object": (dict,),
    "number": (int, float),
    "boolean": (bool,),
}


def schema_violations(data: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Where `data` contradicts `schema` ("user_facts[2]: object, not string"); empty when it does not.

    Only what the memory tasks' schemas use is understood: an object's `properties`, each with a `type`,
    and an array's `items`. The messages name paths and types, never the reply's text (memory content).
    """
    violations: list[str] = []
    for name, expected in schema.get("properties", {}).items():
        if name in data:
            violations += _violations(data[name], expected, name)
    return violations


def _violations(value: object, schema: dict[str, Any], path: str) -> list[str]:
    expected = schema.get("type")
    if expected == "array" and isinstance(value, str):
        return []  # one item per line: the free-text form of a list of strings
    if not _is(value, expected):
        return [f"{path}: {_json_type(value)}, not {expected}"]
    if isinstance(value, list) and "items" in schema:
        return [v for i, item in enumerate(value) for v in _violations(item, schema["items"], f"{path}[{i}]")]
    return []


def _is(value: object, expected: object) -> bool:
    if not isinstance(expected, str) or expected not in _TYPES:
        return True  # a type this checker does not know is not held against the reply
    if isinstance(value, bool):
        return expected == "boolean"
    return isinstance(value, _TYPES[expected])


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name, types in _TYPES.items():
        if isinstance(value, types):
            return name
    return type(value).__name__
