"""The store's schema version: a store of the previous version migrates on open, a newer one is refused
untouched (issue 9).

`tests/data/space_v1/` holds a space written by the last version-1 MemoryOS (commit 13326ee, by
`make_v1.py` beside it): 8 exchanges with the hash embedder, chains, 4 segments, a version-2 FAISS snapshot.
"""

import shutil
import sqlite3
from pathlib import Path

import pytest

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from memoryos.errors import StorageError
from memoryos.storage.records.sqlite.schema import SCHEMA_VERSION
from memoryos.storage.records.sqlite.store import SqliteStore
from tests.support.fakes import HashEmbedder

V1_SPACE = Path(__file__).resolve().parents[1] / "data" / "space_v1"


@pytest.fixture
def v1_data_dir(tmp_path: Path) -> Path:
    space = MemoryConfig(data_dir=tmp_path).space_dir("maya", "default_assistant_profile")
    space.mkdir(parents=True)
    for name in ("memory.sqlite", "pages.faiss"):
        shutil.copy(V1_SPACE / name, space / name)
    return tmp_path


def schema_version(store: Path) -> str:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return str(db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    finally:
        db.close()


def test_a_version_1_store_migrates_on_open_and_keeps_every_memory(v1_data_dir: Path) -> None:
    assert schema_version(V1_SPACE / "memory.sqlite") == "1"
    config = MemoryConfig(data_dir=v1_data_dir)
    with Memoryos.from_config("maya", config, embedder=HashEmbedder()) as memory:
        stats = memory.stats()
        assert (stats.short_term_pages, stats.mid_term_pages, len(stats.segments)) == (3, 5, 4)
        # The old snapshot (format 2, no fingerprint) is rebuilt from the store, which replays every page.
        assert memory.space.page_index.count() == 8
        hits = memory.retrieve("Pico chewed my cello case", top_k=1).retrieved_pages
        assert [p.user_input for p in hits] == ["Pico chewed my cello case"]
        # Written after the upgrade: its vector sequence follows the migrated pages'.
        page_id = memory.add_memory("Lena brought pastel de nata.", "Delicious!")
        memory.flush()
        assert memory.space.store.max_vector_seq() == page_id == 9
    store = v1_data_dir / "default" / "maya" / "default_assistant_profile" / "memory.sqlite"
    assert schema_version(store) == str(SCHEMA_VERSION)
    with Memoryos.from_config("maya", config, embedder=HashEmbedder()) as reopened:
        assert reopened.space.page_index.count() == 9


def test_a_store_newer_than_the_code_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match=rf"schema version {SCHEMA_VERSION + 1}, newer.*upgrade MemoryOS"):
        SqliteStore(path)
    assert path.read_bytes() == before


def test_a_failed_migration_leaves_the_store_on_its_old_version(
    v1_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration runs in one transaction: a step that fails rolls every earlier step back."""
    from memoryos.storage.records.sqlite import schema

    store = v1_data_dir / "default" / "maya" / "default_assistant_profile" / "memory.sqlite"
    monkeypatch.setitem(schema.MIGRATIONS, 1, schema.MIGRATIONS[1] + "\nSELECT no_such_function();")
    with pytest.raises(StorageError, match="no_such_function"):
        SqliteStore(store)
    assert schema_version(store) == "1"
    db = sqlite3.connect(store)
    assert "vector_seq" not in [row[1] for row in db.execute("PRAGMA table_info(pages)")]
    db.close()


def test_a_store_at_this_version_opens_without_writing(tmp_path: Path) -> None:
    """Most opens are of a current store (a worker's pool reopens spaces all day): they only read, so they
    cost no commit and no fsync, and a store opens while another process holds its write lock."""
    path = tmp_path / "memory.sqlite"
    SqliteStore(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
        store = SqliteStore(path, busy_timeout_s=0.1)
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
        store.close()
        writer.execute("ROLLBACK")
    finally:
        writer.close()
