"""The space an import writes into: empty, held exclusively, filled in one transaction, or left as found.

Both imports — a MemoryOS bundle (`memoryos/portability/bundles/importer.py`) and the reference package's JSON files
(`memoryos/portability/reference_import.py`) — write rows with their ids given, which only an empty space can take. The space
is claimed as `memoryos reindex` claims it (`SpaceHold.claim`): refused, naming the pids, while another
process has it open, and processes that try to open it meanwhile wait. Every row is written in one
transaction with foreign keys checked at its commit (rows may then come in any order), so a failure at
any point leaves nothing: a space directory the import created is removed again, with the directories
above it that it made.
"""

import base64
import contextlib
import json
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError
from memoryos.portability.bundles.format import BundleItem, Member
from memoryos.space.layout import STORE_FILE, make_data_root, remove_empty_parents
from memoryos.storage.records.sqlite.store import SqliteStore
from memoryos.storage.space_lock import SpaceHold
from memoryos.storage.vectors.index_factory import remove_page_index_files

_CONTENT_TABLES = {"pages": "pages", "knowledge": "facts", "profile_versions": "profile versions"}


class SpaceNotEmptyError(InvalidInputError):
    """An import into a space that already holds memories: ids would collide, and merging two histories is
    not what an import promises. Nothing was written."""


class ImportTarget:
    """The space of (`user_id`, `assistant_id`) as an import's destination."""

    def __init__(self, config: MemoryConfig, user_id: str, assistant_id: str) -> None:
        self.config = config
        self.user_id = user_id
        self.assistant_id = assistant_id
        self.directory = config.space_dir(user_id, assistant_id)  # the ids, checked
        self.store_path = self.directory / STORE_FILE

    def check_empty(self) -> None:
        """Raise `SpaceNotEmptyError` when the space holds pages, facts or a profile; writes nothing (an
        absent space is empty)."""
        if not self.store_path.is_file():
            return
        db = sqlite3.connect(self.store_path, timeout=self.config.store_busy_timeout_s)
        try:
            present = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            held = {
                label: int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
                for table, label in _CONTENT_TABLES.items()
                if table in present
            }
        finally:
            db.close()
        if any(held.values()):
            contents = ", ".join(f"{count} {label}" for label, count in held.items() if count)
            raise SpaceNotEmptyError(
                "user_id",
                f"user {self.user_id!r} (assistant {self.assistant_id!r}) already has memory in "
                f"{self.config.data_dir} ({contents}); an import needs an empty space: forget it first "
                f"(memoryos forget --user {self.user_id}) or import under another user",
            )

    @contextlib.contextmanager
    def writing(self, purpose: str) -> Iterator[sqlite3.Connection]:
        """The store's connection inside one write transaction, with the space claimed for `purpose`
        ("import"). Committed when the block ends; on any error rolled back and whatever the import made
        on disk removed. Raises `SpaceBusyError` when another process has the space open and
        `SpaceNotEmptyError` when it is not empty (checked again under the claim)."""
        make_data_root(self.config.data_dir)
        made_directory = not self.directory.exists()
        hold = SpaceHold(self.directory, self.config.space_lock_timeout_s)
        try:
            hold.claim(purpose)
        except BaseException:
            hold.release()  # the space is open elsewhere, so it is that process's now: left as it is
            raise
        made_store = not self.store_path.exists()
        try:
            self.check_empty()
            SqliteStore(self.store_path, self.config.store_busy_timeout_s).close()  # the current schema
            db = sqlite3.connect(
                self.store_path, isolation_level=None, timeout=self.config.store_busy_timeout_s
            )
            try:
                db.execute("PRAGMA foreign_keys = ON")
                db.execute("PRAGMA synchronous = FULL")
                db.execute("BEGIN IMMEDIATE")
                db.execute("PRAGMA defer_foreign_keys = ON")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            finally:
                db.close()
            remove_page_index_files(self.directory)  # an earlier open of the empty space may have left one
        except BaseException:
            self._undo(made_directory, made_store)
            hold.release()
            if made_directory:
                remove_empty_parents(self.directory)
            raise
        hold.release()

    def _undo(self, made_directory: bool, made_store: bool) -> None:
        if made_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        elif made_store:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.store_path}{suffix}").unlink(missing_ok=True)


def store_row(member: Member, item: BundleItem) -> tuple[object, ...]:
    """An item as the values of its row, in `member.columns` order: JSON values as JSON text, vectors
    as their float16 blobs (the bundle's bytes, unchanged)."""
    values = item.model_dump()
    for column in member.json_columns:
        if values[column] is not None:
            values[column] = json.dumps(values[column])
    if values.get("vector") is not None:
        values["vector"] = base64.b64decode(values["vector"])
    return tuple(values[column] for column in member.columns)


def insert_rows(db: sqlite3.Connection, member: Member, rows: Iterable[tuple[object, ...]]) -> None:
    """Insert rows of `member.columns` into its table, ids as given."""
    columns = member.columns
    db.executemany(
        f"INSERT INTO {member.table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", rows
    )


def finish_pages(db: sqlite3.Connection) -> None:
    """Index the inserted pages' words for BM25 (the full-text index is derived from the pages table)."""
    db.execute("INSERT INTO pages_fts(pages_fts) VALUES ('rebuild')")


def set_meta(db: sqlite3.Connection, values: dict[str, str]) -> None:
    db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items())
