"""The new process `bench.storage.postgres --only cold-open` starts: open one space and answer one retrieve.

It imports what a worker needs to serve a read (the config, the space, retrieval), opens the existing
space (`MemorySpace(create=False)`: its store, its index from the snapshot or rebuilt from the store's
vectors, its score sample), ranks a random unit query vector with the question's words
(`retrieve_context`: every tier, facts and profile), prints one JSON line and exits at once (`os._exit`:
no close, so no snapshot is written behind the measurement).

    python -m bench.storage.cold_child '{"directory": ..., "data_dir": ..., "database_url": null, ...}'
"""

import time

STARTED = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from memoryos.config import MemoryConfig  # noqa: E402
from memoryos.planning.retrieval import retrieve_context  # noqa: E402
from memoryos.space.memory_space import MemorySpace  # noqa: E402


def main() -> None:
    imported = time.perf_counter()
    spec = json.loads(sys.argv[1])
    config = MemoryConfig(
        data_dir=Path(spec["data_dir"]), database_url=spec["database_url"], faiss_use_gpu="never"
    )
    configured = time.perf_counter()
    space = MemorySpace(
        Path(spec["directory"]), config, spec["model"], lambda: int(spec["dim"]), create=False
    )
    opened = time.perf_counter()
    vector = np.random.default_rng(spec.get("seed", 0)).standard_normal(int(spec["dim"])).astype(np.float32)
    vector /= np.linalg.norm(vector)
    context = retrieve_context(
        space, spec["query"], vector, config.retrieval_queue_capacity, config.knowledge_top_k, time.time()
    )
    answered = time.perf_counter()
    print(
        json.dumps(
            {
                "imports_s": round(imported - STARTED, 4),
                "config_s": round(configured - imported, 4),
                "open_s": round(opened - configured, 4),
                "first_retrieve_s": round(answered - opened, 4),
                "open_to_answer_s": round(answered - configured, 4),
                "pages_returned": len(context.retrieved_pages),
                "indexed": space.page_index.count(),
            }
        ),
        flush=True,
    )
    os._exit(0)


if __name__ == "__main__":
    main()
