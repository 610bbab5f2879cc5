"""The `locomo` marker is complete and the LoCoMo lookup can point at nothing, so CI's second run of the
marked tests (`MEMORYOS_LOCOMO=<empty folder> pytest -m locomo`, docs/ci.md) is the fresh clone's view."""

import os
import re
import subprocess
import sys
from pathlib import Path

from memoryos.eval.locomo import find_locomo_raw
from tests.support.locomo_data import MARKER

REPO = Path(__file__).resolve().parents[2]
LOOKUPS = re.compile(
    r"\b(find_locomo_raw|locomo_source|locomo_raw|dev_conversations)\b|MEMORYOS_LOCOMO|shared/data"
    r'|"shared" / "data"'
)
"""What a test module names when it reads LoCoMo: the lookup, bench's readers over it, or the path."""


def test_an_empty_folder_in_memoryos_locomo_means_no_data(tmp_path: Path, monkeypatch) -> None:
    """The variable is the only place looked when set: the workplace's copy beside the checkout (present
    here) must not be found behind it."""
    monkeypatch.setenv("MEMORYOS_LOCOMO", str(tmp_path))
    assert find_locomo_raw() is None
    monkeypatch.setenv("MEMORYOS_LOCOMO", str(tmp_path / "missing.json"))
    assert find_locomo_raw() is None

    (tmp_path / "locomo_dev.json").write_text("[]")
    monkeypatch.setenv("MEMORYOS_LOCOMO", str(tmp_path))
    assert find_locomo_raw() == tmp_path / "locomo_dev.json"
    raw = tmp_path / "elsewhere.json"
    raw.write_text("[]")
    monkeypatch.setenv("MEMORYOS_LOCOMO", str(raw))
    assert find_locomo_raw() == raw


def test_every_test_module_naming_a_locomo_lookup_marks_its_readers() -> None:
    """A module that names the lookup or the data's path must carry the marker somewhere (on the tests that
    read; the guard below checks which at run time where the data is present)."""
    unmarked = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "tests").rglob("test_*.py"))
        if path != Path(__file__).resolve()
        and LOOKUPS.search(text := path.read_text(encoding="utf-8"))
        and f"pytest.mark.{MARKER}" not in text
    ]
    assert not unmarked, f"name a LoCoMo lookup without @pytest.mark.{MARKER}: {unmarked}"
    marked = [
        path for path in (REPO / "tests").rglob("test_*.py") if f"pytest.mark.{MARKER}" in path.read_text()
    ]
    assert (
        len(marked) >= 5
    )  # the recall, harness, loader, ONNX and bench tests: a scan that found none is broken


GUARDED_SUITE = """
import os
from pathlib import Path

import pytest


@pytest.fixture
def read_in_setup():
    return Path(os.environ["MEMORYOS_LOCOMO"]).read_text()


def test_unmarked_reads():
    assert Path(os.environ["MEMORYOS_LOCOMO"]).read_text() == "[]"


def test_unmarked_fixture_reads(read_in_setup):
    pass


@pytest.mark.locomo
def test_marked_reads(read_in_setup):
    assert Path(os.environ["MEMORYOS_LOCOMO"]).read_text() == "[]"


def test_unmarked_reads_other_json(tmp_path):
    (tmp_path / "locomo10.json").write_text("[]")
    assert (tmp_path / "locomo10.json").read_text() == "[]"
"""


def test_the_guard_fails_a_test_that_reads_locomo_without_the_marker(tmp_path: Path) -> None:
    """The plugin tests/conftest.py loads, run over a small suite against a stand-in LoCoMo file: the
    unmarked reads fail naming the marker, in the test or a fixture; the marked read and a JSON file that is
    not LoCoMo's pass."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "locomo_dev.json").write_text("[]")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_reads.py").write_text(GUARDED_SUITE)
    env = {**os.environ, "MEMORYOS_LOCOMO": str(data / "locomo_dev.json"), "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider"),
            *("-p", "tests.support.locomo_data", "-o", f"markers={MARKER}: reads LoCoMo", str(suite)),
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes = {
        name: outcome for outcome, name in re.findall(r"^(PASSED|FAILED|ERROR) \S+::(\w+)", run.stdout, re.M)
    }
    assert outcomes == {
        "test_unmarked_reads": "FAILED",
        "test_unmarked_fixture_reads": "ERROR",  # failed in setup
        "test_marked_reads": "PASSED",
        "test_unmarked_reads_other_json": "PASSED",
    }, run.stdout + run.stderr
    assert (
        f"test_unmarked_reads reads LoCoMo data ({data / 'locomo_dev.json'}) but is not marked" in run.stdout
    )
