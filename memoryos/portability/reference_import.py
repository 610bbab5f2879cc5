"""Import one user's memory from the reference MemoryOS (BAI-LAB/MemoryOS, PyPI `memoryos-pro`).

The reference keeps a user in JSON files under its `data_storage_path`:

- `users/<user_id>/short_term.json`: a list of `{user_input, agent_response, timestamp}`;
- `users/<user_id>/mid_term.json`: `{"sessions": {id: {summary, summary_keywords, details: [page], N_visit,
  L_interaction, timestamp, last_visit_time, ...}}, "access_frequency": ...}`, a page being
  `{page_id, user_input, agent_response, timestamp, analyzed, pre_page, next_page, meta_info, ...}`;
- `users/<user_id>/long_term_user.json`: `{"user_profiles": {user_id: {data, last_updated}},
  "knowledge_base": [{knowledge, timestamp, knowledge_embedding}], "assistant_knowledge": [...]}`;
- `assistants/<assistant_id>/long_term_assistant.json`: the same shape, its `assistant_knowledge` used.

They map onto our tiers without an LLM call: short-term entries become short-term pages; each session
becomes a mid-term segment holding its pages (a page the reference filed under several sessions is kept
once, in the first), pages linked by `pre_page` form a dialogue chain whose summary is their `meta_info`;
the profile becomes a profile version; knowledge entries become facts (origin "import"). Every text is
validated as `add_memory` validates it and embedded with the configured model: the reference's stored
vectors are not used (another model, and unchecked). Pages are numbered in time order, so neighbouring
turns stay neighbours. Written like a bundle import: into an empty space, held exclusively, in one
transaction (`memoryos/portability/bundles/target.py`).
"""

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder, create_embedder
from memoryos.errors import InvalidInputError
from memoryos.ids import new_id
from memoryos.portability.bundles.format import (
    MEMBERS_BY_NAME,
    ChainItem,
    KnowledgeItem,
    PageItem,
    ProfileItem,
    SegmentItem,
    vector_to_text,
)
from memoryos.portability.bundles.importer import IMPORT_BATCH, ImportReport
from memoryos.portability.bundles.target import ImportTarget, finish_pages, insert_rows, set_meta, store_row
from memoryos.portability.reference_format import (
    EMPTY_KNOWLEDGE,
    RefKnowledge,
    RefLongTerm,
    RefMidTerm,
    RefPage,
    RefProfile,
    load_reference,
    locate_reference,
    parse_reference,
)
from memoryos.space import policy
from memoryos.storage.records.base import LAST_CHAINED_META
from memoryos.storage.records.vector_blobs import to_blob
from memoryos.types import KnowledgeKind, Tier, Turn
from memoryos.validation import parse_timestamp, validate_turn


class _Page:
    """A page on its way in: the validated turn and where it goes."""

    def __init__(self, turn: Turn, tier: Tier, session: str | None, ref: RefPage | None) -> None:
        self.turn = turn
        self.tier = tier
        self.session = session
        self.ref = ref
        self.page_id = 0
        self.chain_id: int | None = None


def import_reference(
    config: MemoryConfig,
    user_id: str,
    assistant_id: str,
    reference_dir: Path,
    *,
    reference_user: str | None = None,
    show_progress: bool = False,
    embedder: Embedder | None = None,
) -> ImportReport:
    """Import the reference user `reference_user` (default `user_id`) of the reference data directory
    `reference_dir` (its `data_storage_path`, or that user's own `users/<id>` directory) into the empty
    space of (`user_id`, `assistant_id`); the assistant's knowledge is read for `assistant_id`.

    Raises `InvalidInputError` naming the file and entry for anything unreadable or invalid, before the
    space is touched; `SpaceNotEmptyError` or `SpaceBusyError` as a bundle import does."""
    target = ImportTarget(config, user_id, assistant_id)
    target.check_empty()
    user_dir, assistant_file = locate_reference(reference_dir, reference_user or user_id, assistant_id)
    now = datetime.now(UTC)
    short_term = load_reference(user_dir / "short_term.json", list, [])
    mid_term = parse_reference(user_dir / "mid_term.json", RefMidTerm)
    user_long = parse_reference(user_dir / "long_term_user.json", RefLongTerm)
    assistant_long = parse_reference(assistant_file, RefLongTerm)
    pages = _pages(user_dir, short_term, mid_term, config.max_text_chars, now)
    facts = _facts(user_dir, assistant_file, user_long, assistant_long)
    profile = user_long.user_profiles.get(user_dir.name)
    has_profile = profile is not None and (profile.data or "").strip().lower() not in ("", "none")
    embedder = embedder or create_embedder(config)
    op_id = new_id()
    at = time.time()
    with target.writing("import") as db:
        writer = _Writer(db, embedder, op_id, at, show_progress, len(pages) + len(facts))
        writer.pages_and_segments(pages, mid_term)
        writer.facts(facts, config.long_term_knowledge_capacity)
        if has_profile:
            assert profile is not None
            insert_rows(db, *_profile_row(profile))
        finish_pages(db)
        counts = {
            "short_term_pages": sum(page.tier == "stm" for page in pages),
            "mid_term_pages": sum(page.tier == "mtm" for page in pages),
            "segments": writer.segment_count,
            "facts": len(facts),
            "profile_versions": int(has_profile),
        }
        set_meta(
            db,
            {"embedding_model": embedder.name, "embedding_dim": str(embedder.dim), "vector_generation": "0"},
        )
        if writer.last_chained is not None:
            set_meta(db, {LAST_CHAINED_META: str(writer.last_chained)})
        detail = {"from": "reference", "reference_user": user_dir.name, "counts": counts}
        db.execute(
            "INSERT INTO op_log(kind, at, detail, op_id, write_id) VALUES (?, ?, ?, ?, NULL)",
            ("ImportReference", at, json.dumps(detail), op_id),
        )
    return ImportReport(
        space=str(target.directory),
        source=str(user_dir),
        counts=counts,
        re_embedded=True,
        embedding_model=embedder.name,
        embedding_dim=embedder.dim,
    )


def _turn(raw: RefPage | dict[str, Any], where: str, max_chars: int, now: datetime) -> Turn:
    fields = raw.model_dump() if isinstance(raw, RefPage) else raw
    turn = {key: fields.get(key) for key in ("user_input", "agent_response", "timestamp", "meta_data")}
    try:
        return validate_turn(turn, f"{where}.", max_chars, now)
    except InvalidInputError as error:
        raise InvalidInputError(where, str(error)) from None


def _pages(
    user_dir: Path, short_term: list[Any], mid_term: RefMidTerm, max_chars: int, now: datetime
) -> list[_Page]:
    """Mid-term pages in time order (each once), then short-term ones, numbered from 1."""
    seen: set[str] = set()
    filed: list[_Page] = []
    for session_id, session in mid_term.sessions.items():
        for index, ref in enumerate(session.details):
            if ref.page_id is not None and ref.page_id in seen:
                continue  # the reference files a page under every topic it touches
            if ref.page_id is not None:
                seen.add(ref.page_id)
            where = f"{user_dir / 'mid_term.json'} sessions.{session_id}.details[{index}]"
            filed.append(_Page(_turn(ref, where, max_chars, now), "mtm", session_id, ref))
    filed.sort(key=lambda page: page.turn.timestamp)  # stable: same-second pages keep their order
    recent = []
    for index, raw in enumerate(short_term):
        where = f"{user_dir / 'short_term.json'} [{index}]"
        if not isinstance(raw, dict):
            raise InvalidInputError(where, "expected a JSON object with user_input and agent_response")
        recent.append(_Page(_turn(raw, where, max_chars, now), "stm", None, None))
    pages = filed + recent
    for page_id, page in enumerate(pages, start=1):
        page.page_id = page_id
    return pages


def _facts(
    user_dir: Path, assistant_file: Path, user_long: RefLongTerm, assistant_long: RefLongTerm
) -> list[tuple[KnowledgeKind, str, str]]:
    """(kind, text, timestamp) of every fact, oldest first, each normalized text once per kind."""
    entries: list[tuple[KnowledgeKind, RefKnowledge, Path]] = [
        *(("user", entry, user_dir / "long_term_user.json") for entry in user_long.knowledge_base),
        *(("assistant", entry, user_dir / "long_term_user.json") for entry in user_long.assistant_knowledge),
        *(("assistant", entry, assistant_file) for entry in assistant_long.assistant_knowledge),
    ]
    facts: dict[tuple[str, str], tuple[KnowledgeKind, str, str]] = {}
    for kind, entry, path in entries:
        text = entry.knowledge.strip()
        if text.lower() in EMPTY_KNOWLEDGE:
            continue
        moment = parse_timestamp(f"{path} knowledge {text[:40]!r} timestamp", entry.timestamp)
        facts[(kind, policy.normalized_fact(text))] = (kind, text, moment.strftime("%Y-%m-%d %H:%M:%S"))
    return sorted(facts.values(), key=lambda fact: fact[2])


def _unix(timestamp: str | None, default: float) -> float:
    """A reference timestamp (naive, taken as UTC like every stored timestamp) as Unix seconds."""
    if not timestamp:
        return default
    try:
        return parse_timestamp("timestamp", timestamp).replace(tzinfo=UTC).timestamp()
    except InvalidInputError:
        return default


def _profile_row(profile: RefProfile) -> tuple[Any, list[tuple[object, ...]]]:
    member = MEMBERS_BY_NAME["profile_versions"]
    item = ProfileItem(
        version=1,
        text=(profile.data or "").strip(),
        created_at=_unix(profile.last_updated, time.time()),
        source_segment_id=None,
        source_page_ids=None,
    )
    return member, [store_row(member, item)]


class _Writer:
    """Embeds and inserts the reference's pages, segments and facts in the import's transaction."""

    def __init__(
        self, db: Any, embedder: Embedder, op_id: str, at: float, show_progress: bool, total: int
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.op_id = op_id
        self.at = at
        self.progress = tqdm(
            total=total, desc="embedding and importing", unit="item", disable=not show_progress
        )
        self.segment_count = 0
        self.last_chained: int | None = None

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = [
            self.embedder.encode(texts[start : start + IMPORT_BATCH])
            for start in range(0, len(texts), IMPORT_BATCH)
        ]
        self.progress.update(len(texts))
        return np.concatenate(vectors) if vectors else np.zeros((0, self.embedder.dim), dtype=np.float32)

    def pages_and_segments(self, pages: list[_Page], mid_term: RefMidTerm) -> None:
        vectors = self._encode([page.turn.text() for page in pages])
        segment_ids = {
            sid: n for n, sid in enumerate(dict.fromkeys(p.session for p in pages if p.session), 1)
        }
        chains = self._chains(pages)
        segments = MEMBERS_BY_NAME["segments"]
        segment_rows = []
        for session_id, segment_id in segment_ids.items():
            session = mid_term.sessions[session_id]
            members = np.stack([v for p, v in zip(pages, vectors, strict=True) if p.session == session_id])
            created = _unix(session.timestamp, self.at)
            item = SegmentItem(
                segment_id=segment_id,
                summary=session.summary,
                keywords=policy.merged_keywords([], session.summary_keywords),
                vector=vector_to_text(to_blob(policy.unit_mean(members))),
                topic_count=1,
                visit_count=session.N_visit,
                interaction_count=session.L_interaction,
                last_visit_at=_unix(session.last_visit_time, created),
                created_at=created,
                archived=False,
                updated_at=self.at,
                stale=False,
            )
            segment_rows.append(store_row(segments, item))
        insert_rows(self.db, segments, segment_rows)
        self.segment_count = len(segment_rows)
        rows = MEMBERS_BY_NAME["pages"]
        insert_rows(
            self.db,
            rows,
            (
                store_row(rows, self._page_item(page, vector, segment_ids.get(page.session or "")))
                for page, vector in zip(pages, vectors, strict=True)
            ),
        )
        chain_member = MEMBERS_BY_NAME["chains"]
        insert_rows(
            self.db,
            chain_member,
            (
                store_row(chain_member, ChainItem(chain_id=c, summary=s, stale=False))
                for c, s in chains.items()
            ),
        )

    def _chains(self, pages: list[_Page]) -> dict[int, str]:
        """Chain pages linked by `pre_page` (a chain's id is its first page's, as `LinkChain` numbers them);
        a chain's summary is the `meta_info` of its latest page that has one. Returns {chain id: summary}."""
        by_ref = {page.ref.page_id: page for page in pages if page.ref is not None and page.ref.page_id}
        summaries: dict[int, str] = {}
        for page in pages:  # in time order: a page's predecessor is chained before it
            if page.ref is None:
                continue
            previous = by_ref.get(page.ref.pre_page or "")
            if previous is not None and previous.chain_id is not None and previous.page_id < page.page_id:
                page.chain_id = previous.chain_id
            elif page.ref.meta_info or page.ref.pre_page:
                page.chain_id = page.page_id
            else:
                continue
            if page.ref.meta_info:
                summaries[page.chain_id] = page.ref.meta_info
            else:
                summaries.setdefault(page.chain_id, "")
            self.last_chained = page.page_id
        return summaries

    def _page_item(self, page: _Page, vector: np.ndarray, segment_id: int | None) -> PageItem:
        return PageItem(
            page_id=page.page_id,
            user_input=page.turn.user_input,
            agent_response=page.turn.agent_response,
            timestamp=page.turn.timestamp,
            meta_data=page.turn.meta_data or None,
            tier=page.tier,
            segment_id=segment_id,
            chain_id=page.chain_id,
            analyzed=page.ref.analyzed if page.ref is not None else False,
            vector=vector_to_text(to_blob(vector)),
            vector_seq=page.page_id,
            created_at=self.at,
            updated_at=self.at,
            expires_at=None,
            op_id=self.op_id,
        )

    def facts(self, facts: list[tuple[KnowledgeKind, str, str]], capacity: int) -> None:
        """Facts with their own timestamps as confirmation times; beyond `capacity` per kind the oldest
        are kept as retired history, as consolidation retires them."""
        vectors = self._encode([text for _, text, _ in facts])
        member = MEMBERS_BY_NAME["knowledge"]
        active: set[int] = set()
        for kind in ("user", "assistant"):
            of_kind = [index for index, fact in enumerate(facts) if fact[0] == kind]
            active.update(of_kind[len(of_kind) - capacity :] if len(of_kind) > capacity else of_kind)
        rows = []
        for index, ((kind, text, timestamp), vector) in enumerate(zip(facts, vectors, strict=True)):
            confirmed = _unix(timestamp, self.at)
            item = KnowledgeItem(
                entry_id=index + 1,
                kind=kind,
                text=text,
                timestamp=timestamp,
                vector=vector_to_text(to_blob(vector)),
                active=index in active,
                replaced_by=None,
                updated_at=confirmed,
                created_at=confirmed,
                expires_at=None,
                origin="import",
            )
            rows.append(store_row(member, item))
        insert_rows(self.db, member, rows)
        self.progress.close()
