"""LoCoMo conversations as (user, assistant) pairs with their questions, read from any of the shipped layouts.

The benchmark ingests pairs, so the raw upstream layout is converted with the same rules that produced
`shared/data/locomo/pairs/`: a conversion of `locomo_dev.json` equals those files field by field, and a
full upstream `locomo10.json` is converted the same way.
"""

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from memoryos.errors import InvalidInputError

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
"""The pair timestamp, sortable as text."""

RAW_TIMESTAMP_FORMAT = "%I:%M %p on %d %B, %Y"
"""Upstream session dates, e.g. "1:56 pm on 8 May, 2023"."""

NO_MESSAGE = "(no message)"
"""User side of a pair whose assistant turn had no user turn before it (a session opened by speaker_b)."""

NO_REPLY = "(no reply)"
"""Assistant side of a pair whose user turn got no answer (a session closed by speaker_a)."""

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
"""One id inside an upstream evidence entry; tolerates "D:11:26" and zero padding ("D30:05")."""


class LocomoPair(BaseModel):
    """One (user, assistant) exchange; `dia_ids` names the upstream turns it holds, one or two."""

    model_config = ConfigDict(frozen=True)

    index: int
    session: int
    timestamp: str
    timestamp_raw: str
    user_input: str
    agent_response: str
    dia_ids: list[str]

    @field_validator("timestamp")
    @classmethod
    def _timestamp_is_formatted(cls, value: str) -> str:
        datetime.strptime(value, TIMESTAMP_FORMAT)
        return value


class LocomoQuestion(BaseModel):
    """A question with its gold answer; `evidence_norm` holds the evidence ids that exist in the turns."""

    model_config = ConfigDict(frozen=True)

    question: str
    answer: str | None = None
    evidence: list[str]
    evidence_norm: list[str]
    category: int

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_as_text(cls, value: Any) -> Any:
        """Upstream stores some answers as numbers (a year, a count); scorers compare text."""
        return str(value) if isinstance(value, int | float) else value


class LocomoConversation(BaseModel):
    """One LoCoMo sample: speaker_a is the user, speaker_b the assistant."""

    model_config = ConfigDict(frozen=True)

    sample_id: str
    speaker_a: str
    speaker_b: str
    pairs: list[LocomoPair]
    qa: list[LocomoQuestion]


def load_conversations(path: Path, sample_ids: Sequence[str] | None = None) -> list[LocomoConversation]:
    """Read a pairs file, a directory of pairs files, or a raw upstream file (a list of samples).

    Conversations come back in file order (directories: by file name). With `sample_ids`, only those are
    returned, and a requested id that is absent is an error rather than a silently smaller benchmark.
    """
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        loaded = [conversation for file in files for conversation in _from_document(_read_json(file), file)]
    else:
        loaded = _from_document(_read_json(path), path)
    if sample_ids is None:
        return loaded
    wanted = set(sample_ids)
    missing = sorted(wanted - {conversation.sample_id for conversation in loaded})
    if missing:
        raise InvalidInputError("sample_ids", f"not found in {path}: {', '.join(missing)}")
    return [conversation for conversation in loaded if conversation.sample_id in wanted]


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _from_document(document: Any, path: Path) -> list[LocomoConversation]:
    if isinstance(document, list):
        return [conversation_from_raw(sample) for sample in document]
    if isinstance(document, dict) and "pairs" in document:
        return [LocomoConversation.model_validate(document)]
    raise InvalidInputError("path", f"{path} is neither a pairs file nor a list of upstream LoCoMo samples")


def conversation_from_raw(sample: Mapping[str, Any]) -> LocomoConversation:
    """Convert one upstream sample (`sample_id`, `conversation`, `qa`) to pairs and normalized questions."""
    conversation = sample["conversation"]
    speaker_a, speaker_b = conversation["speaker_a"], conversation["speaker_b"]
    pairs: list[LocomoPair] = []
    for session in _session_numbers(conversation):
        timestamp_raw = conversation[f"session_{session}_date_time"]
        timestamp = datetime.strptime(timestamp_raw, RAW_TIMESTAMP_FORMAT).strftime(TIMESTAMP_FORMAT)
        for user_turn, assistant_turn in _pair_turns(
            conversation[f"session_{session}"], speaker_a, speaker_b
        ):
            pairs.append(
                LocomoPair(
                    index=len(pairs),
                    session=session,
                    timestamp=timestamp,
                    timestamp_raw=timestamp_raw,
                    user_input=_turn_text(user_turn) if user_turn else NO_MESSAGE,
                    agent_response=_turn_text(assistant_turn) if assistant_turn else NO_REPLY,
                    dia_ids=[turn["dia_id"] for turn in (user_turn, assistant_turn) if turn],
                )
            )
    known_ids = {dia_id for pair in pairs for dia_id in pair.dia_ids}
    questions = [
        LocomoQuestion.model_validate({**qa, "evidence_norm": normalize_evidence(qa["evidence"], known_ids)})
        for qa in sample["qa"]
    ]
    return LocomoConversation(
        sample_id=sample["sample_id"], speaker_a=speaker_a, speaker_b=speaker_b, pairs=pairs, qa=questions
    )


def _session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    """Sessions with turns, in numeric order (upstream lists dates for some sessions that have none)."""
    numbers = [
        int(match.group(1))
        for key, turns in conversation.items()
        if (match := _SESSION_KEY.fullmatch(key)) and turns
    ]
    return sorted(numbers)


def _pair_turns(
    turns: Iterable[Mapping[str, Any]], speaker_a: str, speaker_b: str
) -> list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]:
    """Pair each speaker_a turn with the speaker_b turn right after it.

    A turn without a partner gets a pair of its own (the other side filled by the caller), so no turn is
    lost: a speaker_b turn that opens a session, and a speaker_a turn that closes one or that is followed
    by another speaker_a turn.
    """
    pairs: list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = []
    pending_user: Mapping[str, Any] | None = None
    for turn in turns:
        if turn["speaker"] == speaker_a:
            if pending_user is not None:
                pairs.append((pending_user, None))
            pending_user = turn
        elif turn["speaker"] == speaker_b:
            pairs.append((pending_user, turn))
            pending_user = None
        else:
            raise InvalidInputError("speaker", f"{turn['dia_id']} is spoken by {turn['speaker']!r}")
    if pending_user is not None:
        pairs.append((pending_user, None))
    return pairs


def _turn_text(turn: Mapping[str, Any]) -> str:
    caption = turn.get("blip_caption")
    return f"{turn['text']} (image description: {caption})" if caption else turn["text"]


def normalize_evidence(evidence: Iterable[str], known_ids: set[str]) -> list[str]:
    """Evidence ids as they appear in `dia_ids`, in order, each once.

    Upstream entries sometimes pack several ids ("D8:6; D9:17", "D9:1 D4:4 D4:6"), mistype one
    ("D:11:26", "D30:05") or name a turn that does not exist; ids that match no turn are dropped, since no
    retrieval could ever find them.
    """
    normalized: list[str] = []
    for entry in evidence:
        for session, turn in _EVIDENCE_ID.findall(entry):
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id in known_ids and dia_id not in normalized:
                normalized.append(dia_id)
    return normalized


DEV_SAMPLE_IDS = ("conv-26", "conv-30", "conv-41")
"""The three conversations every figure in docs/benchmarks.md is measured on."""
LOCOMO_FETCH = (
    "curl -L --create-dirs -o data/locomo10.json "
    "https://raw.githubusercontent.com/snap-research/LoCoMo/main/data/locomo10.json"
)
"""LoCoMo (CC BY-NC 4.0) is not redistributed with MemoryOS; this one line fetches the upstream file."""


def find_locomo_raw() -> Path | None:
    """The raw upstream LoCoMo file benchmarks and tests read, or None. `$MEMORYOS_LOCOMO`, when set, is the
    only place looked: a raw file, or a folder holding `locomo_dev.json` or `locomo10.json`; anything else
    (an empty folder, a missing path) means no data, so CI can run the LoCoMo tests as a fresh clone sees
    them. Unset: the workplace's `../shared/data/locomo/locomo_dev.json` beside a checkout, then
    `data/locomo10.json` in the working directory (where `LOCOMO_FETCH` puts it). Callers select
    `DEV_SAMPLE_IDS` from it."""
    configured = os.environ.get("MEMORYOS_LOCOMO")
    if configured:
        named = Path(configured)
        candidates = [named, named / "locomo_dev.json", named / "locomo10.json"]
    else:
        candidates = [
            Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo_dev.json",
            Path("data") / "locomo10.json",
        ]
    return next((path for path in candidates if path.is_file()), None)
