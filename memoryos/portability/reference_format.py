"""The reference MemoryOS's files for one user, read and checked: where they are, and their records as
pydantic models that keep what we import and ignore the rest (embeddings, heat). The mapping onto our
tiers is `memoryos/portability/reference_import.py`.
"""

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from memoryos.errors import InvalidInputError

USER_FILES = ("short_term.json", "mid_term.json", "long_term_user.json")
ASSISTANT_FILE = "long_term_assistant.json"
M = TypeVar("M", bound=BaseModel)
EMPTY_KNOWLEDGE = {"", "none", "- none", "- none."}
"""What the reference writes for "nothing extracted"; it never stores these either."""


class _Loose(BaseModel):
    """The reference's records carry fields we do not import (embeddings, heat): ignored."""

    model_config = ConfigDict(extra="ignore")


class RefPage(_Loose):
    page_id: str | None = None
    user_input: Any = None
    agent_response: Any = None
    timestamp: Any = None
    meta_data: Any = None
    analyzed: bool = False
    pre_page: str | None = None
    meta_info: str | None = None


class RefSession(_Loose):
    summary: str = ""
    summary_keywords: list[str] = []
    details: list[RefPage] = []
    N_visit: int = 0
    L_interaction: int = 0
    timestamp: str | None = None
    last_visit_time: str | None = None


class RefMidTerm(_Loose):
    sessions: dict[str, RefSession] = {}


class RefKnowledge(_Loose):
    knowledge: str
    timestamp: str | None = None


class RefProfile(_Loose):
    data: str | None = None
    last_updated: str | None = None


class RefLongTerm(_Loose):
    user_profiles: dict[str, RefProfile] = {}
    knowledge_base: list[RefKnowledge] = []
    assistant_knowledge: list[RefKnowledge] = []


def locate_reference(reference_dir: Path, reference_user: str, assistant_id: str) -> tuple[Path, Path]:
    """(the user's directory, the assistant's knowledge file) in a reference data directory."""
    candidates = [reference_dir / "users" / reference_user, reference_dir]
    for user_dir in candidates:
        if any((user_dir / name).is_file() for name in USER_FILES):
            root = user_dir.parent.parent
            return user_dir, root / "assistants" / assistant_id / ASSISTANT_FILE
    raise InvalidInputError(
        str(reference_dir),
        f"not a reference MemoryOS data directory: found none of {', '.join(USER_FILES)} in "
        f"{candidates[0]} or in it",
    )


def load_reference(path: Path, kind: type, default: Any) -> Any:
    """A reference JSON file (`default` when it does not exist, as the reference starts empty)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidInputError(str(path), f"cannot read it as JSON ({error})") from None
    if not isinstance(data, kind):
        raise InvalidInputError(str(path), f"expected a JSON {kind.__name__}, got {type(data).__name__}")
    return data


def parse_reference(path: Path, model: type[M]) -> M:
    """A reference JSON object file as `model` (empty when the file does not exist)."""
    try:
        return model.model_validate(load_reference(path, dict, {}))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in error.errors()
        )
        raise InvalidInputError(str(path), problems) from None
