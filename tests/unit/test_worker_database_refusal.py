"""Until the worker serves spaces from PostgreSQL, a worker given a database URL refuses to start with one
line that says so, rather than answering reads from nothing."""

import os
import subprocess
import sys


def test_a_worker_with_a_database_url_refuses_to_start() -> None:
    env = {**os.environ, "MEMORYOS_DATABASE_URL": "postgresql://memoryos@127.0.0.1:1/memoryos"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from memoryos.cli.main import main; main()",
            "worker",
            "--redis-url",
            "redis://127.0.0.1:1/0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "MEMORYOS_DATABASE_URL" in done.stderr and "PostgreSQL" in done.stderr
    assert "Traceback" not in done.stderr
