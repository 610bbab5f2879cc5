"""LLM backends behind the `MemoryLLM` protocol, chosen from the configuration by `create_llm`; their
async form (`AsyncMemoryLLM`) for the scheduler comes from `as_async`, bounded by `LimitedLLM`."""

import logging
from urllib.parse import urlsplit

from memoryos.config import MemoryConfig
from memoryos.llm.async_adapters import CallSlots, InlineAsyncLLM, LimitedLLM, as_async, call_deadline_s
from memoryos.llm.base import AsyncMemoryLLM, MemoryLLM
from memoryos.llm.endpoint import PLACEHOLDER_API_KEY, configured_key, llm_endpoint_configured
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
    "llm_endpoint_configured",
]

_announced: set[tuple[str, str, str]] = set()
"""LLM choices already logged by this process: each is logged once, not once per space opened."""


def create_llm(config: MemoryConfig) -> MemoryLLM:
    """`OpenAILLM` when an API key or an `openai_base_url` is configured, else the extractive `OfflineLLM`.

    A base URL without a key is a local OpenAI-compatible server: it gets `PLACEHOLDER_API_KEY`
    (`llm/endpoint.py`). Only no key *and* no URL means offline. The choice is logged once per process at
    INFO (backend, model and the server's host; never the key). The OpenAI backend is imported only when chosen, so offline use never
    loads the `openai` client.
    """
    if not llm_endpoint_configured(config):
        _announce("offline", "extractive", "no openai_api_key and no openai_base_url")
        return OfflineLLM()
    from memoryos.llm.openai_backend import OpenAILLM

    host = _host(config.openai_base_url) if config.openai_base_url else "api.openai.com"
    key = configured_key(config)
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
