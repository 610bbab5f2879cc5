"""Storage faults under the running API (the engine's own checks are in tests/unit: test_space.py,
test_space_snapshots.py, test_faiss_index.py, test_facade.py): a truncated or garbage index snapshot, a
corrupt SQLite store, and a full disk. The process says what failed, keeps what it had, refuses rather
than writing over a store it cannot read, and loses no acknowledged write.

The full disk is real where this test runs as root: a 2 MiB tmpfs mounted for the test
(`mount -t tmpfs -o size=2m`), the API's data directory on it. Elsewhere the same engine path is driven in
a child process whose file-size limit (`RLIMIT_FSIZE`, which makes a write past it fail as a full disk
does) is lowered and then raised again; that variant runs everywhere.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from memoryos import MemoryConfig
from memoryos.space.layout import STORE_FILE
from memoryos.storage.vectors.index_factory import page_snapshot_path
from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def page_text(i: int) -> str:
    return f"Entry {i}: the word{i} and colour{i * 7} belong together."


def write_pages(api: RunningApi, user: str, numbers: range) -> None:
    turns = [{"user_input": page_text(i), "agent_response": "ok"} for i in numbers]
    answer = api.http.post(f"{api.space_url(user)}/memories/batch", json={"turns": turns}, timeout=30)
    assert answer.status_code == 202, answer.text


def assert_every_page_found(api: RunningApi, user: str, numbers: range) -> None:
    pages = api.http.get(f"{api.space_url(user)}/memories", params={"limit": 1000}, timeout=30).json()
    assert sorted(p["user_input"] for p in pages["pages"]) == sorted(page_text(i) for i in numbers)
    for i in numbers:
        found = api.http.post(
            f"{api.space_url(user)}/retrieve", json={"query": page_text(i), "top_k": 1}, timeout=30
        )
        assert found.status_code == 200, found.text
        assert found.json()["retrieved_pages"][0]["user_input"] == page_text(i)


def api_on(data_dir: Path) -> AbstractContextManager[RunningApi]:
    config = offline_config(data_dir, short_term_capacity=1000, faiss_use_gpu="never")
    return running_api(ApiSettings(port=0), config, embedder=HashEmbedder())


def fill_and_close(data_dir: Path, pages: dict[str, int]) -> None:
    """Write and find `pages[user]` pages per user, then stop the API (which snapshots each index)."""
    with api_on(data_dir) as api:
        for user, count in pages.items():
            write_pages(api, user, range(count))
            assert_every_page_found(api, user, range(count))


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_index_snapshot_is_rebuilt_from_the_store_with_a_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    fill_and_close(tmp_path, {"maya": 12})
    snapshot = page_snapshot_path(MemoryConfig(data_dir=tmp_path), tmp_path / "default" / "maya" / "bot")
    assert snapshot.stat().st_size > 0, "closing the API wrote no snapshot"
    data = snapshot.read_bytes()
    snapshot.write_bytes(data[: len(data) // 2] if damage == "truncated" else os.urandom(len(data)))
    with caplog.at_level(logging.WARNING, logger="memoryos"), api_on(tmp_path) as api:
        assert_every_page_found(api, "maya", range(12))
        write_pages(api, "maya", range(12, 15))  # and it keeps working
        assert_every_page_found(api, "maya", range(15))
    assert "page index rebuilt from the store" in caplog.text


@pytest.mark.parametrize("damage", ["header", "truncated"])
def test_a_corrupt_store_is_refused_with_a_clear_error_and_left_as_it_was(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    fill_and_close(tmp_path, {"maya": 30, "ola": 5})
    store = tmp_path / "default" / "maya" / "bot" / STORE_FILE
    data = store.read_bytes()
    damaged = b"\x00not a database\x00" * 8 + data[128:] if damage == "header" else data[: len(data) // 3]
    store.write_bytes(damaged)
    with caplog.at_level(logging.ERROR, logger="services.api"), api_on(tmp_path) as api:
        space = api.space_url("maya")
        for method, url, body in [
            ("GET", f"{space}/memories", None),
            ("POST", f"{space}/retrieve", {"query": "word3"}),
            ("POST", f"{space}/memories", {"user_input": "new", "agent_response": "ok"}),
            ("GET", f"{space}/profile", None),
        ]:
            answer = api.http.request(method, url, json=body, timeout=30)
            assert answer.status_code == 500 and answer.json()["error"] == "storage_error", (
                method,
                url,
                answer.text,
            )
        assert api.http.get(f"{api.url}/readyz").status_code == 200
        assert_every_page_found(api, "ola", range(5))  # the other spaces keep working
        write_pages(api, "ola", range(5, 8))
    assert store.read_bytes() == damaged  # nothing was written over it
    assert "memory store failed (StorageError)" in caplog.text
    assert "not a database" in caplog.text or "malformed" in caplog.text  # says what is wrong


# --- a full disk ---------------------------------------------------------------------------------------
@contextmanager
def small_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs root to mount a tmpfs; the RLIMIT_FSIZE variant runs instead")
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_a_full_disk_refuses_writes_cleanly_and_loses_nothing_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_tmpfs(tmp_path, "2m") as disk:
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * 512 * 1024)  # room to give back once the disk is full
        acknowledged: list[str] = []
        with caplog.at_level(logging.ERROR, logger="services.api"), api_on(disk / "data") as api:
            space = api.space_url("maya")
            refused = None
            for i in range(5000):
                text = page_text(i) + " padding" * 150
                answer = api.http.post(
                    f"{space}/memories", json={"user_input": text, "agent_response": "ok"}, timeout=30
                )
                if answer.status_code != 201:
                    refused = answer
                    break
                acknowledged.append(text)
            assert refused is not None and acknowledged, "the disk never filled"
            assert refused.status_code == 500 and refused.json()["error"] == "storage_error", refused.text
            assert "database or disk is full" in caplog.text  # the log says why
            listed = api.http.get(f"{space}/memories", params={"limit": 1000}, timeout=30)
            assert listed.status_code == 200 and listed.json()["total"] == len(acknowledged)  # reads go on

            ballast.unlink()  # room again: the same process recovers without a restart
            extra = {"user_input": "written after the disk had room again", "agent_response": "ok"}
            assert api.http.post(f"{space}/memories", json=extra, timeout=30).status_code == 201
            acknowledged.append(extra["user_input"])
            found = api.http.post(
                f"{space}/retrieve", json={"query": acknowledged[0], "top_k": 1}, timeout=30
            )
            assert found.status_code == 200, found.text
        with api_on(disk / "data") as api:  # and after a restart, every acknowledged write is there
            pages = api.http.get(
                f"{api.space_url('maya')}/memories", params={"limit": 1000}, timeout=30
            ).json()
            assert [p["user_input"] for p in pages["pages"]] == acknowledged
            for text in (acknowledged[0], acknowledged[-1]):
                hit = api.http.post(
                    f"{api.space_url('maya')}/retrieve", json={"query": text, "top_k": 1}, timeout=30
                )
                assert hit.json()["retrieved_pages"][0]["user_input"] == text


CHILD = r"""
import json, resource, signal, sys
from pathlib import Path
from memoryos import MemoryConfig, Memoryos, StorageError
from tests.support.fakes import HashEmbedder

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
root = Path(sys.argv[1])
config = MemoryConfig(data_dir=root, faiss_use_gpu="never", ingest_mode="inline", short_term_capacity=10**6)
memory = Memoryos.from_config("maya", config, embedder=HashEmbedder())
memory.add_memory("first page", "ok")
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
store = root / "default" / "maya" / "default_assistant_profile" / "memory.sqlite"
resource.setrlimit(resource.RLIMIT_FSIZE, (store.stat().st_size + (root / "default" / "maya" / "default_assistant_profile" / "memory.sqlite-wal").stat().st_size + 256 * 1024, hard))
acknowledged, error, refused = ["first page"], None, None
for i in range(10000):
    text = f"page {i}" + " padding" * 150
    try:
        memory.add_memory(text, "ok")
    except StorageError as failure:
        error, refused = str(failure), text
        break
    acknowledged.append(text)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
memory.add_memory("after the limit was raised", "ok")
acknowledged.append("after the limit was raised")
memory.close()
print(json.dumps({"acknowledged": acknowledged, "error": error, "refused": refused}))
"""


def test_a_file_size_limit_refuses_writes_with_a_storage_error_and_loses_nothing(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["error"] is not None and "could not be written" in report["error"], report["error"]
    assert len(report["acknowledged"]) > 2
    with api_on(tmp_path) as api:
        url = f"{api.url}/v1/users/maya/assistants/default_assistant_profile/memories"
        pages = api.http.get(url, params={"limit": 1000}, timeout=30).json()
        listed = [p["user_input"] for p in pages["pages"]]
        # The refused write may be there too: where the limit struck its vectors, its text had been
        # committed already (an inline write stores the page, then waits for its vector); it is embedded
        # on a later open, as any page stored but not yet embedded. Nothing acknowledged is missing.
        acknowledged = report["acknowledged"]
        assert listed in (acknowledged, [*acknowledged[:-1], report["refused"], acknowledged[-1]]), listed
