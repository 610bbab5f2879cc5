"""LLM backends behind the `MemoryLLM` protocol, chosen from the configuration by `create_llm`; their
async form (`AsyncMemoryLLM`) for the scheduler comes from `as_async`, bounded by `LimitedLLM`."""

from memoryos.config import MemoryConfig
from memoryos.llm.async_adapters import CallSlots, InlineAsyncLLM, LimitedLLM, as_async, call_deadline_s
from memoryos.llm.base import AsyncMemoryLLM, MemoryLLM
from memoryos.llm.offline import OfflineLLM

__all__ = [
    "AsyncMemoryLLM",
    "CallSlots",
    "InlineAsyncLLM",
    "LimitedLLM",
    "MemoryLLM",
    "as_async",
    "call_deadline_s",
    "create_llm",
]


def create_llm(config: MemoryConfig) -> MemoryLLM:
    """`OpenAILLM` when an API key is configured, else the extractive `OfflineLLM`.

    The OpenAI backend is imported only when chosen, so offline use never loads the `openai` client.
    """
    if config.openai_api_key is None or not config.openai_api_key.get_secret_value():
        return OfflineLLM()
    from memoryos.llm.openai_backend import OpenAILLM

    return OpenAILLM(config)
