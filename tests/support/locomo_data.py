"""The LoCoMo conversations the benchmark tests need, or why they skip.

LoCoMo (CC BY-NC 4.0) is not in this repository: `memoryos.eval.locomo.find_locomo_raw` looks at
`$MEMORYOS_LOCOMO`, the workplace's `../shared/data/locomo`, and `data/locomo10.json` (which
`LOCOMO_FETCH`, one curl line, downloads). Without any, those tests skip and `pytest -rs` prints the line.
`tests/data/own_conversation.json`, a conversation of our own, runs the same pipeline everywhere.
"""

from pathlib import Path

from memoryos.eval.locomo import LOCOMO_FETCH, find_locomo_raw


def locomo_source() -> Path | None:
    """The raw LoCoMo file found, else None."""
    return find_locomo_raw()


SKIP_REASON = (
    "needs LoCoMo's conversations: set MEMORYOS_LOCOMO to its raw JSON file, or fetch it into "
    f"data/locomo10.json with: {LOCOMO_FETCH}"
)
