"""`memoryos export` and `memoryos import` (`memoryos/cli/bundle.py`): the real entry point once each way
(a subprocess costs an interpreter start), the error paths through `main()` in process. Spaces use the
hashed fake embedder, so no model loads: the import keeps the bundle's vectors when the configured model
name is the bundle's."""

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.cli.main import main
from memoryos.llm.offline.backend import OfflineLLM
from tests.support.fakes import FAKE_MODEL_NAME, FakeClock, HashEmbedder

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "data" / "reference_space"
PAIRS = [
    ("My dog is called Pico.", "Cute name!"),
    ("I work night shifts as a nurse.", "That sounds demanding."),
    ("My sister Maria lives in Porto.", "Porto is lovely."),
]


def open_space(data_dir: Path, user: str) -> Memoryos:
    config = MemoryConfig(
        data_dir=data_dir, faiss_use_gpu="never", ingest_mode="inline", short_term_capacity=2
    )
    return Memoryos.from_config(user, config, embedder=HashEmbedder(), llm=OfflineLLM(), clock=FakeClock())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMORYOS_") or k == "MEMORYOS_MODEL_CACHE_DIR"
    }
    return subprocess.run(
        [sys.executable, "-m", "memoryos.cli.main", *args],
        cwd=REPO,
        env={**env, "MEMORYOS_EMBEDDING_MODEL_NAME": FAKE_MODEL_NAME, "MEMORYOS_FAISS_USE_GPU": "never"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path, list[int]]:
    """(data dir, bundle written by `memoryos export`, page ids retrieval gave before)."""
    data = tmp_path / "data"
    memory = open_space(data, "maya")
    for user, agent in PAIRS:
        memory.add_memory(user, agent, timestamp="2024-05-01 10:00:00")
    before = [page.page_id for page in memory.retrieve("Where does Maria live?").retrieved_pages]
    memory.close()
    bundle = tmp_path / "maya.bundle"
    done = cli("--data-dir", str(data), "export", "--user", "maya", "--out", str(bundle))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["pages"] == len(PAIRS)
    return data, bundle, before


def test_export_then_import_through_the_entry_point(
    exported: tuple[Path, Path, list[int]], tmp_path: Path
) -> None:
    _, bundle, before = exported
    moved = tmp_path / "moved"
    done = cli("--data-dir", str(moved), "import", "--user", "maya2", str(bundle))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["re_embedded"] is False and report["embedding_model"] == FAKE_MODEL_NAME
    memory = open_space(moved, "maya2")
    after = [page.page_id for page in memory.retrieve("Where does Maria live?").retrieved_pages]
    memory.close()
    assert after == before


def test_import_and_export_mistakes_are_one_line_each(
    exported: tuple[Path, Path, list[int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, bundle, _ = exported
    base = ["--data-dir", str(data)]
    damaged = tmp_path / "damaged.bundle"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(damaged, "w") as copy:
        for name in source.namelist():
            copy.writestr(name, source.read(name).replace(b"Porto", b"Paris"))
    cases = [
        (["import", "--user", "new", str(damaged)], 2, "pages.jsonl fails its SHA-256 checksum"),
        (["import", "--user", "new", str(tmp_path / "none.bundle")], 2, "none.bundle: no such file"),
        (["import", "--user", "maya", str(bundle)], 2, "--user: user 'maya' .* already has memory"),
        (["import", "--user", "new"], 2, "FILE: missing"),
        (["import", "--user", "new", str(bundle), "--from-reference", str(REFERENCE)], 2, "not both"),
        (
            ["export", "--user", "nobody", "--out", str(tmp_path / "x.bundle")],
            3,
            "no memory for user 'nobody'",
        ),
        (["export", "--user", "maya", "--out", str(tmp_path / "no" / "x.bundle")], 2, "--out: directory"),
    ]
    for args, status, message in cases:
        code, out, err = run(capsys, *base, *args)
        assert (code, out) == (status, ""), (args, err)
        assert err.count("\n") == 1 and err.startswith("error: ")
        assert re.search(message, err), err
    assert not (data / "default" / "new").exists() and not (tmp_path / "x.bundle").exists()


def test_import_from_the_reference_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import memoryos.portability.reference_import as reference_import

    monkeypatch.setattr(reference_import, "create_embedder", lambda config: HashEmbedder())
    data = tmp_path / "data"
    code, out, err = run(
        capsys, "--data-dir", str(data), "import", "--user", "maya", "--from-reference", str(REFERENCE)
    )
    assert code == 0, err
    assert json.loads(out)["counts"]["mid_term_pages"] == 3
    memory = open_space(data, "maya")
    assert memory.get_user_profile_summary().startswith("Maya is a nurse")
    memory.close()
