"""A store another connection is writing: the scheduler's loop must not wait for it, every other writer
must (`StoreQueries.transaction(wait_for_writers=...)`)."""

import sqlite3
import threading
from pathlib import Path

import pytest

from memoryos.errors import StoreBusyError
from memoryos.storage.records.sqlite.store import SqliteStore


def test_a_write_that_may_not_wait_is_refused_at_once_and_the_next_write_waits_as_before(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "store.sqlite", busy_timeout_s=10.0)
    other_process = sqlite3.connect(tmp_path / "store.sqlite", isolation_level=None, check_same_thread=False)
    other_process.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusyError), store.transaction(wait_for_writers=False):
        store.set_meta("never", "stored")
    # The refusal left the busy timeout as it was: a writer that waits gets the lock once it is free.
    threading.Timer(0.3, other_process.execute, ("COMMIT",)).start()
    with store.transaction():
        store.set_meta("after", "the other commit")
    with store.transaction(wait_for_writers=False):  # free now: no refusal
        store.set_meta("free", "yes")
    assert (store.get_meta("never"), store.get_meta("after"), store.get_meta("free")) == (
        None,
        "the other commit",
        "yes",
    )
    other_process.close()
    store.close()
