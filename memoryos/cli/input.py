"""What `memoryos add` reads from its flags and files, checked so that every mistake is one line naming the
flag, or the file and its line, before anything is stored."""

import argparse
import json
import re
from pathlib import Path
from typing import Any

from memoryos.errors import InvalidInputError

_SINGLE_TURN_FLAGS = {
    "user_input": "--user-input",
    "agent_response": "--agent-response",
    "timestamp": "--timestamp",
    "meta_data": "--meta",
    "turn": "--user-input/--agent-response",
}
_ID_FLAGS = {"user_id": "--user", "assistant_id": "--assistant"}
_TURN_FIELD = re.compile(r"turns\[(\d+)\](?:\.(.+))?")


class TurnsFile:
    """The turns of a JSON-lines file, with the file's own line number of each (blank lines skipped)."""

    def __init__(self, name: str) -> None:
        """Read and parse `name`; `InvalidInputError` names the file and line of the first bad one."""
        self.name = name
        self.turns: list[dict[str, Any]] = []
        self.line_numbers: list[int] = []
        try:
            data = Path(name).read_bytes()
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            raise InvalidInputError("--file", f"cannot read {name}: {reason}") from None
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise self.error(number, f"not UTF-8 text (byte {error.start + 1})") from None
            try:
                turn = json.loads(text)
            except json.JSONDecodeError as error:
                raise self.error(number, f"invalid JSON: {error.msg} (column {error.colno})") from None
            if not isinstance(turn, dict):
                raise self.error(number, f"expected a JSON object (one turn), got {_json_type(turn)}")
            self.turns.append(turn)
            self.line_numbers.append(number)
        if not self.turns:
            raise InvalidInputError("--file", f"{name} holds no turns (one JSON object per line)")

    def error(self, line: int, message: str) -> InvalidInputError:
        return InvalidInputError(f"{self.name} line {line}", message)

    def locate(self, error: InvalidInputError) -> InvalidInputError:
        """The engine's error about `turns[i].field` as one about the file's line of turn i."""
        match = _TURN_FIELD.fullmatch(error.field)
        if match is None:
            return error
        index, field = int(match.group(1)), match.group(2)
        message = str(error)[len(error.field) + 2 :]
        return self.error(self.line_numbers[index], f"{field}: {message}" if field else message)


def parse_meta(text: str | None) -> dict[str, Any] | None:
    """`--meta`: a JSON object, or None when the flag is not given."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInputError("--meta", f"invalid JSON: {error.msg} (column {error.colno})") from None
    if not isinstance(value, dict):
        raise InvalidInputError("--meta", f"must be a JSON object, got {_json_type(value)}")
    return value


def check_add_flags(args: argparse.Namespace) -> None:
    """`--file`, or `--user-input` with `--agent-response`: one or the other, completely."""
    single = {"--user-input": args.user_input, "--agent-response": args.agent_response}
    extras = {**single, "--timestamp": args.timestamp, "--meta": args.meta}
    if args.file is not None:
        given = [flag for flag, value in extras.items() if value is not None]
        if given:
            raise InvalidInputError(
                "--file", f"cannot be combined with {', '.join(given)}: each line of the file is one turn"
            )
        return
    missing = [flag for flag, value in single.items() if value is None]
    if missing:
        raise InvalidInputError(
            " and ".join(missing), "missing: give --user-input and --agent-response, or --file"
        )


def turn_of_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The one turn `add` was given as flags (`--user-input`, `--agent-response`, ...)."""
    return {
        "user_input": args.user_input,
        "agent_response": args.agent_response,
        "timestamp": args.timestamp,
        "meta_data": parse_meta(args.meta),
    }


def named_by_flag(error: InvalidInputError, *, single_turn: bool = False) -> InvalidInputError:
    """The engine's error about an id (or, with `single_turn`, a field of the turn `add` was given by
    flags), named by the command-line flag that gave it; other errors unchanged."""
    flag = _ID_FLAGS.get(error.field) or (_SINGLE_TURN_FLAGS.get(error.field) if single_turn else None)
    if flag is None:
        return error
    return InvalidInputError(flag, str(error)[len(error.field) + 2 :])


def _json_type(value: object) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
