"""Memory spaces on disk: the file layout, and the directories made and removed around them.

A space is `<data_dir>/<tenant>/<user_id>/<assistant_id>/` holding `STORE_FILE`. Making the data
directory, erasing a space without opening it (`memoryos forget`) and removing the directories a forget
leaves empty do not need an open `MemorySpace` (`memory_space.py`), nor its index or model, so they live apart.
"""

import contextlib
import shutil
import sqlite3
from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.errors import MemoryOSError
from memoryos.space.apply import OpApplier
from memoryos.space.ops import ForgetSpace
from memoryos.storage.records.base import RecordStore
from memoryos.storage.records.factory import STORE_FILE, ShardFence, open_record_store, uses_database
from memoryos.storage.records.sqlite.store import SqliteStore
from memoryos.storage.space_lock import SpaceHold, creation_error, make_directory

ROOT_MARKER = ".created-by-memoryos"
"""In a data directory that MemoryOS created itself: such a directory is removed when its last space is
forgotten. A data directory that existed before (the user's own) is never removed."""


def make_data_root(data_dir: Path) -> None:
    """Create the data directory if it is missing, marked (`ROOT_MARKER`) as made by MemoryOS, so that
    forgetting its last space removes it too; raises `StorageError` if it cannot be made."""
    if data_dir.is_dir():
        return
    make_directory(data_dir.parent)
    try:
        data_dir.mkdir()
    except FileExistsError:
        return  # another process made it first (or it is a file: the space's mkdir says so)
    except OSError as error:
        raise creation_error(error, data_dir) from None
    with contextlib.suppress(OSError):  # unmarked, the directory is merely kept
        (data_dir / ROOT_MARKER).write_text(
            "This directory was created by MemoryOS; it is removed when its last memory space is forgotten.\n"
        )


def remove_empty_parents(space_directory: Path) -> None:
    """After a space was erased: remove its user and tenant directories once nothing else is in them (a
    forgotten user's id does not stay on disk as a directory name), then the data directory if MemoryOS
    created it and nothing but its marker is left. `rmdir` removes only empty directories, so other users'
    and assistants' spaces, and whatever else a user keeps in a data directory, are never touched."""
    user_dir = space_directory.parent  # <data_dir>/<tenant>/<user_id>/<assistant_id>
    for directory in (user_dir, user_dir.parent):
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue  # already gone (another process forgot it too)
        except OSError:
            return  # not empty: another space lives here
    data_dir = user_dir.parent.parent
    try:
        if [entry.name for entry in data_dir.iterdir()] != [ROOT_MARKER]:
            return
        (data_dir / ROOT_MARKER).unlink()
    except OSError:
        return
    try:
        data_dir.rmdir()
    except FileNotFoundError:
        pass
    except OSError:  # a space was created meanwhile: the directory stays MemoryOS's
        with contextlib.suppress(OSError):
            (data_dir / ROOT_MARKER).touch()


def erase_space(
    directory: Path, config: MemoryConfig, fence: ShardFence | None = None
) -> dict[str, int] | None:
    """Erase the space in `directory` without opening its index or loading a model; returns what it held
    (pages by tier, facts, profile versions; None if its store could not be read — it is erased anyway).

    Needs the space to itself, as `MemorySpace.erase`: raises `SpaceBusyError` naming the other processes
    that have it open, and `SpaceNotFoundError` if there is no space there. Does not touch the
    directories above it (`remove_empty_parents`).

    With a database, there is no file to hold: the space's rows go in one transaction, fenced by its
    shard's number (`fence`), so a process that still has the space open elsewhere (a shard that moved)
    finds it gone at its next call instead of keeping the forget from happening; the snapshot cache in
    `directory` goes after."""
    if uses_database(config):
        store = open_record_store(config, directory, create=False, new_store_meta=dict, fence=fence)
        held = _contents(store)
        store.erase()
        shutil.rmtree(directory, ignore_errors=True)
        return held
    hold = SpaceHold(directory, config.space_lock_timeout_s, require=STORE_FILE)
    try:
        hold.claim("forget")
        contents = _empty_store(directory / STORE_FILE, config)
        shutil.rmtree(directory)
    finally:
        hold.release()
    return contents


def _contents(store: RecordStore) -> dict[str, int]:
    """What a space holds, as `forget` reports it."""
    pages = store.count_pages()
    return {
        "short_term_pages": pages.get("stm", 0),
        "mid_term_pages": pages.get("mtm", 0),
        "archived_pages": pages.get("archived", 0),
        "user_facts": len(store.active_knowledge("user")),
        "assistant_facts": len(store.active_knowledge("assistant")),
        "profile_versions": store.profile_version_count(),
    }


def _empty_store(path: Path, config: MemoryConfig) -> dict[str, int] | None:
    """What the store held, then the store emptied by a `ForgetSpace` op before its files are removed
    (a crash midway leaves an empty space). An unreadable store is left to `rmtree` alone: None."""
    try:
        store = SqliteStore(path, config.store_busy_timeout_s)
    except (MemoryOSError, sqlite3.Error):
        return None
    try:
        contents = _contents(store)
        with store.transaction():
            OpApplier(store, config, dim=0).apply(ForgetSpace())  # no vector to check: no model loaded
        return contents
    except (MemoryOSError, sqlite3.Error):
        return None
    finally:
        store.close()
