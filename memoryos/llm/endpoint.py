"""Whether an LLM endpoint is configured, and which key goes to it.

One rule for every caller (the backend's choice, the clients, the eval command deciding whether to answer
questions): an API key, or a base URL alone — a local vLLM, Ollama or llama.cpp server needs no key.
Before it lived here, `memoryos eval locomo` checked the key only, so a local server given by base URL
consolidated every conversation and then reported the run "offline (no LLM answers)". No `openai` import,
so offline use can ask without loading the client.
"""

from memoryos.config import MemoryConfig

PLACEHOLDER_API_KEY = "not-needed"
"""Sent as the key to an `openai_base_url` configured without one: local OpenAI-compatible servers (vLLM,
Ollama, llama.cpp) accept any key, but the `openai` client refuses to start without one."""


def configured_key(config: MemoryConfig) -> str:
    """The API key as configured; "" when there is none."""
    return config.openai_api_key.get_secret_value() if config.openai_api_key is not None else ""


def llm_endpoint_configured(config: MemoryConfig) -> bool:
    """True when LLM calls go to an OpenAI-compatible endpoint: a key, or a base URL without one."""
    return bool(configured_key(config) or config.openai_base_url)


def api_key(config: MemoryConfig) -> str | None:
    """The key to send: the configured one, `PLACEHOLDER_API_KEY` for a base URL without one, else None."""
    return configured_key(config) or (PLACEHOLDER_API_KEY if config.openai_base_url else None)
