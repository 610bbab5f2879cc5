"""Span attribute names and the values that need care: ids pseudonymised unless allowed, memory text only
when allowed (`TracingSettings`).

The GenAI conventions name what they cover (`gen_ai.operation.name`, `gen_ai.memory.store.id`,
`gen_ai.memory.record.id`, `gen_ai.usage.*`); what they do not cover is `memoryos.*`. A memory store is one
space (tenant, user, assistant): its id is the pseudonym of the space's name, since the name holds the
user id.
"""

import hashlib
import hmac
import itertools
import threading
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.trace import Span

from memoryos.tracing.settings import TracingSettings

# GenAI memory conventions (semantic-conventions-genai, "Memory" spans).
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
MEMORY_STORE_ID = "gen_ai.memory.store.id"
MEMORY_RECORD_ID = "gen_ai.memory.record.id"
MEMORY_RECORD_COUNT = "gen_ai.memory.record.count"
MEMORY_QUERY_TEXT = "gen_ai.memory.query.text"
"""Opt-in (`memory_text`): the query of a `search_memory`."""
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
"""The embedding model a batch ran on (its name as the engine's hello gives it)."""
EMBEDDINGS = "embeddings"
"""GenAI's operation name of an embedding call: the batcher's `embed` and the engine's `embedding batch`."""

CREATE_MEMORY = "create_memory"
"""A write of turns (`POST .../turns`, the queued `AddTurns`)."""
UPDATE_MEMORY = "update_memory"
DELETE_MEMORY = "delete_memory"
DELETE_MEMORY_STORE = "delete_memory_store"
"""A forget of the whole space."""
SEARCH_MEMORY = "search_memory"
"""A retrieve."""

# Ours.
TENANT_ID = "memoryos.tenant.id"
USER_ID = "memoryos.user.id"
ASSISTANT_ID = "memoryos.assistant.id"
SHARD = "memoryos.shard"
BATCH_SIZE = "memoryos.batch.size"
"""Writes (or texts, for the embedding engine) a batch span applied; its links name each one's trace."""
BATCH_TOKENS = "memoryos.batch.tokens"
"""Tokens of an embedding batch's texts: estimated in the batcher, counted by the model's tokenizer in the
engine."""
BATCH_PADDED_TOKENS = "memoryos.batch.padded_tokens"
"""Tokens the model ran for an engine batch: its texts times its longest (what padding costs)."""
QUEUE_WAIT_S = "memoryos.queue.wait_s"
"""Seconds a write waited in its stream between the API's enqueue and the worker's apply."""
WRITE_ID = "memoryos.write.id"
"""A write's id, pseudonymised like the space's ids (a caller chooses it, and may put a name in it)."""
OWNER_CALL = "memoryos.owner_call.name"
"""Which owner call a read or an edit in Redis mode is (`retrieve`, `write_status`, ...)."""
LLM_TASK = "memoryos.llm.task"
"""Which memory task an LLM call serves (`profile`, `knowledge`, `answer`, ...: `memoryos.llm.usage`)."""

ERROR_TYPE = "error.type"
"""A failed span's error: the exception's class name, never its message (it may quote memory text)."""

# The messaging conventions, for the write queue (a Redis stream) and the owner calls (a Redis list).
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_DESTINATION = "messaging.destination.name"
"""The stream or list key: the namespace and the shard, never a space's ids."""
MESSAGING_OPERATION = "messaging.operation.type"
MESSAGING_MESSAGE_ID = "messaging.message.id"
"""The stream entry's id (Redis's millisecond clock and a sequence number)."""

_settings = TracingSettings.model_construct(raw_ids=False, id_hash_key=None, memory_text=False)
"""The rules in force: the defaults until `use_settings` (called by `configure_tracing`)."""
_settings_lock = threading.Lock()


def use_settings(settings: TracingSettings) -> None:
    """Make `settings` the rules every helper here follows, for the whole process."""
    global _settings
    with _settings_lock:
        _settings = settings


def memory_text_allowed() -> bool:
    """Whether a span may carry memory text (turns, queries, prompts, replies): `MEMORYOS_TRACE_MEMORY_TEXT`."""
    return _settings.memory_text


def pseudonym(value: str) -> str:
    """`value` as spans show an id: itself with `raw_ids`, else the first 16 hex digits (64 bits) of its
    HMAC-SHA256 under `id_hash_key` (plain SHA-256 without a key): stable, so one user's spans can be
    found by hashing their id the same way, and not the id itself."""
    settings = _settings
    if settings.raw_ids:
        return value
    data = value.encode()
    if settings.id_hash_key is not None:
        digest = hmac.new(settings.id_hash_key.get_secret_value().encode(), data, hashlib.sha256)
        return digest.hexdigest()[:16]
    return hashlib.sha256(data).hexdigest()[:16]


def space_attributes(tenant: str, user_id: str, assistant_id: str) -> dict[str, str]:
    """The attributes naming one space: its store id and its three ids, each pseudonymised unless allowed."""
    return {
        MEMORY_STORE_ID: pseudonym(f"{tenant}/{user_id}/{assistant_id}"),
        TENANT_ID: pseudonym(tenant),
        USER_ID: pseudonym(user_id),
        ASSISTANT_ID: pseudonym(assistant_id),
    }


def with_memory_text(attributes: Mapping[str, object], texts: Mapping[str, str]) -> dict[str, object]:
    """`attributes` plus `texts` (attribute name -> memory text) when memory text is allowed, else
    `attributes` alone: the one gate every text goes through."""
    if not memory_text_allowed():
        return dict(attributes)
    return {**attributes, **texts}


URL_PATH_ATTRIBUTES = ("http.target", "url.path")
"""Where the HTTP instrumentations put a request's path (old and current conventions)."""
URL_FULL_ATTRIBUTES = ("http.url", "url.full")
"""Where they put the whole URL, query included."""
URL_QUERY_ATTRIBUTE = "url.query"
_ID_SEGMENTS = frozenset({"users", "assistants"})
"""Path segments the next segment of which is a user's or an assistant's id (`/v1/users/{user_id}/...`)."""


def path_ids(path: str) -> dict[str, str]:
    """The user and assistant ids a MemoryOS API path names, as span attributes (pseudonymised)."""
    segments = path.split("/")
    found = {}
    for name, value in itertools.pairwise(segments):
        if name == "users" and value:
            found[USER_ID] = pseudonym(value)
        elif name == "assistants" and value:
            found[ASSISTANT_ID] = pseudonym(value)
    return found


def redacted_path(path: str) -> str:
    """`path` with the segment after each `users` / `assistants` pseudonymised (as is with `raw_ids`)."""
    if _settings.raw_ids:
        return path
    segments = path.split("/")
    for index in range(1, len(segments)):
        if segments[index - 1] in _ID_SEGMENTS and segments[index]:
            segments[index] = pseudonym(segments[index])
    return "/".join(segments)


def redacted_url(url: str) -> str:
    """`url` with its path's ids pseudonymised and its query dropped unless memory text is allowed (a
    retrieve's `?query=` is memory text)."""
    parts = urlsplit(url)
    query = parts.query if memory_text_allowed() else ""
    return urlunsplit((parts.scheme, parts.netloc, redacted_path(parts.path), query, ""))


def redact_url_attributes(span: Span) -> None:
    """Rewrite the URL attributes an HTTP instrumentation gave `span` by the rules above: the hook every
    HTTP span goes through (the API's server spans, the httpx client spans), since the instrumentations
    record the raw path and query."""
    attributes = getattr(span, "attributes", None)  # the SDK's spans expose them; no-op spans do not
    if not attributes or not span.is_recording():
        return
    for name in URL_PATH_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, str):
            span.set_attribute(name, redacted_path(value.split("?", 1)[0]))
    for name in URL_FULL_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, str):
            span.set_attribute(name, redacted_url(value))
    if URL_QUERY_ATTRIBUTE in attributes and not memory_text_allowed():
        span.set_attribute(URL_QUERY_ATTRIBUTE, "")
