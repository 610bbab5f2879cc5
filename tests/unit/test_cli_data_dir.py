"""The default data directory is said where users look (`memoryos --help`, the README) and is where a
command with neither `--data-dir` nor MEMORYOS_DATA_DIR keeps memory: relative to the directory it runs in."""

import os
import subprocess
import sys
from pathlib import Path

from memoryos.cli.main import DEFAULT_DATA_DIR, build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def test_help_and_the_readme_name_the_default_data_directory() -> None:
    assert not DEFAULT_DATA_DIR.is_absolute()
    shown = f"./{DEFAULT_DATA_DIR}"
    assert f"default {shown}, in the directory you run from" in " ".join(build_parser().format_help().split())
    assert f"`{shown}`, relative to the directory you run from" in " ".join(README.read_text().split())


def test_without_a_data_dir_memory_is_kept_in_the_default_under_the_working_directory(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MEMORYOS_")}
    argv = ["add", "--user", "maya", "--user-input", "I live in Lyon.", "--agent-response", "Noted."]
    child = subprocess.run(
        [sys.executable, "-m", "memoryos.cli.main", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert (tmp_path / DEFAULT_DATA_DIR / "default" / "maya").is_dir()
