"""The data volume's tombstones hold a digest of the space's key and a time, no id: what a restore of the
volume is checked against by walking the space directories (`memoryos/space/tombstones.py`)."""

import sqlite3
from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.space import tombstones
from memoryos.space.layout import STORE_FILE
from memoryos.space.pool import SpaceKey

MAYA, NOOR, OMAR = (
    SpaceKey("acme", "maya", "bot"),
    SpaceKey("acme", "noor", "bot"),
    SpaceKey("acme", "omar", "bot"),
)
FORGOTTEN_AT = 1000.0


def space_with_write_at(data_dir: Path, key: SpaceKey, at: float) -> None:
    """A space directory whose op log's newest caller write was planned at `at`."""
    directory = data_dir.joinpath(*key)
    directory.mkdir(parents=True)
    with sqlite3.connect(directory / STORE_FILE) as db:
        db.execute("CREATE TABLE op_log (kind TEXT, at REAL)")
        db.execute("INSERT INTO op_log VALUES ('add_turns', ?)", (at,))


def test_a_tombstone_is_a_digest_and_a_time(tmp_path: Path) -> None:
    maya = tombstones.digest(MAYA)
    tombstones.record(MemoryConfig(data_dir=tmp_path), maya, FORGOTTEN_AT)
    tombstones.record(
        MemoryConfig(data_dir=tmp_path), maya, FORGOTTEN_AT - 1
    )  # an older forget does not replace it
    (written,) = (tmp_path / tombstones.TOMBSTONE_DIR).iterdir()
    assert written.name == f"{maya}.json" and b"maya" not in written.read_bytes()
    (tmp_path / tombstones.TOMBSTONE_DIR / "acme-maya-bot.json").write_text('{"forgotten_at": 1}')
    assert tombstones.read_all(MemoryConfig(data_dir=tmp_path)) == {
        maya: FORGOTTEN_AT
    }  # a name that is no digest is left out
    assert tombstones.digest(MAYA) != tombstones.digest(NOOR) and tombstones.is_digest(maya)


def test_the_start_walks_the_spaces_and_erases_those_that_predate_their_tombstone(tmp_path: Path) -> None:
    space_with_write_at(tmp_path, MAYA, FORGOTTEN_AT - 10)  # a copy restored from before the forget
    space_with_write_at(tmp_path, NOOR, FORGOTTEN_AT - 10)  # never forgotten
    space_with_write_at(tmp_path, OMAR, FORGOTTEN_AT + 10)  # written again after the forget
    no_space = SpaceKey("acme", "not an id", "bot")  # a directory whose name no id can be
    space_with_write_at(tmp_path, no_space, FORGOTTEN_AT - 10)
    (tmp_path / "acme" / "empty" / "bot").mkdir(parents=True)  # no store: no space
    for key in (MAYA, OMAR, no_space, SpaceKey("acme", "empty", "bot")):
        tombstones.record(MemoryConfig(data_dir=tmp_path), tombstones.digest(key), FORGOTTEN_AT)
    erased: list[tuple[SpaceKey, float]] = []

    found = tombstones.erase_restored(
        MemoryConfig(data_dir=tmp_path),
        tombstones.read_all(MemoryConfig(data_dir=tmp_path)),
        lambda key, at: erased.append((key, at)),
    )
    assert found == [MAYA] and erased == [(MAYA, FORGOTTEN_AT)]
