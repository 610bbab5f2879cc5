"""`import_space`: a bundle (`memoryos export`) into an empty space, ids preserved, in one transaction.

With the embedding model the bundle was made with, every row is written as it was — vectors included,
bit for bit — so retrieval in the new space returns what it returned in the old one (same page ids,
scores, facts and profile). With another model the vectors cannot be compared with the new ones, so the
import re-embeds from the stored text as `memoryos reindex` does: pages from their exchange text, facts
from theirs, each segment as the normalized mean of its pages' new vectors (its summary, for a segment
whose pages are gone), and records the new model.

The bundle is verified whole (`memoryos/portability/bundles/read.py`) before the space is touched; the space must be empty and
is held exclusively while the import writes (`memoryos/portability/bundles/target.py`).
"""

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel
from tqdm import tqdm

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder, create_embedder
from memoryos.ids import new_id
from memoryos.portability.bundles.format import (
    MEMBERS_BY_NAME,
    KnowledgeItem,
    PageItem,
    SegmentItem,
    vector_to_text,
)
from memoryos.portability.bundles.read import BundleReader
from memoryos.portability.bundles.target import ImportTarget, finish_pages, insert_rows, set_meta, store_row
from memoryos.storage.records.vector_blobs import to_blob
from memoryos.types import exchange_text

IMPORT_BATCH = 256
"""Pages (or facts) encoded per call when re-embedding."""

T = TypeVar("T")


class ImportReport(BaseModel):
    """What an import wrote: the space, the source, items per type, and the embedding now recorded."""

    space: str
    source: str
    counts: dict[str, int]
    re_embedded: bool
    embedding_model: str
    embedding_dim: int


def import_space(
    config: MemoryConfig,
    user_id: str,
    assistant_id: str,
    bundle_path: Path,
    show_progress: bool = False,
    *,
    embedder: Embedder | None = None,
) -> ImportReport:
    """Import the bundle at `bundle_path` as the space of (`user_id`, `assistant_id`) — any tenant, user
    or assistant, not necessarily the one it was exported from.

    Refused with nothing written: an invalid bundle (`InvalidBundleError`), a space that already holds
    memory (`SpaceNotEmptyError`), a space another process has open (`SpaceBusyError`). `embedder`
    (default: one for `config`, made only when re-embedding) decides the model the space will record.
    """
    target = ImportTarget(config, user_id, assistant_id)
    target.check_empty()  # before reading a large bundle
    with BundleReader(bundle_path) as reader:
        reader.verify(show_progress)
        fingerprint = reader.manifest.embedding
        model = embedder.name if embedder is not None else str(config.embedding_model_name)
        re_embed = model != fingerprint.model
        if re_embed and embedder is None:
            embedder = create_embedder(config)  # loaded before the space is claimed
        with target.writing("import") as db:
            writer = _Writer(reader, db, show_progress)
            if re_embed:
                assert embedder is not None
                writer.write_re_embedded(embedder)
                recorded = (embedder.name, embedder.dim, fingerprint.vector_generation + 1)
            else:
                writer.write_as_is()
                recorded = (fingerprint.model, fingerprint.dim, fingerprint.vector_generation)
            writer.finish(recorded)
    return ImportReport(
        space=str(target.directory),
        source=str(bundle_path),
        counts=reader.manifest.counts(),
        re_embedded=re_embed,
        embedding_model=recorded[0],
        embedding_dim=recorded[1],
    )


def _batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _Writer:
    """Writes a verified bundle's items into the claimed space's transaction."""

    def __init__(self, reader: BundleReader, db: Any, show_progress: bool) -> None:
        self.reader = reader
        self.db = db
        total = sum(reader.manifest.counts().values())
        self.progress = tqdm(total=total, desc="importing", unit="item", disable=not show_progress)

    def _items(self, name: str) -> Iterator[Any]:
        for item in self.reader.items(name):
            self.progress.update()
            yield item

    def _copy(self, name: str) -> None:
        member = MEMBERS_BY_NAME[name]
        insert_rows(self.db, member, (store_row(member, item) for item in self._items(name)))

    def write_as_is(self) -> None:
        for name in ("chains", "segments", "pages", "knowledge"):
            self._copy(name)

    def write_re_embedded(self, embedder: Embedder) -> None:
        self._copy("chains")
        sums = self._pages_re_embedded(embedder)
        self._segments_re_embedded(embedder, sums)
        facts = MEMBERS_BY_NAME["knowledge"]
        for chunk in _batched(self._items("knowledge"), IMPORT_BATCH):
            vectors = embedder.encode([fact.text for fact in chunk])
            insert_rows(
                self.db,
                facts,
                (store_row(facts, _with_vector(f, v)) for f, v in zip(chunk, vectors, strict=True)),
            )

    def _pages_re_embedded(self, embedder: Embedder) -> dict[int, np.ndarray]:
        """Insert every page with its new vector (sequenced in page order: pages the bundle held pending
        are embedded too); returns the sum of the new vectors per segment."""
        pages = MEMBERS_BY_NAME["pages"]
        sums: dict[int, np.ndarray] = {}
        sequence = 0
        for chunk in _batched(self._items("pages"), IMPORT_BATCH):
            vectors = embedder.encode([exchange_text(page.user_input, page.agent_response) for page in chunk])
            rows = []
            for page, vector in zip(chunk, vectors, strict=True):
                sequence += 1
                rows.append(store_row(pages, _with_vector(page, vector, vector_seq=sequence)))
                if page.segment_id is not None:
                    sums[page.segment_id] = sums.get(page.segment_id, 0.0) + vector.astype(np.float64)
            insert_rows(self.db, pages, rows)
        return sums

    def _segments_re_embedded(self, embedder: Embedder, sums: dict[int, np.ndarray]) -> None:
        segments = MEMBERS_BY_NAME["segments"]
        without_pages: list[SegmentItem] = []
        rows = []
        for segment in self._items("segments"):
            if segment.segment_id not in sums:
                without_pages.append(segment)
                continue
            total = sums[segment.segment_id]
            rows.append(store_row(segments, _with_vector(segment, total / max(np.linalg.norm(total), 1e-12))))
        if without_pages:
            vectors = embedder.encode([segment.summary for segment in without_pages])
            rows += [
                store_row(segments, _with_vector(s, v)) for s, v in zip(without_pages, vectors, strict=True)
            ]
        insert_rows(self.db, segments, rows)

    def finish(self, recorded: tuple[str, int, int]) -> None:
        """The remaining members, the full-text index, the id sequences, the embedding fingerprint, and
        an op log entry for the import itself (ids and checksum, no text)."""
        for name in ("knowledge_sources", "profile_versions", "op_log"):
            self._copy(name)
        finish_pages(self.db)
        set_meta(self.db, {item.key: item.value for item in self._items("meta")})
        self._restore_sequences({item.name: item.seq for item in self._items("sequences")})
        model, dim, generation = recorded
        set_meta(
            self.db,
            {"embedding_model": model, "embedding_dim": str(dim), "vector_generation": str(generation)},
        )
        source = self.reader.manifest.source
        detail = {
            "items_sha256": self.reader.manifest.items_sha256,
            "from": {"tenant": source.tenant, "user_id": source.user_id, "assistant_id": source.assistant_id},
            "counts": self.reader.manifest.counts(),
        }
        self.db.execute(
            "INSERT INTO op_log(kind, at, detail, op_id, write_id) VALUES (?, ?, ?, ?, NULL)",
            ("ImportBundle", time.time(), json.dumps(detail), new_id()),
        )
        self.progress.close()

    def _restore_sequences(self, sequences: dict[str, int]) -> None:
        """Never hand out again an id the source space gave to a row since deleted."""
        tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for name, seq in sequences.items():
            if name not in tables:
                continue
            updated = self.db.execute(
                "UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = ?", (seq, name)
            ).rowcount
            if not updated:
                self.db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (name, seq))


def _with_vector(item: Any, vector: np.ndarray, **changes: Any) -> Any:
    """`item` (a page, segment or fact) carrying `vector` at the store's precision."""
    assert isinstance(item, PageItem | SegmentItem | KnowledgeItem)
    return item.model_copy(update={"vector": vector_to_text(to_blob(vector)), **changes})
