"""`SpaceHold`: shared while open, exclusive for forget and reindex, with messages that say who and why.

Two holds in one process use two open files, so the kernel treats them as two holders, as it would two
processes: these tests need no child process (the pid-naming across processes is tested in
`tests/integration/test_shared_space.py`).
"""

import os
import threading
import time
from pathlib import Path

import pytest

from memoryos.config import MemoryConfig
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.space_lock import LOCK_FILE, SpaceBusyError, SpaceHold


def test_many_shared_holds_and_an_exclusive_one_only_alone(tmp_path: Path) -> None:
    first, second = SpaceHold(tmp_path, 0), SpaceHold(tmp_path, 0)
    with (
        pytest.raises(SpaceBusyError, match=r"cannot forget: memory space .* is open in another process"),
        first.exclusive("forget"),
    ):
        pass
    second.release()
    with first.exclusive("forget"):
        assert (tmp_path / LOCK_FILE).read_text() == f"pid {os.getpid()}: forget"
    # A refused claim left the first hold shared: a new exclusive request elsewhere still waits for it.
    third = SpaceHold(tmp_path, 0)
    with pytest.raises(SpaceBusyError):
        third.claim("reindex")
    first.release()
    third.claim("reindex")
    third.release()


def test_opening_waits_for_an_exclusive_holder_then_names_it(tmp_path: Path) -> None:
    holder = SpaceHold(tmp_path, 0)
    holder.claim("reindex")
    started = time.monotonic()
    with pytest.raises(SpaceBusyError, match=rf"exclusive use \(pid {os.getpid()}: reindex\).*retry"):
        SpaceHold(tmp_path, timeout_s=0.3)
    assert time.monotonic() - started >= 0.3
    threading.Timer(0.2, holder.release).start()
    SpaceHold(tmp_path, timeout_s=10).release()  # got in once the holder let go


def test_an_opener_that_waited_through_a_forget_opens_a_fresh_directory(tmp_path: Path) -> None:
    """The forget deletes the directory (and the lock file the opener is waiting on) while the opener
    waits: it must not end up holding the deleted file, or a later forget could not see it."""
    space = tmp_path / "space"
    forgetting = SpaceHold(space, 0)
    forgetting.claim("forget")
    opened: list[SpaceHold] = []
    opener = threading.Thread(target=lambda: opened.append(SpaceHold(space, timeout_s=10)))
    opener.start()
    time.sleep(0.2)
    (space / LOCK_FILE).unlink()
    space.rmdir()
    forgetting.release()
    opener.join()
    (hold,) = opened
    assert (space / LOCK_FILE).exists()
    with pytest.raises(SpaceBusyError):  # it holds the new file: a forget now sees it
        SpaceHold(space, 0).claim("forget")
    hold.release()


def test_a_chroma_backed_space_is_open_in_one_process_at_a_time(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    config = MemoryConfig(data_dir=tmp_path, vector_backend="chroma", space_lock_timeout_s=0.2)
    first = MemorySpace(tmp_path / "space", config, "m", lambda: 4)
    try:
        with pytest.raises(SpaceBusyError, match="keep a Chroma-backed space open"):
            MemorySpace(tmp_path / "space", config, "m", lambda: 4)
    finally:
        first.close()
    MemorySpace(tmp_path / "space", config, "m", lambda: 4).close()
