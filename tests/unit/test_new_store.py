"""A new store is a copy of an empty one, placed whole (`sqlite_store._place_empty_store`): it must be the
store SQLite would have made, appear whole or not at all, and fall back to SQLite's own creation."""

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from memoryos.storage.records.sqlite.schema import SCHEMA_VERSION
from memoryos.storage.records.sqlite.store import SqliteStore


def layout(path: Path) -> dict[str, object]:
    """What a store is, beyond its rows: schema objects, journal mode, page size, user version."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            "schema": sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()),
            "journal": db.execute("PRAGMA journal_mode").fetchone()[0],
            "page_size": db.execute("PRAGMA page_size").fetchone()[0],
            "meta": db.execute("SELECT key, value FROM meta ORDER BY key").fetchall(),
        }
    finally:
        db.close()


def test_a_copied_store_is_the_store_sqlite_creates(tmp_path: Path) -> None:
    created_by_sqlite = tmp_path / "sqlite" / "memory.sqlite"
    created_by_sqlite.parent.mkdir()
    created_by_sqlite.touch()  # an empty file: SQLite makes the schema in it, no copy
    SqliteStore(created_by_sqlite).close()
    copied = tmp_path / "copied" / "memory.sqlite"
    copied.parent.mkdir()
    store = SqliteStore(copied)
    store.set_meta("embedding_model", "m")  # usable at once
    store.close()
    assert sorted(p.name for p in copied.parent.iterdir()) == ["memory.sqlite"]  # no scratch copy left

    expected = layout(created_by_sqlite)
    found = layout(copied)
    assert found["meta"] == [("embedding_model", "m"), ("schema_version", str(SCHEMA_VERSION))]
    assert {**found, "meta": None} == {**expected, "meta": None} and found["journal"] == "wal"


def test_stores_created_at_once_in_one_place_are_one_store(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    start = threading.Barrier(8)
    opened: list[SqliteStore] = []
    errors: list[BaseException] = []

    def create(n: int) -> None:
        start.wait()
        try:
            store = SqliteStore(path)
            with store.transaction():
                store.set_meta(f"writer{n}", "here")
            opened.append(store)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for store in opened:
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.sqlite"]
    meta = dict(layout(path)["meta"])  # type: ignore[call-overload]
    assert {f"writer{n}" for n in range(8)} <= set(meta)  # every writer wrote into the same store


def test_without_hard_links_sqlite_creates_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(source: object, target: object) -> None:
        raise OSError(1, "Operation not permitted")  # a file system without hard links

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "memory.sqlite"
    SqliteStore(path).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.sqlite"]
    assert dict(layout(path)["meta"])["schema_version"] == str(SCHEMA_VERSION)  # type: ignore[call-overload]


def test_a_new_store_starts_with_its_meta_rows_and_commits_nothing_to_have_them(tmp_path: Path) -> None:
    asked: list[str] = []

    def meta() -> dict[str, str]:
        asked.append("meta")
        return {"embedding_model": "m", "embedding_dim": "384"}

    path = tmp_path / "memory.sqlite"
    store = SqliteStore(path, new_store_meta=meta)
    assert (store.get_meta("embedding_model"), store.get_meta("embedding_dim")) == ("m", "384")
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # no transaction (and no fsync) at open
    store.close()

    SqliteStore(path, new_store_meta=meta).close()  # an existing store: the meta is not asked for again
    assert asked == ["meta"]
