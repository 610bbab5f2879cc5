"""`memoryos worker --processes N` whose embedding engine runs the tests' hash embedder, held inside a page
batch while a file exists, so that a test can kill the engine in the middle of one.

    HOLD_FILE_ENV=PATH python -m tests.support.engine_worker [--worker-id ID] [--processes N]
"""

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from services.worker.process import run_worker_process
from tests.support.fakes import HashEmbedder

HOLD_FILE_ENV = "ENGINE_TEST_HOLD_FILE"
"""While the file this names exists, a page batch waits inside `encode`, and `<file>.inside` says one does."""


class HeldHashEmbedder(HashEmbedder):
    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        hold = os.environ.get(HOLD_FILE_ENV)
        if hold and not is_query:
            while Path(hold).exists():
                Path(f"{hold}.inside").touch()
                time.sleep(0.02)
        return super().encode(texts, is_query=is_query)


def held_hash_parts() -> dict[str, Any]:
    """The engine child's embedder (the applying children embed through the engine)."""
    return {"embedder": HeldHashEmbedder()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    args.redis_url, args.data_dir, args.verbose = None, None, False  # from MEMORYOS_* variables
    run_worker_process(args, held_hash_parts)


if __name__ == "__main__":
    main()
