"""Ops: the only way a memory space changes.

An op is plain data. Planners (consolidation, the facade, a service worker) do the slow work — LLM calls,
embeddings — and hand the results to `MemorySpace.apply(op)`, which is deterministic and does no I/O
beyond the store. That split lets a worker batch model work across many spaces and keeps every policy
decision testable with hand-made vectors.

Ops travel between processes (a queue carries them from the planner to the space's worker), so each one
serializes to JSON and back without loss: `op_to_json` / `op_from_json`. An op carries the format version
it was written in, an id, and the time it was planned, so `apply` needs nothing but the op. Vectors go on
the wire as base64 float16 — the store's precision — and are rounded to it when the op is built, so the
op a worker receives is bit-identical to the one the planner made.
"""

import base64
import binascii
import math
import time
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    StringConstraints,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import CoreSchema, core_schema

from memoryos.ids import new_id
from memoryos.storage.records.vector_blobs import STORED_DTYPE, STORED_MAX, at_stored_precision
from memoryos.types import KnowledgeKind, Turn

OP_FORMAT_VERSION = 3
"""The op wire format this MemoryOS writes and the newest it reads. Bump it when an op's fields change
meaning; an older MemoryOS then refuses the newer ops instead of applying them wrongly.

Version 2: the lifecycle ops (edits, deletes, TTL, rebuilds of derived texts) and provenance
fields on `AddKnowledge` and `UpdateProfile`; version-1 ops read unchanged.
Version 3: `DeferAnalysis`; version-1 and 2 ops read unchanged."""


# --- ids --------------------------------------------------------------------------------------------------
Key = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
"""An id that travels with an op (op id, write id): 1–64 characters of [A-Za-z0-9_-], safe in a queue
key, a log line and a SQLite column without quoting."""


# --- vectors on the wire ----------------------------------------------------------------------------------
_WIRE_DTYPE = np.dtype(STORED_DTYPE).newbyteorder("<")
"""Little-endian float16 whatever the host: the bytes inside `b64`."""


def _wire_json_schema(ndim: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "dtype": {"const": "float16"},
            "shape": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0},
                "minItems": ndim,
                "maxItems": ndim,
            },
            "b64": {"type": "string", "contentEncoding": "base64"},
        },
        "required": ["dtype", "shape", "b64"],
        "additionalProperties": False,
        "description": "float16 little-endian bytes in row-major order, base64-encoded",
    }


def _from_wire(field: str, wire: dict[Any, Any], ndim: int) -> np.ndarray:
    """The array a wire dict describes; every part of it checked, since it comes from another process."""
    if set(wire) != {"dtype", "shape", "b64"}:
        raise ValueError(f"{field}: a wire vector has exactly the keys dtype, shape, b64; got {sorted(wire)}")
    if wire["dtype"] != "float16":
        raise ValueError(f"{field}: wire dtype must be 'float16', got {wire['dtype']!r}")
    shape = wire["shape"]
    if (
        not isinstance(shape, list | tuple)
        or len(shape) != ndim
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise ValueError(f"{field}: wire shape must be {ndim} non-negative integers, got {shape!r}")
    if not isinstance(wire["b64"], str):
        raise ValueError(f"{field}: wire b64 must be a string")
    try:
        raw = base64.b64decode(wire["b64"], validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"{field}: wire b64 is not valid base64 ({error})") from None
    expected = math.prod(shape) * _WIRE_DTYPE.itemsize
    if len(raw) != expected:
        raise ValueError(f"{field}: wire b64 holds {len(raw)} bytes, shape {list(shape)} needs {expected}")
    return np.frombuffer(raw, dtype=_WIRE_DTYPE).reshape(shape)


def _to_array(field: str, value: Any, ndim: int) -> np.ndarray:
    if isinstance(value, dict):
        return _from_wire(field, value, ndim)
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list | tuple):
        try:
            return np.asarray(value)
        except (ValueError, TypeError) as error:  # ragged rows
            raise ValueError(f"{field}: not a rectangular array of numbers ({error})") from None
    raise ValueError(
        f"{field}: expected an ndarray, nested lists of numbers or a wire dict, got {type(value).__name__}"
    )


def _stored_vectors(field: str, value: Any, ndim: int) -> np.ndarray:
    """`value` as a read-only float32 array of `ndim` dimensions at the store's precision, or ValueError.

    Rounding here, not in `apply`, makes the op the planner holds equal to the one a worker decodes, and
    read-only keeps a frozen op frozen: nobody can change its vectors after it was logged or sent."""
    array = _to_array(field, value, ndim)
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{field}: expected numbers, got dtype {array.dtype}")
    if array.ndim != ndim:
        expected = "(n, dim)" if ndim == 2 else "(dim,)"
        raise ValueError(f"{field}: expected a {ndim}-D array of shape {expected}, got shape {array.shape}")
    if array.size:
        if not np.isfinite(array).all():
            raise ValueError(f"{field}: NaN or infinite values")
        if np.abs(array).max() > STORED_MAX:
            raise ValueError(f"{field}: values beyond the float16 range (±{STORED_MAX:g})")
    stored = np.ascontiguousarray(at_stored_precision(array))
    stored.flags.writeable = False
    return stored


def _to_wire(array: np.ndarray) -> dict[str, Any]:
    return {
        "dtype": "float16",
        "shape": [int(n) for n in array.shape],
        "b64": base64.b64encode(np.ascontiguousarray(array, dtype=_WIRE_DTYPE).tobytes()).decode("ascii"),
    }


def _array_schema(ndim: int) -> GetPydanticSchema:
    def validate(value: Any, info: core_schema.ValidationInfo) -> np.ndarray:
        return _stored_vectors(info.field_name or "vector", value, ndim)

    def schema(_source: Any, _handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.with_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(_to_wire, when_used="json"),
        )

    return GetPydanticSchema(schema)


Vectors = Annotated[
    np.ndarray,
    _array_schema(2),
    WithJsonSchema(_wire_json_schema(2)),
    Field(description="float32 at the store's (float16) precision, shape (n, dim), rows L2-normalized"),
]
"""A matrix of vectors in an op. Accepts an ndarray, nested lists of numbers or the wire dict
`{"dtype": "float16", "shape": [n, dim], "b64": ...}`; holds a read-only float32 array already rounded as
the store keeps it; serializes to the wire dict in JSON mode (Python mode keeps the ndarray)."""

Vector = Annotated[
    np.ndarray,
    _array_schema(1),
    WithJsonSchema(_wire_json_schema(1)),
    Field(description="float32 at the store's (float16) precision, shape (dim,)"),
]
"""One vector in an op: `Vectors` with shape (dim,)."""


# --- ops --------------------------------------------------------------------------------------------------
class Op(BaseModel):
    """What every op carries besides its payload: enough for a queue to move it and a worker to apply it.

    Frozen (and its vectors read-only) because an op is a record of a decision already made: the op
    applied must be the op that was planned, logged and sent. Unknown fields are refused rather than
    dropped, so a field a newer planner added cannot vanish silently on the way.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str  # declared here so it leads the JSON; each op narrows it to its own Literal
    version: int = Field(
        OP_FORMAT_VERSION, strict=True, description="The op format version the op was written in."
    )
    op_id: Key = Field(default_factory=new_id, description="Unique per op (32 random hex digits by default).")
    at: float = Field(
        default_factory=time.time,
        allow_inf_nan=False,
        description="Unix seconds when the op was planned; apply uses it, never a clock of its own.",
    )

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        _check_version(version)
        return version


def _check_version(version: int) -> None:
    if version > OP_FORMAT_VERSION:
        raise ValueError(
            f"version: op format {version} is newer than this MemoryOS reads ({OP_FORMAT_VERSION}); "
            "upgrade MemoryOS to apply it"
        )
    if version < 1:
        raise ValueError(f"version: op format {version} does not exist (versions start at 1)")


PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A duration in seconds, > 0 and finite."""


class AddTurns(Op):
    """Append exchanges to short-term memory, one vector per turn.

    Without vectors the pages are stored pending: durable and listed in STM at once, embedded later by
    `EmbedPages`. That is how `add_memory` acknowledges a write before the model has seen it.

    `write_id` is the idempotency key of one acknowledged write: a queue may deliver the same write twice
    (a new `op_id`, the same `write_id`), and its pages must be stored once. A service sets it from the
    client's write id; in-process callers leave the fresh default.
    """

    kind: Literal["add_turns"] = "add_turns"
    turns: list[Turn]
    vectors: Vectors | None = None
    write_id: Key = Field(default_factory=new_id, description="Idempotency key of the write.")
    ttl_s: PositiveSeconds | None = Field(
        None, description="The pages expire `ttl_s` after `at`; None: the space's TTL, if it has one."
    )


class EmbedPages(Op):
    """Attach vectors to pending pages, which makes them searchable."""

    kind: Literal["embed_pages"] = "embed_pages"
    page_ids: list[int]
    vectors: Vectors


class LinkChain(Op):
    """Attach a page leaving STM to the dialogue chain of the previously moved page, or start a new one.

    `chain_summary` becomes the `meta_info` of every page of the chain. `previous_page_id` is the last
    chained page the planner compared the page with (None: none yet): the LLM's "continues" verdict holds
    only against that page, so `apply` treats the op as stale if another page was chained since.
    """

    kind: Literal["link_chain"] = "link_chain"
    page_id: int
    continues_previous: bool
    chain_summary: str
    previous_page_id: int | None = None


class FileTopic(Op):
    """Move pages from STM into the segment whose topic matches, or into a new segment.

    `apply` decides merge-or-new from the current segments (cosine + keyword Jaccard against
    `mid_term_similarity_threshold`), then archives the coldest segments over capacity. `at` is when the
    pages were filed: the segment's recency, from which its heat cools.
    """

    kind: Literal["file_topic"] = "file_topic"
    page_ids: list[int]
    summary: str
    keywords: list[str]
    vector: Vector = Field(description="shape (dim,): the topic's embedding")


class RecordVisits(Op):
    """Count a retrieval hit on segments; kept apart from retrieval so reads never write.

    `at` is when the visits happened (the retrieval that buffered them), which warms the segments.
    """

    kind: Literal["record_visits"] = "record_visits"
    segment_ids: list[int]


class UpdateProfile(Op):
    """Store a new version of the user profile; older versions stay as history.

    `rebuild` marks the profile rebuilt from the remaining pages after a page under it was deleted or
    edited: every older version goes (each may carry the removed text) and the rebuild is no longer due."""

    kind: Literal["update_profile"] = "update_profile"
    text: str
    source_segment_id: int | None = None
    source_page_ids: list[int] = Field(default_factory=list, description="The pages merged into it.")
    rebuild: bool = False


class AddKnowledge(Op):
    """Add facts; a fact within `knowledge_dedup_similarity` of a stored one replaces it (old kept in history)."""

    kind: Literal["add_knowledge"] = "add_knowledge"
    knowledge_kind: KnowledgeKind
    texts: list[str]
    vectors: Vectors
    timestamp: str
    source_page_ids: list[int] = Field(
        default_factory=list, description="Provenance: the pages the facts were extracted from."
    )


class MarkAnalyzed(Op):
    """A segment's new pages were promoted to long-term memory: reset its heat counters."""

    kind: Literal["mark_analyzed"] = "mark_analyzed"
    segment_id: int
    page_ids: list[int]


class DeferAnalysis(Op):
    """The guards refused part of what the LLM proposed from these pages: they stay unanalyzed, each with
    one more attempt counted, and the segment keeps its heat, so the next pass analyses them again."""

    kind: Literal["defer_analysis"] = "defer_analysis"
    segment_id: int
    page_ids: list[int]


class DeletePages(Op):
    """Remove pages: text, vector, full-text entries, and every fact whose only sources they were.

    Chains and segments that held them are rewritten by the next consolidation (removed when emptied),
    and if the profile drew on one of them it is rebuilt there too. `reason` is kept in the op log."""

    kind: Literal["delete_pages"] = "delete_pages"
    page_ids: list[int] = Field(min_length=1)
    reason: Literal["user", "expired"] = "user"


class UpdatePage(Op):
    """Replace a page's text and meta data. The page keeps its id and place, waits for a new vector,
    and is analyzed again; what was derived from its old text is treated as for a delete."""

    kind: Literal["update_page"] = "update_page"
    page_id: int
    user_input: str
    agent_response: str
    meta_data: dict[str, Any] = Field(default_factory=dict)


class DeleteFacts(Op):
    """Remove facts with every version of their history (text and vector)."""

    kind: Literal["delete_facts"] = "delete_facts"
    entry_ids: list[int] = Field(min_length=1)
    reason: Literal["user", "expired"] = "user"


class UpdateFact(Op):
    """Correct a fact: a new version (origin "user") replaces it; the old one stays as its history."""

    kind: Literal["update_fact"] = "update_fact"
    entry_id: int
    text: str
    vector: Vector
    timestamp: str


class ExpireDue(Op):
    """Erase every page and fact whose expiry is at or before `at`, as `DeletePages` and `DeleteFacts`
    with reason "expired". Carries no ids, so a maintenance job that cannot open the space (the service's
    rq sweep) can still ask its owner for it."""

    kind: Literal["expire_due"] = "expire_due"


class SetSpaceTTL(Op):
    """How long pages written from now on are kept (None: forever). Pages already stored keep theirs."""

    kind: Literal["set_space_ttl"] = "set_space_ttl"
    ttl_s: PositiveSeconds | None


class ForgetSpace(Op):
    """Erase every item of the space — pages, facts and their history, profile versions, segments,
    chains — leaving an empty store. Applied before the space's files are removed, so a crash while
    they are being deleted leaves an empty space, never part of the user's memory."""

    kind: Literal["forget_space"] = "forget_space"


class RewriteChain(Op):
    """A stale chain's summary rewritten from its remaining pages (`page_ids`, as planned)."""

    kind: Literal["rewrite_chain"] = "rewrite_chain"
    chain_id: int
    summary: str
    page_ids: list[int]


class RewriteSegment(Op):
    """A stale segment's topic rewritten from its remaining pages (`page_ids`, as planned)."""

    kind: Literal["rewrite_segment"] = "rewrite_segment"
    segment_id: int
    summary: str
    keywords: list[str]
    vector: Vector = Field(description="shape (dim,): the new topic's embedding")
    page_ids: list[int]


def _refuse_newer_format(value: Any) -> Any:
    """Check the version before the kind, so an op of a kind added by a newer format says to upgrade
    rather than that its kind is unknown."""
    if isinstance(value, dict):
        version = value.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            _check_version(version)
    return value


AnyOp = Annotated[
    AddTurns
    | EmbedPages
    | LinkChain
    | FileTopic
    | RecordVisits
    | UpdateProfile
    | AddKnowledge
    | MarkAnalyzed
    | DeferAnalysis
    | DeletePages
    | UpdatePage
    | DeleteFacts
    | UpdateFact
    | SetSpaceTTL
    | ExpireDue
    | ForgetSpace
    | RewriteChain
    | RewriteSegment,
    Field(discriminator="kind"),
    BeforeValidator(_refuse_newer_format),
]
"""Any op, told apart by `kind` when decoded."""

_ANY_OP: TypeAdapter[AnyOp] = TypeAdapter(AnyOp, config=ConfigDict(title="op"))


def op_to_json(op: AnyOp) -> str:
    """The op as one JSON object: its fields, `kind` first, vectors as base64 float16 wire dicts."""
    return op.model_dump_json()


def op_from_json(text: str | bytes) -> AnyOp:
    """The op `op_to_json` wrote, equal to the original (vectors bit-identical).

    Raises ValueError (pydantic's ValidationError) naming the field for malformed JSON, an unknown kind,
    a version newer than `OP_FORMAT_VERSION`, a missing or extra field, or a bad vector.
    """
    return _ANY_OP.validate_json(text)
