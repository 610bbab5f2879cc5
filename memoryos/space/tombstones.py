"""Tombstones on the data volume: which spaces were forgotten, and when, so that a restore of the volume
(or of one space's directory) taken before a forget does not bring the user back.

A tombstone holds a digest of the space's key (`digest`: SHA-256 of the tenant, user and assistant ids
behind a fixed prefix) and the time the forget was planned (`ForgetSpace.at`: the same clock that stamps
writes, `AddTurns.at`) — no id and no memory text: a forgotten user leaves no byte of theirs on the volume
(an id is often an email). The limit: the digest is not keyed, so someone who already knows a user's ids
can compute it and confirm that the user was forgotten; nothing lets one list who was. Each tombstone is
one small JSON file `<data_dir>/.tombstones/<digest>.json` holding the time, written atomically (temp
file, fsync, rename, fsync of the directory) before the space's files are erased, by the one process that
erases them (the space's lease owner, or the embedded server): no file is shared between writers, which a
network file system would not keep apart, and a later forget of the same space replaces the file with its
newer time. Ids start with a letter or digit (`validate_id`), so `.tombstones` is never a tenant's
directory.

A space directory "predates" its tombstone when no write or import stored in it was planned at or after
the forget: the newest `add_turns`, `ImportBundle` or `ImportReference` row of its op log is older. That
is a copy restored from before the forget: it is erased again. A user written again after the forget has
a write planned later (an import after the forget logs its own later row, whatever the bundle's old rows
say), so the space it made is kept. Derived ops (embedding, consolidation) do not count: a worker's clock
stamps them, and they add no memory of their own. A store that cannot be read is erased too: it cannot
show a write newer than the forget.

A digest cannot be turned back into a directory, so start-up goes the other way: one walk of the space
directories (`<data_dir>/<tenant>/<user_id>/<assistant_id>/` holding `STORE_FILE`), each key's digest
looked up among the tombstones, the stores opened only of the spaces that have one. That walk is the
cost: one listing per directory level at each start, only when there is a tombstone. Tombstones are kept
forever: under 100 bytes per forgotten space, and a restore can come from any backup still kept.
Start-up reads them all once (one directory listing and one small file each).
"""

import contextlib
import hashlib
import json
import logging
import re
import shutil
import sqlite3
from collections.abc import Callable, Collection
from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError, MemoryOSError
from memoryos.space.layout import remove_empty_parents
from memoryos.space.pool import SpaceKey
from memoryos.storage.atomic import atomic_write_bytes
from memoryos.storage.records.factory import STORE_FILE, database_pool, uses_database
from memoryos.storage.space_lock import make_directory
from memoryos.validation import validate_id

log = logging.getLogger(__name__)

TOMBSTONE_DIR = ".tombstones"
WRITE_KINDS = ("add_turns", "ImportBundle", "ImportReference")
"""Op log kinds that store memory given by a caller: the age of a space's data is the newest of these."""
DIGEST_PREFIX = b"memoryos-tombstone\0"
"""Hashed before the key, so a tombstone's digest matches no other SHA-256 of the same ids."""
_DIGEST = re.compile("[0-9a-f]{64}")
_ID_FIELDS = ("tenant", "user_id", "assistant_id")

Tombstones = dict[str, float]
"""Forgotten spaces' digests (`digest`) -> when the newest forget of each was planned (Unix seconds)."""


def digest(key: SpaceKey) -> str:
    """What a tombstone holds of the space's key, on the volume and in Redis alike: the hex SHA-256 of the
    prefix and `tenant/user/assistant`, so that neither holds an id."""
    return hashlib.sha256(DIGEST_PREFIX + "/".join(key).encode()).hexdigest()


def is_digest(value: str) -> bool:
    """Whether `value` can be a tombstone's digest; a file or a Redis field that is not one names no space."""
    return _DIGEST.fullmatch(value) is not None


def record(config: MemoryConfig, space_digest: str, forgotten_at: float) -> None:
    """Durably note that the space of `space_digest` (`digest`) was forgotten at `forgotten_at`, before
    its records are erased; an older tombstone of the space is replaced, a newer one kept. With a
    database, in its `tombstones` table (`memoryos/storage/records/postgres/tombstones.py`)."""
    if uses_database(config):
        from memoryos.storage.records.postgres import tombstones as in_database

        in_database.record(database_pool(config), space_digest, forgotten_at)
        return
    path = config.data_dir / TOMBSTONE_DIR / f"{space_digest}.json"
    kept = _read(path)
    if kept is not None and kept >= forgotten_at:
        return
    make_directory(path.parent)
    atomic_write_bytes(path, json.dumps({"forgotten_at": forgotten_at}).encode())


def read_all(config: MemoryConfig) -> Tombstones:
    """Every tombstone on the volume (none when there is no tombstone directory), or in the database. A
    file that cannot be read, or whose name is no digest, is logged and left out."""
    if uses_database(config):
        from memoryos.storage.records.postgres import tombstones as in_database

        return in_database.read_all(database_pool(config))
    found: Tombstones = {}
    with contextlib.suppress(FileNotFoundError):
        for path in (config.data_dir / TOMBSTONE_DIR).glob("*.json"):
            forgotten_at = _read(path) if is_digest(path.stem) else None
            if forgotten_at is None:
                log.warning("unreadable tombstone left out", extra={"file": path.name})
                continue
            found[path.stem] = forgotten_at
    return found


def _read(path: Path) -> float | None:
    try:
        return float(json.loads(path.read_bytes())["forgotten_at"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _newest_write(store: Path) -> float | None:
    """When the newest write in the store file was planned; None when it holds none or cannot be read
    (nothing in it can show it is newer than a forget)."""
    marks = ",".join("?" * len(WRITE_KINDS))
    try:
        with contextlib.closing(sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)) as db:
            row = db.execute(f"SELECT max(at) FROM op_log WHERE kind IN ({marks})", WRITE_KINDS).fetchone()
    except sqlite3.Error:
        return None
    return None if row[0] is None else float(row[0])


def _tombstoned_spaces(
    config: MemoryConfig, tombstones: Tombstones
) -> list[tuple[SpaceKey, float, float | None]]:
    """Every space whose key has a tombstone: (key, when it was forgotten, when its newest write was
    planned or None). A space "predates" its tombstone when that write is older than the forget (or there
    is none): a copy restored from before it. On a volume, only the tombstoned spaces' store files are
    read; a database answers for every space in one query."""
    if uses_database(config):
        from memoryos.storage.records.postgres import tombstones as in_database

        listed = [
            (SpaceKey(tenant, user_id, assistant_id), newest)
            for tenant, user_id, assistant_id, newest in in_database.spaces_with_newest_write(
                database_pool(config), WRITE_KINDS
            )
        ]
        return [(key, tombstones[digest(key)], newest) for key, newest in listed if digest(key) in tombstones]
    return [
        (key, tombstones[digest(key)], _newest_write(directory / STORE_FILE))
        for key, directory in space_directories(config.data_dir)
        if digest(key) in tombstones
    ]


def space_directories(data_dir: Path, holding: str | None = STORE_FILE) -> list[tuple[SpaceKey, Path]]:
    """Every space on the volume: a `<tenant>/<user_id>/<assistant_id>` directory holding `holding`
    (`STORE_FILE`; None: any such directory, a database's snapshot cache) whose names are valid ids.
    Listed whole before any is erased: erasing removes the directories above a space that a walk still
    under way would list."""
    found: list[tuple[SpaceKey, Path]] = []
    for directory in data_dir.glob("*/*/*"):
        names = directory.relative_to(data_dir).parts
        try:
            key = SpaceKey(*(validate_id(field, name) for field, name in zip(_ID_FIELDS, names, strict=True)))
        except InvalidInputError:
            continue
        if (directory / holding).is_file() if holding is not None else directory.is_dir():
            found.append((key, directory))
    return found


def prune_snapshot_cache(config: MemoryConfig, keep: Collection[SpaceKey]) -> list[SpaceKey]:
    """With a database: remove this host's cached index snapshots of the spaces the database no longer
    holds (forgotten while the space was open here, or while this worker was down), except `keep` (the
    spaces open here). A forget removes the cache of the worker that applies it; the others' go here, at
    a worker's start and periodically. Returns the keys whose cache went."""
    if not uses_database(config):
        return []
    cached = {
        key: directory
        for key, directory in space_directories(config.data_dir, holding=None)
        if key not in keep
    }
    if not cached:
        return []
    from memoryos.storage.records.postgres.tombstones import spaces_held

    held = spaces_held(database_pool(config), list(cached))
    gone = [key for key in cached if key not in held]
    for key in gone:
        shutil.rmtree(cached[key], ignore_errors=True)
        remove_empty_parents(cached[key])
    if gone:
        log.info("snapshots of spaces forgotten elsewhere removed", extra={"spaces": len(gone)})
    return gone


def erase_restored(
    config: MemoryConfig, tombstones: Tombstones, erase: Callable[[SpaceKey, float], object]
) -> list[SpaceKey]:
    """Erase, with `erase(key, forgotten_at)`, every space directory whose key's digest has a tombstone
    and that predates it (`_tombstoned_spaces`); returns their keys. Walks the space directories once when there
    is a tombstone (a digest names no directory). Each is logged at INFO with its digest's first 12
    characters, no id. A space that cannot be erased now (another process has it open) is logged and left
    for the next start."""
    erased: list[SpaceKey] = []
    if not tombstones:
        return erased
    for key, forgotten_at, newest_write in _tombstoned_spaces(config, tombstones):
        space_digest = digest(key)
        if newest_write is not None and newest_write >= forgotten_at:
            continue
        try:
            erase(key, forgotten_at)
        except MemoryOSError as error:
            log.warning(
                "a restored copy of a forgotten space could not be erased now",
                extra={"tombstone": space_digest[:12], "error": type(error).__name__},
            )
            continue
        log.info(
            "a restored copy of a forgotten space was erased again", extra={"tombstone": space_digest[:12]}
        )
        erased.append(key)
    return erased
