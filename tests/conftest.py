"""Test-session setup shared by every test directory."""

import os
import shutil
import tempfile

pytest_plugins = [
    "tests.support.postgres_server",  # fixtures postgres_server, database_url
    "tests.support.record_stores",  # both_record_stores: a test once per record store
    "tests.support.locomo_data",  # fails a test that reads LoCoMo without @pytest.mark.locomo
]

_MODEL_CACHE = tempfile.mkdtemp(prefix="memoryos-model-cache-")


def pytest_configure() -> None:
    """Exported query encoders go to a directory of this run, not the user's ~/.cache (subprocesses inherit
    it); each run exports once (a few seconds for MiniLM)."""
    os.environ.setdefault("MEMORYOS_MODEL_CACHE_DIR", _MODEL_CACHE)


def pytest_unconfigure() -> None:
    shutil.rmtree(_MODEL_CACHE, ignore_errors=True)
