"""`memoryos worker` with the tests' hash embedder in place of the model: the worker's applying alone, run
as deployed (its own process, or `--processes N` under the real supervisor) for `bench.serving.ingest`.

    python -m bench.serving.instant_worker [--redis-url URL] [--worker-id ID] [--processes N]
"""

import argparse
from typing import Any

from services.worker.process import run_worker_process
from tests.support.fakes import HashEmbedder


def hash_embedder_parts() -> dict[str, Any]:
    """The parts every space of the worker gets: the hash embedder (imported anew by each spawned child)."""
    return {"embedder": HashEmbedder()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    args.data_dir, args.verbose = None, False  # the data directory comes from MEMORYOS_DATA_DIR
    run_worker_process(args, hash_embedder_parts)


if __name__ == "__main__":
    main()
