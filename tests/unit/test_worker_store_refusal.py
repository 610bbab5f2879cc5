"""A worker refuses to keep SQLite spaces on a network file system, with one line naming the database
setting; on a local disk, or with a database, it starts."""

import argparse
from pathlib import Path

import pytest

from memoryos.storage import network_fs
from services.worker.process import run_worker_process


def worker_args(data_dir: Path, database_url: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        data_dir=data_dir,
        database_url=database_url,
        redis_url="redis://127.0.0.1:1/0",
        processes=None,
        worker_id=None,
    )


def test_sqlite_spaces_on_a_network_file_system_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:40 / {tmp_path} rw,relatime - nfs4 fileserver:/export rw\n")
    monkeypatch.setattr(network_fs, "MOUNTINFO", mountinfo)
    with pytest.raises(SystemExit) as refused:
        run_worker_process(worker_args(tmp_path / "data"))
    message = str(refused.value)
    assert "network file system (nfs4)" in message and "MEMORYOS_DATABASE_URL" in message
    assert "\n" not in message


@pytest.mark.parametrize("url", ["not a url at all", "postgresql://memoryos:s3cret@db:notaport/memoryos"])
def test_a_database_url_libpq_cannot_read_is_one_line_naming_the_setting(tmp_path: Path, url: str) -> None:
    with pytest.raises(SystemExit) as refused:
        run_worker_process(worker_args(tmp_path / "data", url))
    message = str(refused.value)
    assert "database_url" in message and "s3cret" not in message and "\n" not in message
