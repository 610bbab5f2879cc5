"""How the service benches report: the machine, and the JSON printed (and written with `--out`)."""

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def machine() -> str:
    """The host, and the GPU when this process has used torch and torch sees one (torch is never imported
    here just to ask: the API benches run without it)."""
    torch = sys.modules.get("torch")
    gpu = "no GPU"
    if torch is not None and torch.cuda.is_available():
        gpu = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {gpu}"


def emit(report: dict[str, Any], out: Path | None) -> None:
    """Print the report as JSON, and write it to `out` too when given."""
    text = json.dumps({**report, "machine": machine()}, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")
