"""The space pool's own cost per use, with many spaces open (`memoryos/space/pool.py`).

A worker holds thousands of spaces open (4,434 of 100 pages in 4 GiB: docs/service.md), and every write
and read goes through `SpacePool.use`. Spaces here are stand-ins that cost nothing to open or measure, so
the figure is the pool's bookkeeping alone: `--open` spaces opened, then `--uses` uses of random ones.

    python -m bench.engine.space_pool [--open 100 1000 5000] [--uses 20000] [--out FILE]
"""

import argparse
import random
import statistics
import time
from pathlib import Path

from bench.output import emit
from memoryos.space.pool import SpaceKey, SpacePool


class StandIn:
    """A space that holds nothing: what the pool measures is its own work."""

    def close(self) -> None:
        pass


def per_use_us(open_count: int, uses: int) -> float:
    pool: SpacePool[StandIn] = SpacePool(
        lambda key, create: StandIn(),
        memory_budget_bytes=2**62,
        max_open=open_count,
        resident_bytes=lambda s: 1,
    )
    keys = [SpaceKey("bench", f"user{i}", "helper") for i in range(open_count)]
    for key in keys:
        with pool.use(key):
            pass
    picks = random.Random(1).choices(keys, k=uses)
    started = time.perf_counter()
    for key in picks:
        with pool.use(key):
            pass
    return (time.perf_counter() - started) / uses * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--open", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--uses", type=int, default=20000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [
        {
            "open_spaces": n,
            "us_per_use": round(statistics.median(per_use_us(n, args.uses) for _ in range(3)), 2),
        }
        for n in args.open
    ]
    emit({"uses": args.uses, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
