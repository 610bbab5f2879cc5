"""The configured OpenAI-compatible endpoint: its sync and async clients, and the reading of a completion.

Both clients take their key, base URL, per-request timeout and retries from `client_options`, so the sync
backend, its async view and the eval judge always talk to the endpoint the same way. `CompletionCodec` is
what a completion call means apart from the call itself (what is sent, with its bounds; whether the
endpoint takes structured outputs; how the response becomes reply text and counted usage, or an
`LLMError`), shared by the sync and async paths: they only send the requests `CompletionCodec.exchange`
yields.
"""

import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, cast

from openai import APIStatusError, AsyncOpenAI, OpenAI, OpenAIError
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.call_spans import completion_span, endpoint_of, record_completion
from memoryos.llm.chat_tasks import ChatTask
from memoryos.llm.endpoint import api_key
from memoryos.llm.parsing import strip_think
from memoryos.llm.usage import Operation, UsageCounter, estimate_tokens

log = logging.getLogger(__name__)

CALL_ERRORS = (OpenAIError, ValueError)
"""What a failed completion call raises: the client's errors once its retries are spent, and ValueError
for a 200 whose JSON body does not decode."""

_MAX_ERROR_CHARS = 300

REASK_TEMPERATURE = 0.5
"""The least temperature of the re-ask after an unparseable reply: at the memory tasks' temperature 0 a
server decodes greedily, and would send the same unparseable reply again."""

_FORMAT_REFUSALS = (400, 422)
"""Statuses with which endpoints without structured outputs refuse `response_format` (OpenAI-compatible
servers answer 400; FastAPI-based ones validate the body and answer 422)."""

T = TypeVar("T")

Outcome = object
"""What a driver sends back for a request: the `create` call's return value, or the `CALL_ERRORS`
exception it raised."""

CompletionExchange = Generator[dict[str, Any], Outcome, T]
"""Yields the keyword arguments of each `chat.completions.create` call, receives its outcome, returns
the task's parsed result or raises `LLMError`."""


@dataclass(frozen=True)
class CallBounds:
    """What one task's requests are held to: the completion's token cap and the sampling temperature."""

    max_tokens: int
    temperature: float


def call_bounds(config: MemoryConfig) -> dict[Operation, CallBounds]:
    """Each task's bounds from the configuration (the settings' descriptions say why each is what it is)."""
    memory = config.llm_temperature_memory
    return {
        "continuity": CallBounds(config.llm_max_tokens_continuity, memory),
        "chain_summary": CallBounds(config.llm_max_tokens_chain_summary, memory),
        "topic": CallBounds(config.llm_max_tokens_topic, memory),
        "profile": CallBounds(config.llm_max_tokens_profile, memory),
        "knowledge": CallBounds(config.llm_max_tokens_knowledge, memory),
        "answer": CallBounds(config.llm_max_tokens_answer, config.llm_temperature_answer),
    }


class ClientOptions(TypedDict):
    api_key: str
    base_url: str | None
    timeout: float
    max_retries: int


def client_options(config: MemoryConfig, purpose: str) -> ClientOptions:
    """Key, base URL, per-request timeout and retries (with the client's backoff) for the configured
    endpoint; a base URL without a key gets the placeholder key. `purpose` names the caller in the error
    raised when neither is configured."""
    key = api_key(config)
    if key is None:
        raise LLMError(f"{purpose} needs openai_api_key or openai_base_url")
    return ClientOptions(
        api_key=key,
        base_url=config.openai_base_url,
        timeout=config.llm_timeout_s,
        max_retries=config.llm_max_retries,
    )


def openai_client(config: MemoryConfig, purpose: str) -> OpenAI:
    """The sync client for the configured endpoint; safe to share between threads."""
    return OpenAI(**client_options(config, purpose))


def async_openai_client(config: MemoryConfig, purpose: str) -> AsyncOpenAI:
    """The async client for the configured endpoint. Its pooled connections belong to the event loop that
    opened them: use it from one loop only (`AsyncOpenAILLM` enforces that)."""
    return AsyncOpenAI(**client_options(config, purpose))


def ask_blocking(
    client: OpenAI,
    codec: "CompletionCodec",
    task: ChatTask[T],
    on_response: Callable[[object], None] | None = None,
) -> T:
    """The task's result, sending with blocking calls each request the codec's exchange yields (its
    re-ask and structured-output fallback), each in its own span (`call_spans`). `on_response` sees every
    response the server gave, for a caller that records each call (the answer bench logs tokens and finish
    reasons per call)."""
    exchange = codec.exchange(task)
    try:
        request = next(exchange)
        while True:
            with completion_span(codec.endpoint, task.operation, request) as span:
                try:
                    outcome: object = client.chat.completions.create(**request)
                except CALL_ERRORS as err:
                    outcome = err
                else:
                    if on_response is not None:
                        on_response(outcome)
                record_completion(span, outcome)
            request = exchange.send(outcome)
    except StopIteration as done:
        return cast(T, done.value)


class CompletionCodec:
    """The I/O-free halves of one chat completion for a task, counted in one `UsageCounter`.

    One codec serves a backend's sync path and its async view, so both count into the same usage and
    share what was learnt about the endpoint's structured outputs: unknown until the first request with
    `response_format` is answered; a success means supported for good, a refusal (below) unsupported
    for good, and from then on the JSON tasks are read from free text as they were before.
    """

    def __init__(self, config: MemoryConfig, bounds: Mapping[Operation, CallBounds] | None = None) -> None:
        self.model = config.llm_model
        self.endpoint = endpoint_of(config.llm_model, config.openai_base_url)
        """The model and server each request's span names (`call_spans`)."""
        self.usage = UsageCounter()
        self._bounds = call_bounds(config) if bounds is None else bounds
        """Each task's bounds: the memory tasks' from the configuration unless a caller with tasks of its
        own (the eval judge) gives them."""
        self.structured_outputs: bool | None = None
        """Whether the endpoint takes `response_format` with a JSON schema; None until a reply says."""

    def exchange(self, task: ChatTask[T]) -> CompletionExchange[T]:
        """The task's whole conversation: its re-ask rule (`ChatTask.exchange`), each reply's request
        and the structured-output fallback."""
        replies = task.exchange()
        attempt = next(replies)
        while True:
            text = yield from self._reply(task, attempt)
            try:
                attempt = replies.send(text)
            except StopIteration as done:
                return cast(T, done.value)

    def request(self, task: ChatTask[Any], attempt: int) -> dict[str, Any]:
        """The `create` arguments of one attempt: bounded, sampled hotter on a re-ask, with the task's
        schema unless the endpoint is known to refuse it."""
        bounds = self._bounds[task.operation]
        temperature = bounds.temperature if attempt == 0 else max(bounds.temperature, REASK_TEMPERATURE)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": cast(list[ChatCompletionMessageParam], task.messages),
            "max_tokens": bounds.max_tokens,
            "temperature": temperature,
        }
        if task.schema is not None and self.structured_outputs is not False:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": task.operation, "schema": task.schema, "strict": True},
            }
        return request

    def failure(self, task: ChatTask[Any], err: Exception) -> LLMError:
        """The `LLMError` for a call that raised one of `CALL_ERRORS`: type and message, cut short."""
        return LLMError(f"LLM call {task.operation!r} failed: {type(err).__name__}: {err}"[:_MAX_ERROR_CHARS])

    def _reply(self, task: ChatTask[Any], attempt: int) -> Generator[dict[str, Any], Outcome, str]:
        """One reply's text. While support is unknown, a request with `response_format` that fails as a
        refusal would (`_may_refuse_format`) is sent once more without it; only when that one is answered
        is the endpoint taken not to support structured outputs, so an error with another cause (a prompt
        over the context window also answers 400) is raised as it is and teaches nothing."""
        request = self.request(task, attempt)
        outcome = yield request
        if isinstance(outcome, Exception):
            if "response_format" not in request or not self._may_refuse_format(outcome):
                raise self.failure(task, outcome) from outcome
            outcome = yield {key: value for key, value in request.items() if key != "response_format"}
            if isinstance(outcome, Exception):
                raise self.failure(task, outcome) from outcome
            self._learn_structured(False, task)
        elif "response_format" in request:
            self._learn_structured(True, task)
        return self.reply_text(task, outcome, request["max_tokens"])

    def _may_refuse_format(self, err: Exception) -> bool:
        """True for an error an endpoint without structured outputs answers `response_format` with, while
        support is still unknown: 400 or 422, or any status whose message names it."""
        if self.structured_outputs is not None or not isinstance(err, APIStatusError):
            return False
        message = str(err)
        return err.status_code in _FORMAT_REFUSALS or "response_format" in message or "json_schema" in message

    def _learn_structured(self, supported: bool, task: ChatTask[Any]) -> None:
        """Remember what a reply showed; a success is proof and wins over a refusal seen meanwhile."""
        if supported:
            self.structured_outputs = True
        elif self.structured_outputs is None:
            self.structured_outputs = False
            log.info(
                "the LLM endpoint refused response_format: JSON replies are parsed from free text",
                extra={"operation": task.operation, "model": self.model},
            )

    def reply_text(self, task: ChatTask[Any], response: object, max_tokens: int) -> str:
        """The reply text without reasoning blocks; the call is counted under the task's operation.

        A reply cut at `max_tokens` raises `LLMError` when the task stores it whole (a summary, the
        profile: a cut one would be stored as if complete) or when nothing is left once an unclosed
        reasoning block is removed (a reasoning model needs a larger cap); the error names the setting.
        Only the operation, model and token counts are logged (at DEBUG), never the text.
        """
        # A 200 that is not JSON (a proxy's HTML page) comes back as a str, and missing fields as None,
        # whatever the type hints say.
        if (
            not isinstance(response, ChatCompletion)
            or not response.choices
            or not response.choices[0].message
        ):
            raise LLMError(f"LLM call {task.operation!r} got a malformed response")
        content = response.choices[0].message.content or ""
        usage = response.usage
        if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
            prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        else:  # Some compatible servers send no usage, or an empty one.
            prompt_tokens = sum(estimate_tokens(message["content"]) for message in task.messages)
            completion_tokens = estimate_tokens(content)
        self.usage.record(task.operation, prompt_tokens, completion_tokens)
        log.debug(
            "LLM call done",
            extra={
                "operation": task.operation,
                "model": self.model,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
            },
        )
        text = strip_think(content)
        if response.choices[0].finish_reason == "length":
            if task.whole or not text:
                raise LLMError(
                    f"LLM call {task.operation!r}: the reply was cut at max_tokens={max_tokens} "
                    f"(llm_max_tokens_{task.operation}; a reasoning model needs more)"
                )
            log.warning("LLM reply cut at max_tokens", extra={"operation": task.operation})
        return text
