"""The README's Python snippet, read from the README and run twice as a user would, in a new directory: both
runs succeed and say nothing on stderr. A snippet that never closes its store leaves the second run
rebuilding the vector index ("page index rebuilt from the store"); `with Memoryos(...)` closes it.

The runs keep this test run's model cache (tests/conftest.py), not the user's ~/.cache: a first run on
an empty one exported the model with PyTorch for seconds, and that such a run prints nothing is
tests/e2e/test_cli.py's (test_the_model_loading_bar_shows_only_with_verbose)."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_snippet_runs_twice_without_a_warning(tmp_path: Path) -> None:
    [snippet] = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert "with Memoryos(" in snippet
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("MEMORYOS_") or name == "MEMORYOS_MODEL_CACHE_DIR"
    }
    for run in ("first", "second"):
        child = subprocess.run(
            [sys.executable, "-c", snippet],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == 0, f"{run} run: {child.stderr}"
        assert child.stderr == "", f"{run} run: {child.stderr}"
        assert "Pico" in child.stdout
    assert (tmp_path / "memoryos_data").is_dir()
