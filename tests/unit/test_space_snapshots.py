"""Page index snapshots off the write path: `MemorySpace` takes them under its lock and `SnapshotWriter`
writes them on a background thread; `close` waits for that write and writes the final snapshot itself.

The first snapshot write is held by a gate around `IndexSnapshot.write`, and the gate opens only when
someone calls `SnapshotWriter.wait`. So no assertion depends on timing: while nobody waits, a snapshot is
provably in flight, and a `close` that did not wait for it would write its final snapshot first.
"""

import logging
import threading
from pathlib import Path

import faiss
import numpy as np
import pytest

from memoryos.space.memory_space import MemorySpace
from memoryos.storage.vectors import faiss_snapshot, vector_index
from memoryos.storage.vectors.faiss_index import FaissIndex
from memoryos.storage.vectors.faiss_snapshot import SnapshotHeader, snapshot_bytes
from memoryos.storage.vectors.index_factory import FAISS_SNAPSHOT_FILE, SnapshotWriter
from memoryos.storage.vectors.vector_index import IndexSnapshot
from tests.support.fakes import FakeClock, axis
from tests.unit.test_space import DIM, add_pages, open_space

GATE_TIMEOUT_S = 60.0
"""Only a safety net so a failing test cannot hang: the gate is always opened by the test itself."""


class GatedWrites:
    """Wraps `IndexSnapshot.write`: the first write waits for `release` (set by the first
    `SnapshotWriter.wait`); the covered sequence of each completed write is recorded."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_first = False
        self.written: list[int] = []
        self._calls = 0
        self._original = IndexSnapshot.write

    def write(self, snapshot: IndexSnapshot, path: Path) -> None:
        self._calls += 1
        if self._calls == 1:
            self.entered.set()
            self.release.wait(GATE_TIMEOUT_S)
            if self.fail_first:
                raise OSError("disk full")
        self._original(snapshot, path)
        self.written.append(snapshot.covered_seq)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> GatedWrites:
    gated = GatedWrites()
    original_wait = SnapshotWriter.wait

    def releasing_wait(writer: SnapshotWriter) -> bool:
        gated.release.set()
        return original_wait(writer)

    monkeypatch.setattr(
        vector_index.IndexSnapshot, "write", lambda snapshot, path: gated.write(snapshot, path)
    )
    monkeypatch.setattr(SnapshotWriter, "wait", releasing_wait)
    return gated


def covered_on_disk(space_dir: Path) -> int:
    return FaissIndex.load(space_dir / FAISS_SNAPSHOT_FILE, DIM)[1]


def test_a_due_snapshot_is_written_in_the_background_and_close_writes_the_final_one(
    tmp_path: Path, gate: GatedWrites
) -> None:
    space_dir = tmp_path / "default" / "alice" / "helper"
    # A new space counts as one op behind its (missing) snapshot, so ops 2 and 5 are due.
    space = open_space(space_dir, FakeClock(), index_snapshot_every_ops=3, index_snapshot_every_s=1e9)
    ids = [add_pages(space, axis(DIM, 0))[0], add_pages(space, axis(DIM, 1))[0]]
    assert gate.entered.wait(GATE_TIMEOUT_S)  # apply returned while its snapshot is still being written
    ids += [add_pages(space, axis(DIM, i))[0] for i in (2, 3, 4)]  # due again: queued behind the first
    ids += add_pages(space, axis(DIM, 5))
    assert not (space_dir / FAISS_SNAPSHOT_FILE).exists()

    space.close()
    assert gate.written == [ids[1], ids[4], ids[5]]  # in order: close waited, then wrote its own
    assert covered_on_disk(space_dir) == ids[5]


def test_close_rewrites_a_snapshot_whose_background_write_failed(
    tmp_path: Path, gate: GatedWrites, caplog: pytest.LogCaptureFixture
) -> None:
    space_dir = tmp_path / "default" / "alice" / "helper"
    space = open_space(space_dir, FakeClock(), index_snapshot_every_ops=1, index_snapshot_every_s=1e9)
    gate.fail_first = True
    with caplog.at_level(logging.ERROR):
        ids = add_pages(space, axis(DIM, 0), axis(DIM, 1))
        assert gate.entered.wait(GATE_TIMEOUT_S)
        space.close()  # no op since that snapshot, but it never reached the disk
    assert "page index snapshot not written" in caplog.text
    assert gate.written == [ids[-1]] and covered_on_disk(space_dir) == ids[-1]


def test_the_writer_drops_a_waiting_snapshot_for_a_newer_one(tmp_path: Path, gate: GatedWrites) -> None:
    writer = SnapshotWriter(tmp_path / "marker")
    writer.submit(IndexSnapshot(1, lambda: b"one"))
    assert gate.entered.wait(GATE_TIMEOUT_S)
    writer.submit(IndexSnapshot(2, lambda: b"two"))
    writer.submit(IndexSnapshot(3, lambda: b"three"))
    assert writer.wait()
    assert gate.written == [1, 3] and (tmp_path / "marker").read_bytes() == b"three"
    assert writer.wait()  # nothing in flight: returns at once


def test_an_explicit_snapshot_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    space_dir = tmp_path / "default" / "alice" / "helper"
    space: MemorySpace = open_space(space_dir, FakeClock())
    ids = add_pages(space, axis(DIM, 0))
    space.snapshot()
    assert covered_on_disk(space_dir) == ids[-1]
    add_pages(space, np.asarray(axis(DIM, 1)))
    space.close()


def test_a_snapshot_is_due_once_the_interval_has_passed_since_the_last(
    tmp_path: Path, gate: GatedWrites
) -> None:
    space_dir = tmp_path / "default" / "alice" / "helper"
    clock = FakeClock()
    space = open_space(space_dir, clock, index_snapshot_every_ops=10**9, index_snapshot_every_s=60)
    add_pages(space, axis(DIM, 0))
    clock.advance(59)
    add_pages(space, axis(DIM, 1))
    assert not gate.entered.is_set()  # 59 s after opening: not due

    clock.advance(1)
    at_60_s = add_pages(space, axis(DIM, 2))[-1]
    assert gate.entered.wait(GATE_TIMEOUT_S)  # written in the background, nobody waited for it
    clock.advance(59)
    add_pages(space, axis(DIM, 3))  # the interval restarts at each snapshot
    clock.advance(1)
    at_120_s = add_pages(space, axis(DIM, 4))[-1]

    space.close()  # nothing changed since the last snapshot: close writes none of its own
    assert gate.written == [at_60_s, at_120_s]
    assert covered_on_disk(space_dir) == at_120_s


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_snapshot_is_rebuilt_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    space_dir = tmp_path / "default" / "alice" / "helper"
    with caplog.at_level(logging.INFO):
        space = open_space(space_dir, FakeClock())
    assert not caplog.records  # a new space has nothing to rebuild
    ids = add_pages(space, axis(DIM, 0), axis(DIM, 1), axis(DIM, 2))
    space.close()
    snapshot = space_dir / FAISS_SNAPSHOT_FILE
    if damage == "missing":
        snapshot.unlink()
    else:
        snapshot.write_bytes(snapshot.read_bytes()[:-10])

    caplog.clear()
    with caplog.at_level(logging.INFO):
        reopened = open_space(space_dir, FakeClock())
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "rebuilt from the store" in record.getMessage()
    fields = record.__dict__  # the structured fields, passed as `extra`
    assert (fields["vectors"], fields["backend"]) == (3, "faiss")
    expected_reason = "snapshot missing" if damage == "missing" else "snapshot unusable: "
    assert fields["reason"].startswith(expected_reason)
    assert "says" not in caplog.text and "answers" not in caplog.text  # no memory text
    assert reopened.page_index.count() == len(ids)
    reopened.close()

    caplog.clear()
    with caplog.at_level(logging.INFO):
        open_space(space_dir, FakeClock()).close()  # the rebuilt index was snapshotted: nothing to log
    assert not caplog.records


@pytest.mark.parametrize("version", [1, faiss_snapshot.FORMAT_VERSION])
def test_a_float32_snapshot_from_before_fp16_is_rebuilt_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """A snapshot written before the index held fp16 codes (`IndexIDMap(IndexFlatIP)`), under its own
    version-1 header or the current one, covering every page: it is not trusted, the index is rebuilt
    from the store and serves the same results."""
    space_dir = tmp_path / "default" / "alice" / "helper"
    space = open_space(space_dir, FakeClock())
    vectors = [axis(DIM, 0), axis(DIM, 1), (axis(DIM, 0) + axis(DIM, 2)) / np.sqrt(2)]
    ids = add_pages(space, *vectors)
    queries = np.stack([axis(DIM, 0), axis(DIM, 2)])
    before = space.page_index.search(queries, 3)
    space.close()
    old_index = faiss.IndexIDMap(faiss.IndexFlatIP(DIM))
    old_index.add_with_ids(np.stack(vectors).astype(np.float32), np.array(ids, dtype=np.int64))
    covered = covered_on_disk(space_dir)
    monkeypatch.setattr(faiss_snapshot, "FORMAT_VERSION", version)
    header = SnapshotHeader(DIM, covered, 0, None)
    (space_dir / FAISS_SNAPSHOT_FILE).write_bytes(snapshot_bytes(header, faiss.serialize_index(old_index)))
    monkeypatch.undo()

    caplog.clear()
    with caplog.at_level(logging.INFO):
        reopened = open_space(space_dir, FakeClock())
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "rebuilt from the store" in record.getMessage()
    assert record.__dict__["reason"].startswith("snapshot unusable: ")
    after = reopened.page_index.search(queries, 3)
    assert np.array_equal(after.ids, before.ids) and np.allclose(after.scores, before.scores)
    reopened.close()
    assert covered_on_disk(space_dir) == covered  # the rebuilt index replaced the old snapshot


def test_a_snapshot_ahead_of_the_store_is_rebuilt_not_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store restored from an older backup (two pages) beside a snapshot that covers four: the snapshot
    would serve pages the store does not hold, so the index is rebuilt from the store."""
    directory = tmp_path / "default" / "u" / "a"
    space = open_space(directory, FakeClock())
    kept = add_pages(space, axis(DIM, 0), axis(DIM, 1))
    space.close()
    backup = (directory / "memory.sqlite").read_bytes()
    space = open_space(directory, FakeClock())
    add_pages(space, axis(DIM, 2), axis(DIM, 3))
    space.close()  # the snapshot covers 4 pages
    for leftover in ("memory.sqlite-wal", "memory.sqlite-shm"):
        (directory / leftover).unlink(missing_ok=True)
    (directory / "memory.sqlite").write_bytes(backup)
    with caplog.at_level(logging.WARNING):
        restored = open_space(directory, FakeClock())
    assert restored.page_index.count() == 2
    assert (
        sorted(page_id for page_id, _ in restored.page_index.search(axis(DIM, 0).reshape(1, -1), 4).hits(0))
        == kept
    )
    assert any("snapshot ahead of the store" in record.getMessage() for record in caplog.records)
    restored.close()
