"""Request and response bodies of the HTTP API: pydantic models, the contract the typed client shares.

Results the engine returns (`RetrievedContext`, `PageList`, `WriteStatus`, ...) are sent as the engine's
own models, so the client gets the same types back. The models here add only the API's envelopes and the
checks a JSON body needs before it reaches the engine: every text must be encodable as UTF-8 (JSON allows
an escaped lone surrogate such as "\\udcff", which SQLite cannot store), and unknown fields are refused so
a misspelt one is not dropped without a word. Length and content rules stay the engine's (`max_text_chars`,
`validate_turn`): one place decides, the API reports its message.

This module imports pydantic and the engine's types only, never FastAPI: the client imports it.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from memoryos.errors import InvalidInputError
from memoryos.validation import MAX_ID_CHARS, validate_json_value, validate_key


def _first_lone_surrogate(text: str) -> int | None:
    for i, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            return i
    return None


def utf8_text(value: str) -> str:
    """`value` if it is valid Unicode text; a lone surrogate (from a JSON "\\udcff" escape) is refused."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        at = _first_lone_surrogate(value)
        raise ValueError(
            f"contains a lone UTF-16 surrogate at character {at}: not valid Unicode text"
        ) from None
    return value


def utf8_json(value: Any) -> Any:
    """`value` (any JSON) if every string in it, keys included, is valid Unicode text."""
    if isinstance(value, str):
        utf8_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            utf8_text(key)
            utf8_json(item)
    elif isinstance(value, list):
        for item in value:
            utf8_json(item)
    return value


ID_SCHEMA: dict[str, Any] = {
    "pattern": r"^[A-Za-z0-9](?:\.?[A-Za-z0-9_@+-])*\.?$",
    "minLength": 1,
    "maxLength": MAX_ID_CHARS,
}
"""`validate_id`'s rule (user and assistant ids) as the OpenAPI schema states it: a letter or digit, then
letters, digits and . _ @ + -, never two dots in a row (written without a lookahead, which JSON Schema's
regex dialect lacks). The engine still checks and words the error: one place decides."""
WRITE_ID_SCHEMA: dict[str, Any] = {"pattern": r"^[A-Za-z0-9_-]{1,64}$", "minLength": 1, "maxLength": 64}
"""`validate_key`'s rule (write ids) as the schema states it."""


def _write_id(value: str) -> str:
    return validate_key("write_id", value)


Text = Annotated[str, AfterValidator(utf8_text)]


def plain_json(value: Any) -> Any:
    """Before pydantic walks it: finite numbers, no NUL, nesting bounded (`validate_json_value`), so a
    body nested a thousand deep is one short error, not a field path of thousands of characters."""
    try:
        return validate_json_value("value", value)
    except InvalidInputError as error:
        raise ValueError(str(error).removeprefix("value: ")) from None


JsonObject = Annotated[dict[str, JsonValue], BeforeValidator(plain_json), AfterValidator(utf8_json)]
WriteId = Annotated[
    str,
    AfterValidator(_write_id),
    Field(
        description="1-64 characters of A-Z, a-z, 0-9, '_' or '-'.",
        json_schema_extra=WRITE_ID_SCHEMA,
    ),
]
TtlSeconds = Annotated[
    float, Field(gt=0, allow_inf_nan=False, description="Seconds until these pages expire (never returned).")
]

_TURN_EXAMPLE: dict[str, JsonValue] = {
    "user_input": "I adopted a dog called Pico.",
    "agent_response": "Lovely name! How old is Pico?",
    "timestamp": "2026-03-01 10:00:00",
    "meta_data": {"channel": "web"},
}


class Turn(BaseModel):
    """One exchange between the user and the assistant."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_TURN_EXAMPLE]})

    user_input: Text
    agent_response: Text
    timestamp: Text | None = Field(None, description="ISO 8601 or 'YYYY-MM-DD HH:MM:SS' (UTC); default now.")
    meta_data: JsonObject | None = Field(None, description="Stored and returned with the page.")


class AddMemoryRequest(Turn):
    """One exchange to remember. `write_id` makes a retry safe: the same id stores nothing twice."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{**_TURN_EXAMPLE, "write_id": "chat-42-turn-7"}]}
    )

    write_id: WriteId | None = None
    ttl_s: TtlSeconds | None = None


class AddBatchRequest(BaseModel):
    """Many exchanges stored as one write (one transaction, one embedding batch, one write id)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"turns": [_TURN_EXAMPLE], "write_id": "import-2026-03-01"}]},
    )

    turns: list[Turn] = Field(min_length=1)
    write_id: WriteId | None = None
    ttl_s: TtlSeconds | None = None


class WriteAccepted(BaseModel):
    """An acknowledged write: durable now, searchable once embedded (`GET .../writes/{write_id}`)."""

    write_id: str = Field(description="The caller's, or one the server chose; name it in reads to wait for.")
    page_ids: list[int]


class MemoryAdded(WriteAccepted):
    """One stored exchange."""

    page_id: int | None = Field(
        description="Its page id; null with `--redis-url`, where the owner assigns it when it applies the "
        "write (`GET .../writes/{write_id}` then tells it)."
    )


class RetrieveRequest(BaseModel):
    """A query over every tier. A read sees every write acknowledged before it; naming write ids (from
    another client, or a queue in service mode) waits until those are searchable, up to the timeout."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"query": "What is my dog called?", "top_k": 5, "wait_for_write_ids": ["chat-42-turn-7"]}
            ]
        },
    )

    query: Text
    top_k: int | None = Field(None, ge=1, le=1000, description="Pages returned (default: the space's).")
    knowledge_top_k: int | None = Field(None, ge=1, le=1000, description="Facts of each kind returned.")
    wait_for_write_ids: list[WriteId] = Field(
        default_factory=list,
        max_length=100,
        description="Writes this read must see, stored first. One the space never acknowledged (none stored "
        "under it, none acknowledged and still to be stored) is refused at once: 422 naming this field.",
    )
    wait_timeout_s: float = Field(
        10.0,
        gt=0,
        allow_inf_nan=False,
        description="How long to wait for those writes to be stored; then 503 with Retry-After. The read "
        "then waits for their vectors as for any write acknowledged before it.",
    )
    max_vector_wait_s: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="How long to wait for the vectors of the pages stored before this read (default: the "
        "server's read_vector_wait_s, 0.5 s), counting the wait for wait_for_write_ids: it bounds the read's "
        "latency. Pages still without one are ranked by their words and date alone, and counted in "
        "pages_without_vectors. A large value asks for every page by meaning.",
    )


class ResponseRequest(BaseModel):
    """Answer a query from memory with the LLM; the exchange is then remembered."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"query": "What is my dog called?", "relationship_with_user": "friend"}]
        },
    )

    query: Text
    relationship_with_user: Text = "friend"
    style_hint: Text = ""
    user_conversation_meta_data: JsonObject | None = None


class GeneratedResponse(BaseModel):
    response: str


class Profile(BaseModel):
    """The user's profile as consolidation last wrote it ("" before the first)."""

    profile: str


class PageUpdate(BaseModel):
    """Fields to correct on a stored page; those left out keep their value. The page keeps its id."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"user_input": "My dog is Pico."}]}
    )

    user_input: Text | None = None
    agent_response: Text | None = None
    meta_data: JsonObject | None = None


class FactUpdate(BaseModel):
    """A corrected fact: a new version replaces it; the old one stays in its history."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"text": "The user's dog is Pico."}]}
    )

    text: Text


class ReindexRequest(BaseModel):
    """Move the space to the embedding model its workers now serve (docs/service.md, Reindex)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"model": "BAAI/bge-m3"}]})

    model: Text = Field(min_length=1, max_length=200, description="The model the workers serve.")


class JobAccepted(BaseModel):
    """A queued job (rq): follow it at `status_url` (`GET /v1/jobs/{job_id}`)."""

    job_id: str
    kind: str
    status_url: str


class JobError(BaseModel):
    """Why a job failed, as the API would have answered the same call synchronously."""

    status: int
    code: str | None = None
    message: str
    field: str | None = None


class JobView(BaseModel):
    """A space job as its tenant sees it (`GET /v1/jobs/{job_id}`, `services/jobs/status.py`)."""

    job_id: str
    kind: Literal["export", "import", "reindex"]
    user_id: str
    assistant_id: str
    status: str
    """rq's status: queued, scheduled (waiting for a retry), started, finished, failed, stopped, canceled."""
    enqueued_at: datetime | None
    ended_at: datetime | None
    retries_left: int | None
    """Retries rq still holds for it while it has not ended (`null` once ended)."""
    result: dict[str, Any] | None = None
    """finished: an export's `size_bytes` and `download` path, an import's `ImportReport`, a reindex's
    `ReindexReport`."""
    error: JobError | None = None
    """failed: why."""


class ErrorBody(BaseModel):
    """Every error response: a stable code, a message for people, and the field at fault when one is."""

    error: str = Field(description="A stable code: invalid_input, not_found, unauthorized, rate_limited, ...")
    message: str
    field: str | None = None
