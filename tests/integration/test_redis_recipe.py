"""docs/service.md's "Redis mode on one machine" recipe, run as the doc gives it: its bash block, read from
the doc (so the two cannot drift), with the ports it names swapped for free ones, in a temp directory. Real
`redis-server`, `memoryos worker` and `memoryos serve` processes; the recipe's own curl lines write and
retrieve, and the processes stop on SIGTERM."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
MARKER = "<!-- tests/integration/test_redis_recipe.py runs this block"
REDIS_PORT, API_PORT = "6380", "8765"
RUN_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def recipe() -> str:
    """The bash block right after the marker in docs/service.md."""
    text = DOC.read_text()
    assert MARKER in text, f"{DOC.name} lost the recipe's marker"
    found = re.match(r"[^\n]*\n```bash\n(.*?)\n```", text[text.index(MARKER) :], re.DOTALL)
    assert found, "the marker is not followed by a ```bash block"
    return found.group(1)


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def stop_group(group: int) -> bool:
    """SIGTERM to every process the recipe started; whether all of them exited within STOP_TIMEOUT_S (those
    left are killed)."""
    if not group_alive(group):
        return True
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while group_alive(group):
        if time.monotonic() > deadline:
            os.killpg(group, signal.SIGKILL)
            return False
        time.sleep(0.1)
    return True


def test_the_one_machine_redis_recipe_writes_retrieves_and_stops(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None or shutil.which("curl") is None:
        pytest.fail("the recipe needs redis-server and curl on PATH (.ci/run installs them with apt)")
    script = recipe()
    for setting in (
        "--appendonly yes",
        "--appendfsync always",
        "--maxmemory-policy noeviction",
        "--maxmemory ",
    ):
        assert setting in script, f"the recipe's redis-server lacks {setting.strip()}"
    assert REDIS_PORT in script and API_PORT in script
    redis_port, api_port = free_port(), free_port()
    script = script.replace(REDIS_PORT, str(redis_port)).replace(API_PORT, str(api_port))
    env = {name: value for name, value in os.environ.items() if not name.startswith("MEMORYOS_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this venv's memoryos
    env["MEMORYOS_WORKER_METRICS_PORT"] = str(free_port())  # the doc's 9400 may be taken here
    env["MEMORYOS_WORKER_HEALTH_PORT"] = str(free_port())  # and its 9399

    shell = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the recipe's `&` processes share its process group
    )
    try:
        try:
            stdout, stderr = shell.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            shell.kill()
            stdout, stderr = shell.communicate()
        logs = "\n".join(f"{log.name}:\n{log.read_text()[-2000:]}" for log in sorted(tmp_path.glob("*.log")))
        assert shell.returncode == 0, f"the recipe failed:\n{stdout}\n{stderr}\n{logs}"

        config = redis.Redis(port=redis_port).config_get("*")
        assert (config["appendonly"], config["appendfsync"]) == ("yes", "always")
        assert config["maxmemory-policy"] == "noeviction" and int(config["maxmemory"]) > 0

        ready, written, retrieved = (json.loads(line) for line in stdout.splitlines())
        assert ready == {"status": "ready"}
        assert written["write_id"] == "pico-1"
        assert [page["user_input"] for page in retrieved["retrieved_pages"]] == [
            "I adopted a dog called Pico."
        ]
    finally:
        stopped = stop_group(shell.pid)
    assert stopped, f"the recipe's processes outlived SIGTERM by {STOP_TIMEOUT_S} s"
    space = tmp_path / "memoryos_data" / "default" / "maya" / "default_assistant_profile"
    assert (space / "memory.sqlite").is_file()
    assert any((tmp_path / "redis-data" / "appendonlydir").iterdir())
