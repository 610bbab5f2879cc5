"""What `memoryos` commands print: text for people, `--json` for programs.

`--json` results carry `space_exists`. For a user, assistant or data directory with no memory, `retrieve
--json` and `stats --json` print the result of an empty space with `"space_exists": false` and exit 0 (a
program asking about a user it has not stored anything for yet gets an answer, not an error), with a
`note:` line on stderr; nothing is created. Without `--json` that case is an error (exit 3).
"""

import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryos.types import MemoryStats, RetrievedContext


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False), flush=True)


def print_context(context: "RetrievedContext") -> None:
    for page in context.retrieved_pages:
        print(
            f"[{page.score:6.2f}] {page.timestamp}  user: {page.user_input}\n{'':30}assistant: {page.agent_response}"
        )
    for fact in context.retrieved_user_knowledge:
        print(f"user fact: {fact.knowledge}")


def print_stats(stats: "MemoryStats") -> None:
    print(
        f"short-term pages: {stats.short_term_pages}  mid-term pages: {stats.mid_term_pages}  "
        f"archived pages: {stats.archived_pages}"
    )
    print(
        f"user facts: {stats.user_knowledge}  assistant facts: {stats.assistant_knowledge}  "
        f"profile versions: {stats.profile_versions}  model: {stats.embedding_model} ({stats.embedding_dim}-d)"
    )
    for segment in sorted(stats.segments, key=lambda s: -s.heat):
        print(
            f"  segment {segment.segment_id:>5}  heat {segment.heat:6.2f}  pages {segment.page_count:>4}  {segment.summary[:70]}"
        )


def note_missing(missing: Exception) -> None:
    print(f"note: {missing}", file=sys.stderr)


def empty_context(query: str) -> dict[str, Any]:
    """`retrieve --json` where there is no memory: `RetrievedContext` with every tier empty."""
    from memoryos.types import RetrievedContext
    from memoryos.validation import format_unix_timestamp

    empty = RetrievedContext(
        query=query,
        retrieved_at=format_unix_timestamp(time.time()),
        short_term_memory=[],
        retrieved_pages=[],
        retrieved_user_knowledge=[],
        retrieved_assistant_knowledge=[],
        user_profile="",
    )
    return {"space_exists": False, **empty.model_dump()}


def empty_stats(user_id: str, assistant_id: str) -> dict[str, Any]:
    """`stats --json` where there is no memory: `MemoryStats` at zero, with no embedding model (null)."""
    from memoryos.types import MemoryStats

    empty = MemoryStats(
        user_id=user_id,
        assistant_id=assistant_id,
        short_term_pages=0,
        mid_term_pages=0,
        archived_pages=0,
        segments=[],
        user_knowledge=0,
        assistant_knowledge=0,
        profile_versions=0,
        embedding_model="",
        embedding_dim=0,
    )
    return {"space_exists": False, **empty.model_dump(), "embedding_model": None, "embedding_dim": None}


def erased_summary(what: str, contents: dict[str, int] | None) -> str:
    """`forget`'s report: what was erased, with the counts it held."""
    if contents is None:
        return f"erased {what} (its store could not be read to count it)"
    counts = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in contents.items())
    return f"erased {what}: {counts}"
