"""Every install command the project gives installs this checkout, never PyPI's `memoryos`.

PyPI's `memoryos` is an unrelated project: a line that installs the bare name (with or without an extra)
installs someone else's code. The distribution keeps its name (the lock and every install command use
it), so the docs and error messages name the checkout instead.
"""

import re
import shlex
from pathlib import Path

from memoryos.errors import MissingExtraError, extra_install_command

ROOT = Path(__file__).resolve().parents[2]
EXEMPT = {ROOT / "docs" / "history.md", Path(__file__).resolve()}
"""Notes on how the project got here, which quote the old lines, and this file's examples."""

BARE_NAME_INSTALL = re.compile(
    r"""\b(?:pip3?|pipx)\s+install\s+(?:-\S*\s+)*['"]?memoryos(?![\w.-])""", re.IGNORECASE
)
"""`pip install memoryos`, `pip install 'memoryos[service]'`, `pipx install -q memoryos==1`, ...: the bare
name, then an extra, a version, a quote or nothing. `memoryos-pro` and paths (`./MemoryOS[service]`) pass."""


def project_files() -> list[Path]:
    """The `.py` and `.md` files of the checkout, without hidden folders (`.git`, `.venv`) or virtual
    environments made inside it."""
    venvs = [found.parent for found in ROOT.glob("*/pyvenv.cfg")]
    return [
        path
        for suffix in ("*.py", "*.md")
        for path in ROOT.rglob(suffix)
        if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
        and not any(path.is_relative_to(venv) for venv in venvs)
        and path not in EXEMPT
    ]


def test_the_pattern_finds_the_bare_name_and_passes_the_checkout() -> None:
    for line in (
        "pip install 'memoryos[service]'",
        'python3 -m pip install "memoryos[torch]"',
        "pip install memoryos",
        "pipx install --force memoryos==2.0.33",
    ):
        assert BARE_NAME_INSTALL.search(line), line
    for line in (
        "python3 -m pip install -e '.[service]'",
        "pip install -e '/home/me/MemoryOS[service]'",
        "pip install --no-deps memoryos-pro==0.1.0",
        "pip install -r requirements/dev.txt -e .",
    ):
        assert not BARE_NAME_INSTALL.search(line), line


def test_no_file_installs_memoryos_from_pypi_by_its_bare_name() -> None:
    files = project_files()
    assert ROOT / "README.md" in files and ROOT / "memoryos" / "errors.py" in files
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if BARE_NAME_INSTALL.search(line)
    ]
    assert not found, "these lines install PyPI's unrelated `memoryos`:\n" + "\n".join(found)


def test_a_missing_extra_names_the_command_that_installs_this_checkout() -> None:
    """Run from a checkout (an editable install), the command is the checkout's path with the extra:
    runnable from any directory."""
    command = extra_install_command("service")
    assert shlex.split(command) == ["python3", "-m", "pip", "install", "-e", f"{ROOT}[service]"]
    assert command in str(MissingExtraError("service", "fastapi"))
