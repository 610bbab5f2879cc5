"""Tombstones on the data volume: which spaces were forgotten, and when, so that a restore of the volume
(or of one space's directory) taken before a forget does not bring the user back.

A tombstone is the space's key — tenant, user and assistant ids, never any memory text — and the time the
forget was planned (`ForgetSpace.at`: the same clock that stamps writes, `AddTurns.at`). Each is one small
JSON file `<data_dir>/.tombstones/<digest of the key>.json`, written atomically (temp file, fsync, rename,
fsync of the directory) before the space's files are erased, by the one process that erases them (the
space's lease owner, or the embedded server): no file is shared between writers, which a network file
system would not keep apart, and a later forget of the same space replaces the file with its newer time.
Ids start with a letter or digit (`validate_id`), so `.tombstones` is never a tenant's directory.

A space directory "predates" its tombstone when no write or import stored in it was planned at or after
the forget: the newest `add_turns`, `ImportBundle` or `ImportReference` row of its op log is older. That
is a copy restored from before the forget: it is erased again. A user written again after the forget has
a write planned later (an import after the forget logs its own later row, whatever the bundle's old rows
say), so the space it made is kept. Derived ops (embedding, consolidation) do not count: a worker's clock
stamps them, and they add no memory of their own. A store that cannot be read is erased too: it cannot
show a write newer than the forget.

Tombstones are kept forever: ~150 bytes per forgotten space, and a restore can come from any backup still
kept. Start-up reads them all once (one directory listing and one small file each) and opens only the
stores of tombstoned spaces that have a directory.
"""

import contextlib
import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError, MemoryOSError
from memoryos.space.layout import STORE_FILE
from memoryos.space.pool import SpaceKey
from memoryos.storage.atomic import atomic_write_bytes
from memoryos.storage.space_lock import make_directory
from memoryos.validation import validate_id

log = logging.getLogger(__name__)

TOMBSTONE_DIR = ".tombstones"
WRITE_KINDS = ("add_turns", "ImportBundle", "ImportReference")
"""Op log kinds that store memory given by a caller: the age of a space's data is the newest of these."""

Tombstones = dict[SpaceKey, float]
"""Forgotten spaces -> when the newest forget of each was planned (Unix seconds)."""


def space_directory(data_dir: Path, key: SpaceKey) -> Path:
    """Where the space of `key` lives under `data_dir` (`MemoryConfig.space_dir`, every id checked)."""
    parts = (("tenant", key.tenant), ("user_id", key.user_id), ("assistant_id", key.assistant_id))
    return data_dir.joinpath(*(validate_id(field, value) for field, value in parts))


def _file_of(data_dir: Path, key: SpaceKey) -> Path:
    digest = hashlib.blake2b("/".join(key).encode(), digest_size=16).hexdigest()
    return data_dir / TOMBSTONE_DIR / f"{digest}.json"


def record(data_dir: Path, key: SpaceKey, forgotten_at: float) -> None:
    """Durably note that the space of `key` was forgotten at `forgotten_at`, before its files are erased;
    an older tombstone of the space is replaced, a newer one kept."""
    path = _file_of(data_dir, key)
    kept = _read(path)
    if kept is not None and kept[1] >= forgotten_at:
        return
    make_directory(path.parent)
    fields = {"tenant": key.tenant, "user_id": key.user_id, "assistant_id": key.assistant_id}
    atomic_write_bytes(path, json.dumps({**fields, "forgotten_at": forgotten_at}).encode())


def read_all(data_dir: Path) -> Tombstones:
    """Every tombstone on the volume (none when there is no tombstone directory). A file that cannot be
    read, or names ids that are not valid, is logged and left out."""
    found: Tombstones = {}
    with contextlib.suppress(FileNotFoundError):
        for path in (data_dir / TOMBSTONE_DIR).glob("*.json"):
            tombstone = _read(path)
            if tombstone is None:
                log.warning("unreadable tombstone left out", extra={"file": path.name})
                continue
            key, forgotten_at = tombstone
            found[key] = max(forgotten_at, found.get(key, forgotten_at))
    return found


def _read(path: Path) -> tuple[SpaceKey, float] | None:
    try:
        fields = json.loads(path.read_bytes())
        key = SpaceKey(fields["tenant"], fields["user_id"], fields["assistant_id"])
        space_directory(Path("."), key)  # ids that cannot name a directory are no tombstone
        return key, float(fields["forgotten_at"])
    except (OSError, ValueError, TypeError, KeyError, InvalidInputError):
        return None


def predates(directory: Path, forgotten_at: float) -> bool:
    """Whether the space in `directory` holds no write planned at or after `forgotten_at`: a copy
    restored from before the forget. False when there is no store there."""
    store = directory / STORE_FILE
    if not store.is_file():
        return False
    marks = ",".join("?" * len(WRITE_KINDS))
    try:
        with contextlib.closing(sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)) as db:
            row = db.execute(f"SELECT max(at) FROM op_log WHERE kind IN ({marks})", WRITE_KINDS).fetchone()
    except sqlite3.Error:
        return True  # unreadable: nothing in it can show it is newer than the forget
    return row[0] is None or float(row[0]) < forgotten_at


def erase_restored(
    config: MemoryConfig, tombstones: Tombstones, erase: Callable[[SpaceKey, float], object]
) -> list[SpaceKey]:
    """Erase, with `erase(key, forgotten_at)`, every tombstoned space whose directory predates its
    tombstone (`predates`); returns their keys. Each is logged at INFO with its key only. A space that
    cannot be erased now (another process has it open) is logged and left for the next start."""
    erased: list[SpaceKey] = []
    for key, forgotten_at in tombstones.items():
        if not predates(space_directory(config.data_dir, key), forgotten_at):
            continue
        try:
            erase(key, forgotten_at)
        except MemoryOSError as error:
            log.warning(
                "a restored copy of a forgotten space could not be erased now",
                extra={"space": "/".join(key), "error": type(error).__name__},
            )
            continue
        log.info("a restored copy of a forgotten space was erased again", extra={"space": "/".join(key)})
        erased.append(key)
    return erased
