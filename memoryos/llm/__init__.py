"""LLM backends behind the `MemoryLLM` protocol, chosen from the configuration by `create_llm`; their
async form (`AsyncMemoryLLM`) for the scheduler comes from `as_async`, bounded by `LimitedLLM`."""

import logging
from urllib.parse import urlsplit

from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.llm.async_adapters import CallSlots, InlineAsyncLLM, LimitedLLM, as_async, call_deadline_s
from memoryos.llm.base import AsyncMemoryLLM, MemoryLLM
from memoryos.llm.offline.backend import OfflineLLM

log = logging.getLogger(__name__)

__all__ = [
    "PLACEHOLDER_API_KEY",
    "AsyncMemoryLLM",
    "CallSlots",
    "InlineAsyncLLM",
    "LimitedLLM",
    "MemoryLLM",
    "as_async",
    "call_deadline_s",
    "create_llm",
]


PLACEHOLDER_API_KEY = "not-needed"
"""Sent as the key to an `openai_base_url` configured without one: local OpenAI-compatible servers (vLLM,
Ollama, llama.cpp) accept any key, but the `openai` client refuses to start without one."""

_announced: set[tuple[str, str, str]] = set()
"""LLM choices already logged by this process: each is logged once, not once per space opened."""


def create_llm(config: MemoryConfig) -> MemoryLLM:
    """`OpenAILLM` when an API key or an `openai_base_url` is configured, else the extractive `OfflineLLM`.

    A base URL without a key is a local OpenAI-compatible server: it gets `PLACEHOLDER_API_KEY`. Only no
    key *and* no URL means offline. The choice is logged once per process at INFO (backend, model and the
    server's host; never the key). The OpenAI backend is imported only when chosen, so offline use never
    loads the `openai` client.
    """
    key = config.openai_api_key.get_secret_value() if config.openai_api_key is not None else ""
    if not key and not config.openai_base_url:
        _announce("offline", "extractive", "no openai_api_key and no openai_base_url")
        return OfflineLLM()
    from memoryos.llm.openai_backend import OpenAILLM

    host = _host(config.openai_base_url) if config.openai_base_url else "api.openai.com"
    if not key:
        config = config.model_copy(update={"openai_api_key": SecretStr(PLACEHOLDER_API_KEY)})
    _announce("OpenAI-compatible", config.llm_model, host + ("" if key else ", no API key"))
    return OpenAILLM(config)


def _host(url: str) -> str:
    """`host[:port]` of a URL, without any user or password it carries."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    host = parts.hostname or url
    return f"{host}:{parts.port}" if parts.port else host


def _announce(backend: str, model: str, where: str) -> None:
    choice = (backend, model, where)
    if choice not in _announced:
        _announced.add(choice)
        log.info("LLM backend: %s, model %s (%s)", backend, model, where)
