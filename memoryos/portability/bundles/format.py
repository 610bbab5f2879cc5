"""What a MemoryOS bundle holds: the manifest, one item schema per stored table, and how vectors are written.

A bundle (`memoryos export`) is a zip archive: `manifest.json` first, then one JSON-lines member per item
type, in `MEMBERS` order. Each item is one row of the space's store, its fields named as the store's
columns, so export and import are the same mapping read in two directions; vectors are the store's own
float16 bytes in base64 (bit-identical after import), JSON-valued columns (a page's meta_data, a segment's
keywords, an op's detail) are JSON values rather than strings. Items are written in ascending id order,
which the import checks: it proves ids unique without holding them all in memory.

`FORMAT_VERSION` changes with any change to these schemas; a bundle of a newer version is refused with
"upgrade MemoryOS". Adding a store column therefore means adding the field here (a unit test compares the
store's columns with these fields).
"""

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memoryos.errors import InvalidInputError
from memoryos.storage.records.vector_blobs import STORED_DTYPE
from memoryos.types import FactOrigin, KnowledgeKind, Tier

FORMAT_NAME: Final = "memoryos-bundle"
FORMAT_VERSION = 2
"""Version 2: a page's `analysis_attempts`; version-1 bundles import with none counted."""
MANIFEST_MEMBER = "manifest.json"
FINGERPRINT_META = frozenset({"schema_version", "embedding_model", "embedding_dim", "vector_generation"})
"""Meta keys the manifest states (the embedding fingerprint) or the target store owns (its schema
version): never copied as meta items."""


class InvalidBundleError(InvalidInputError):
    """A bundle that cannot be imported: not a bundle, damaged, of a newer format, or inconsistent. Raised
    before anything is written; the message names the file and, where one is at fault, the member and line."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(str(path), message)


class BundleItem(BaseModel):
    """A row as it travels: strict on the way in (a bundle is untrusted input), unknown fields refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MetaItem(BundleItem):
    key: str
    value: str


class SequenceItem(BundleItem):
    """The highest id an AUTOINCREMENT table ever gave: restored so that ids of deleted rows are never
    handed out again after an import (provenance and history refer to them)."""

    name: str
    seq: int


class ChainItem(BundleItem):
    chain_id: int
    summary: str
    stale: bool


class SegmentItem(BundleItem):
    segment_id: int
    summary: str
    keywords: list[str]
    vector: str
    topic_count: int
    visit_count: int
    interaction_count: int
    last_visit_at: float
    created_at: float
    archived: bool
    updated_at: float | None
    stale: bool


class PageItem(BundleItem):
    page_id: int
    user_input: str
    agent_response: str
    timestamp: str
    meta_data: dict[str, Any] | None
    tier: Tier
    segment_id: int | None
    chain_id: int | None
    analyzed: bool
    analysis_attempts: int = 0
    vector: str | None = Field(description="None: the page was still waiting for its vector.")
    vector_seq: int | None
    created_at: float | None
    updated_at: float | None
    expires_at: float | None
    op_id: str | None


class KnowledgeItem(BundleItem):
    entry_id: int
    kind: KnowledgeKind
    text: str
    timestamp: str
    vector: str
    active: bool
    replaced_by: int | None
    updated_at: float
    created_at: float | None
    expires_at: float | None
    origin: FactOrigin


class KnowledgeSourceItem(BundleItem):
    entry_id: int
    page_id: int


class ProfileItem(BundleItem):
    version: int
    text: str
    created_at: float
    source_segment_id: int | None
    source_page_ids: list[int] | None


class OpLogItem(BundleItem):
    seq: int
    kind: str
    at: float
    detail: dict[str, Any]
    op_id: str | None
    write_id: str | None


@dataclass(frozen=True)
class Member:
    """One item type: its store table and schema, its key (items come in strictly ascending key order),
    and which of its columns hold JSON text."""

    name: str
    table: str
    item: type[BundleItem]
    key: tuple[str, ...]
    json_columns: tuple[str, ...] = ()

    @property
    def file(self) -> str:
        return f"{self.name}.jsonl"

    @property
    def columns(self) -> list[str]:
        return list(self.item.model_fields)


MEMBERS = (
    Member(name="meta", table="meta", item=MetaItem, key=("key",)),
    Member(name="sequences", table="sqlite_sequence", item=SequenceItem, key=("name",)),
    Member(name="chains", table="chains", item=ChainItem, key=("chain_id",)),
    Member(
        name="segments", table="segments", item=SegmentItem, key=("segment_id",), json_columns=("keywords",)
    ),
    Member(name="pages", table="pages", item=PageItem, key=("page_id",), json_columns=("meta_data",)),
    Member(name="knowledge", table="knowledge", item=KnowledgeItem, key=("entry_id",)),
    Member(
        name="knowledge_sources",
        table="knowledge_sources",
        item=KnowledgeSourceItem,
        key=("entry_id", "page_id"),
    ),
    Member(
        name="profile_versions",
        table="profile_versions",
        item=ProfileItem,
        key=("version",),
        json_columns=("source_page_ids",),
    ),
    Member(name="op_log", table="op_log", item=OpLogItem, key=("seq",), json_columns=("detail",)),
)
MEMBERS_BY_NAME = {member.name: member for member in MEMBERS}


class Fingerprint(BaseModel):
    """What the bundle's vectors are: vectors of another model (or generation) cannot be mixed with them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    dim: int = Field(gt=0)
    vector_generation: int = Field(ge=0)
    dtype: Literal["float16"] = "float16"


class Source(BaseModel):
    """Where the bundle was exported from (import may put it under another tenant, user or assistant)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str
    user_id: str
    assistant_id: str
    schema_version: int


class MemberDigest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    items: int = Field(ge=0)
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class BundleManifest(BaseModel):
    """`manifest.json`: self-describing, so a bundle can be checked (and understood) without MemoryOS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["memoryos-bundle"] = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    memoryos_version: str
    created_at: str = Field(description="ISO 8601, UTC.")
    source: Source
    embedding: Fingerprint
    members: dict[str, MemberDigest] = Field(
        description="Per item type (`<name>.jsonl`), in `MEMBERS` order."
    )
    items_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="SHA-256 of every member's bytes, concatenated in order."
    )

    def counts(self) -> dict[str, int]:
        return {name: digest.items for name, digest in self.members.items()}


def vector_to_text(blob: bytes) -> str:
    """A stored vector blob (float16, the store's bytes) as base64."""
    return base64.b64encode(blob).decode("ascii")


def vector_from_text(text: str, dim: int) -> bytes:
    """The blob back, checked: `ValueError` unless it is `dim` finite float16 values."""
    try:
        blob = base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise ValueError(f"vector is not valid base64 ({error})") from None
    if len(blob) != dim * np.dtype(STORED_DTYPE).itemsize:
        raise ValueError(f"vector holds {len(blob)} bytes, {dim} float16 values need {dim * 2}")
    if not np.isfinite(np.frombuffer(blob, dtype=STORED_DTYPE)).all():
        raise ValueError("vector holds NaN or infinite values")
    return blob
