"""Lifecycle costs: deleting and editing one page, and an expiry sweep, in a space of a given size.

A delete merges the full-text index, rewrites the index snapshot and checkpoints the WAL (so the deleted
words leave every file): costs that grow with the space, paid by the caller that deletes.

    python -m bench.engine.lifecycle --pages 1000 10000
"""

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.corpus import ReusingEmbedder, dev_conversations, exchanges
from bench.engine.latency import _percentiles
from memoryos import MemoryConfig, Memoryos
from memoryos.embedding import create_embedder

TIMED = 20
FILL_BATCH = 256


def lifecycle_at_size(pages: int, workdir: Path) -> dict[str, Any]:
    model = create_embedder(MemoryConfig())
    memory = Memoryos(
        user_id=f"life{pages}",
        openai_api_key=None,
        data_storage_path=workdir,
        embedder=ReusingEmbedder(model),
    )
    fill = exchanges(pages, dev_conversations())
    for start in tqdm(range(0, pages, FILL_BATCH), desc=f"fill {pages:,}", unit="batch", leave=False):
        memory.add_memories(fill[start : start + FILL_BATCH])
    memory.flush()
    ids = [p.page_id for p in memory.list_pages(limit=1000).pages]
    timings: dict[str, list[float]] = {"delete_page": [], "update_page": []}
    for page_id in ids[:TIMED]:
        started = time.perf_counter()
        memory.delete_page(page_id)
        timings["delete_page"].append((time.perf_counter() - started) * 1000)
    for page_id in ids[TIMED : 2 * TIMED]:
        started = time.perf_counter()
        memory.update_page(page_id, user_input=f"edited {page_id}")
        timings["update_page"].append((time.perf_counter() - started) * 1000)
    memory.flush()
    memory.close()
    return {"pages": pages, **{name: _percentiles(samples) for name, samples in timings.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        rows = [lifecycle_at_size(n, Path(workdir)) for n in args.pages]
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
