"""Forget deletes a space's directory while another process may be opening it (`memoryos/space/memory_space.py`,
`_remove_space_directory`): the opener re-creates the lock file once the old one is gone, and the old
space's files must all go without the forget failing on the newcomer's file."""

import os
from pathlib import Path

import pytest

from memoryos.space.memory_space import _remove_space_directory


def test_an_opener_racing_the_removal_keeps_its_new_lock_file_and_nothing_old_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = tmp_path / "maya" / "bot"
    (space / "index").mkdir(parents=True)
    for name in ("space.lock", "memory.sqlite", "index/pages.faiss"):
        (space / name).write_text("old")
    unlink = os.unlink

    def unlink_then_an_opener_arrives(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        if str(path).endswith("space.lock") or path == "space.lock":
            (space / "space.lock").write_text("")  # the opener's O_CREAT, between listing and rmdir

    monkeypatch.setattr(os, "unlink", unlink_then_an_opener_arrives)
    _remove_space_directory(space)
    monkeypatch.undo()
    assert sorted(p.name for p in space.iterdir()) == ["space.lock"]
    assert (space / "space.lock").read_text() == ""  # the newcomer's, not the old one


def test_other_failures_still_raise(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _remove_space_directory(tmp_path / "never-there")
