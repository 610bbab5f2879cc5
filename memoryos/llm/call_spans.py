"""The span of each chat completion request, in the GenAI conventions: `chat {model}`, kind CLIENT, with
the model, the request's bounds, the reply's finish reason and the tokens counted.

One span per request sent, so a re-ask or a structured-output fallback shows as a second span under the
same parent (a consolidation pass, an answer's request). `memoryos.llm.task` says which memory task the
call serves. Prompts and replies are memory text: they go on the span (`gen_ai.input.messages`,
`gen_ai.output.messages`) only when `MEMORYOS_TRACE_MEMORY_TEXT` allows it. The httpx instrumentation adds
the HTTP request's own span below this one when tracing is on (`memoryos.tracing.setup`).

Tracing off, the span is the API's no-op one and nothing here reads the response.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from openai import APIStatusError
from openai.types.chat import ChatCompletion
from opentelemetry.trace import Span, SpanKind, StatusCode

from memoryos.tracing import memory_text_allowed, tracer
from memoryos.tracing.attributes import GEN_AI_OPERATION, GEN_AI_PROVIDER, LLM_TASK

CHAT = "chat"
PROVIDER = "openai"
"""The conventions' provider for the OpenAI API, and what an OpenAI-compatible server (vLLM, Ollama) is
traced as: `server.address` and `gen_ai.response.model` tell them apart."""

OPENAI_HOST = ("api.openai.com", 443)
"""Where the client sends requests when no base URL is configured."""


@dataclass(frozen=True)
class Endpoint:
    """Where the completions go, as the spans name it."""

    model: str
    address: str
    port: int


def endpoint_of(model: str, base_url: str | None) -> Endpoint:
    """The model and the server's host and port (OpenAI's without a base URL)."""
    if not base_url:
        return Endpoint(model, *OPENAI_HOST)
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Endpoint(model, parts.hostname or "", port)


def _messages(messages: list[dict[str, Any]]) -> str:
    """Chat messages as the conventions' `gen_ai.input.messages` JSON (role and text parts)."""
    return json.dumps(
        [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in messages]
    )


@contextmanager
def completion_span(endpoint: Endpoint, task_name: str, request: dict[str, Any]) -> Iterator[Span]:
    """The current span while one `chat.completions.create(**request)` runs; the caller hands the outcome
    to `record_completion`."""
    attributes: dict[str, Any] = {
        GEN_AI_OPERATION: CHAT,
        GEN_AI_PROVIDER: PROVIDER,
        "gen_ai.request.model": endpoint.model,
        "gen_ai.request.max_tokens": request["max_tokens"],
        "gen_ai.request.temperature": request["temperature"],
        "gen_ai.output.type": "json" if "response_format" in request else "text",
        "server.address": endpoint.address,
        "server.port": endpoint.port,
        LLM_TASK: task_name,
    }
    with tracer().start_as_current_span(
        f"{CHAT} {endpoint.model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if memory_text_allowed() and span.is_recording():
            span.set_attribute("gen_ai.input.messages", _messages(request["messages"]))
        yield span


def record_completion(span: Span, outcome: object) -> None:
    """What the request came back with: the response's model, id, finish reasons and token usage, or the
    error's type (its HTTP status for a status error; never its message, which may quote the prompt)."""
    if not span.is_recording():
        return
    if isinstance(outcome, Exception):
        error = (
            str(outcome.status_code) if isinstance(outcome, APIStatusError) else type(outcome).__qualname__
        )
        span.set_attribute("error.type", error)
        span.set_status(StatusCode.ERROR)
        return
    if not isinstance(outcome, ChatCompletion):  # a 200 that is not a completion (a proxy's page)
        span.set_attribute("error.type", "malformed_response")
        span.set_status(StatusCode.ERROR)
        return
    span.set_attribute("gen_ai.response.model", outcome.model)
    span.set_attribute("gen_ai.response.id", outcome.id)
    choices = outcome.choices or []
    span.set_attribute("gen_ai.response.finish_reasons", [str(c.finish_reason) for c in choices])
    usage = outcome.usage
    if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
    if memory_text_allowed() and choices:
        replies = [
            {"role": "assistant", "content": (c.message.content if c.message else "") or ""} for c in choices
        ]
        span.set_attribute("gen_ai.output.messages", _messages(replies))
