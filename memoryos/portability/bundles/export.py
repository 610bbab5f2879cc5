"""`export_space`: one memory space as a bundle file (`memoryos/portability/bundles/format.py`), a consistent snapshot of its store.

The store is read in one read transaction (SQLite WAL lets writers in other processes go on meanwhile, and
the snapshot does not move under the export), row by row, so a space of a million pages is never held in
memory. Items are staged as JSON-lines files beside the output, hashed as they are written, and only then
zipped behind `manifest.json`, which must come first and carries their checksums. The bundle appears at
its path all at once (rename), so a failed or interrupted export never leaves a half-written one there.
"""

import hashlib
import json
import os
import sqlite3
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tqdm import tqdm

import memoryos
from memoryos.config import MemoryConfig
from memoryos.errors import SpaceNotFoundError, StorageError
from memoryos.portability.bundles.format import (
    FINGERPRINT_META,
    MANIFEST_MEMBER,
    MEMBERS,
    BundleManifest,
    Fingerprint,
    Member,
    MemberDigest,
    Source,
    vector_to_text,
)
from memoryos.space.layout import STORE_FILE
from memoryos.storage.records.sqlite.store import SqliteStore
from memoryos.storage.space_lock import SpaceHold


def export_space(
    config: MemoryConfig, user_id: str, assistant_id: str, out_path: Path, show_progress: bool = False
) -> BundleManifest:
    """Write the space of (`user_id`, `assistant_id`) to the bundle `out_path` (replaced if it exists).

    Raises `SpaceNotFoundError`, creating nothing, when there is no such space. Other processes may keep
    the space open and write to it: the bundle is the store as it was when the export began. The export
    holds the space shared, as every open does, so a forget or reindex is refused while it runs.
    """
    directory = config.space_dir(user_id, assistant_id)  # the ids, checked
    if not (directory / STORE_FILE).is_file():
        raise SpaceNotFoundError(directory)
    hold = SpaceHold(directory, config.space_lock_timeout_s, require=STORE_FILE)
    try:
        SqliteStore(directory / STORE_FILE, config.store_busy_timeout_s).close()  # an older schema, migrated
        with tempfile.TemporaryDirectory(prefix=f".{out_path.name}.", dir=out_path.parent) as staging:
            db = sqlite3.connect(
                directory / STORE_FILE, isolation_level=None, timeout=config.store_busy_timeout_s
            )
            try:
                db.execute("BEGIN")  # deferred: the snapshot is taken at the first read, held to the end
                manifest = _stage_members(
                    db, (config.tenant, user_id, assistant_id), Path(staging), show_progress
                )
                db.execute("ROLLBACK")
            finally:
                db.close()
            _write_archive(manifest, Path(staging), out_path)
        return manifest
    finally:
        hold.release()


def _stage_members(
    db: sqlite3.Connection, space: tuple[str, str, str], staging: Path, show_progress: bool
) -> BundleManifest:
    """Every member's items as a file in `staging`, read inside the caller's read transaction; their
    manifest. `space` is (tenant, user_id, assistant_id)."""
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("embedding_model") is None or meta.get("embedding_dim") is None:
        raise StorageError(f"memory space {'/'.join(space)} records no embedding model: it was never opened")
    present = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    total = sum(
        int(db.execute(f"SELECT COUNT(*) FROM {m.table}").fetchone()[0])
        for m in MEMBERS
        if m.table in present
    )
    digests: dict[str, MemberDigest] = {}
    whole = hashlib.sha256()
    with tqdm(total=total, desc="exporting", unit="item", disable=not show_progress) as progress:
        for member in MEMBERS:
            rows = _rows(db, member) if member.table in present else iter(())
            digests[member.name] = _stage_member(member, rows, staging, whole, progress)
    tenant, user_id, assistant_id = space
    return BundleManifest(
        memoryos_version=memoryos.__version__,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        source=Source(
            tenant=tenant,
            user_id=user_id,
            assistant_id=assistant_id,
            schema_version=int(meta["schema_version"]),
        ),
        embedding=Fingerprint(
            model=meta["embedding_model"],
            dim=int(meta["embedding_dim"]),
            vector_generation=int(meta.get("vector_generation") or 0),
        ),
        members=digests,
        items_sha256=whole.hexdigest(),
    )


def _rows(db: sqlite3.Connection, member: Member) -> Any:
    """The member's rows in key order, streamed by the cursor (never all fetched at once)."""
    where = ""
    if member.name == "meta":
        where = f" WHERE key NOT IN ({','.join(repr(key) for key in sorted(FINGERPRINT_META))})"
    return db.execute(
        f"SELECT {', '.join(member.columns)} FROM {member.table}{where} ORDER BY {', '.join(member.key)}"
    )


def _stage_member(member: Member, rows: Any, staging: Path, whole: Any, progress: tqdm) -> MemberDigest:
    digest, count, size = hashlib.sha256(), 0, 0
    with open(staging / member.file, "wb") as out:
        for row in rows:
            line = (_item_json(member, row) + "\n").encode()
            out.write(line)
            digest.update(line)
            whole.update(line)
            count, size = count + 1, size + len(line)
            progress.update()
    return MemberDigest(items=count, bytes=size, sha256=digest.hexdigest())


def _item_json(member: Member, row: sqlite3.Row) -> str:
    values = dict(zip(member.columns, row, strict=True))
    for column in member.json_columns:
        if values[column] is not None:
            values[column] = json.loads(values[column])
    if values.get("vector") is not None:
        values["vector"] = vector_to_text(values["vector"])
    try:
        return member.item.model_validate(values, strict=False).model_dump_json()
    except ValidationError as error:
        key = ", ".join(f"{column} {values[column]}" for column in member.key)
        raise StorageError(f"cannot export {member.table} row ({key}): {error}") from None


def _write_archive(manifest: BundleManifest, staging: Path, out_path: Path) -> None:
    """Zip the staged members behind the manifest, then rename the archive into place (fsynced)."""
    partial = staging / "bundle.partial"
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MANIFEST_MEMBER, manifest.model_dump_json(indent=2))
        for member in MEMBERS:
            archive.write(staging / member.file, member.file)
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
    os.replace(partial, out_path)
    directory = os.open(out_path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
