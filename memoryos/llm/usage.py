"""Per-operation accounting of LLM calls and tokens, shared by every backend.

Consolidation runs LLM calls on several threads at once (`llm_max_concurrency`), so the counter takes a
lock; readers get a copy they may keep or change.
"""

import math
import re
import threading
from typing import Literal

from memoryos.llm.base import OperationUsage

Operation = Literal["continuity", "chain_summary", "topic", "profile", "knowledge", "answer", "judge"]
"""The names usage is reported under: one per `MemoryLLM` method, and the eval judge's."""


class UsageCounter:
    """Calls, prompt tokens and completion tokens summed per operation name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_operation: dict[str, OperationUsage] = {}

    def record(self, operation: Operation, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            usage = self._by_operation.setdefault(operation, OperationUsage())
            usage.calls += 1
            usage.prompt_tokens += prompt_tokens
            usage.completion_tokens += completion_tokens

    def snapshot(self) -> dict[str, OperationUsage]:
        """Operations used so far (an operation never called is absent), as independent copies."""
        with self._lock:
            return {name: usage.model_copy() for name, usage in self._by_operation.items()}


_WIDE_CHARACTERS = re.compile(
    "[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf"
    "\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6\U00020000-\U0003fffd]"
)
"""East Asian wide and fullwidth ranges (Hangul, CJK, kana, fullwidth forms): one token each. A regex
rather than a per-character `unicodedata` loop, which cost more than the offline tasks themselves."""


def estimate_tokens(text: str) -> int:
    """A cheap offline token estimate for backends that report no usage.

    About 4 characters per token holds for English and most Latin-script text under GPT tokenizers;
    CJK and other wide characters cost about one token each, so they are counted one apiece. Good for
    accounting and budgets, not for packing a context window to the last token.
    """
    wide = len(_WIDE_CHARACTERS.findall(text))
    return wide + math.ceil((len(text) - wide) / 4)
