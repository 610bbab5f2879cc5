"""How the service benches report: the machine, and the JSON printed (and written with `--out`)."""

import json
import os
import platform
from pathlib import Path
from typing import Any


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, no GPU"


def emit(report: dict[str, Any], out: Path | None) -> None:
    """Print the report as JSON, and write it to `out` too when given."""
    text = json.dumps({**report, "machine": machine()}, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")
