"""Changing a deployment's embedding model while clients keep writing (docs/service.md, "Writes held for a
reindex").

`--spaces` spaces get `--turns` exchanges each from a worker on model A; it stops and a worker on model B
takes every shard; a client writes `--rate` writes/s round-robin over the spaces all along; after
`--hold-s` seconds each space is reindexed through its owner (the call a reindex job makes), one after
another, as `memoryos reindex --all` queues them. Both models are the tests' hash embedder under two names,
so the figures are the service's moving and holding, not a model's time. Reported: the writes held at the
peak, how long the reindex of every space took, how long after it the last held write applied, dead
letters (0 expected), and whether every acknowledged write is stored exactly once, in the order accepted.

    python -m bench.serving.migration [--spaces 200] [--turns 3] [--rate 100] [--hold-s 5] [--out FILE]
"""

import argparse
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench.output import emit
from memoryos import MemoryConfig
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys, space_name
from services.queue.owner_calls import OwnerCallClient
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import LIST_PAGES, REINDEX
from tests.support.fakes import HashEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import running_redis

MODEL_A, MODEL_B = "hash-model-a", "hash-model-b"


class Writer:
    """Writes one exchange per call to the spaces in turn; remembers what each space was acknowledged."""

    def __init__(self, queue: WriteQueue, spaces: list[SpaceKey]) -> None:
        self.queue = queue
        self.spaces = spaces
        self.acknowledged: dict[SpaceKey, list[str]] = {key: [] for key in spaces}
        self.count = 0

    def write(self) -> None:
        key = self.spaces[self.count % len(self.spaces)]
        text = f"{key.user_id} note {self.count}"
        op = plan_write([{"user_input": text, "agent_response": "ok"}], max_text_chars=500, at=time.time())
        self.queue.enqueue(key, op)
        self.acknowledged[key].append(text)
        self.count += 1

    def at_rate(self, rate: float, stop: threading.Event) -> None:
        """`rate` writes a second (open loop: on schedule, however long each takes) until `stop`."""
        started, sent = time.monotonic(), 0
        while not stop.is_set():
            if (wait := started + sent / rate - time.monotonic()) > 0:
                stop.wait(wait)
                continue
            self.write()
            sent += 1


@contextmanager
def worker_in_thread(settings: QueueSettings, config: MemoryConfig, embedder: HashEmbedder) -> Iterator[None]:
    """A worker on a thread serving `embedder`'s model (the tests' `Running`), drained at the end: in a
    thread, so that each phase can serve another model."""
    running = Running(settings, config, "bench", embedder=embedder, llm=None)
    try:
        yield
    finally:
        running.stop()


def held_writes(client: redis.Redis, keys: Keys, spaces: list[SpaceKey]) -> int:
    pipe = client.pipeline(transaction=False)
    for key in spaces:
        pipe.llen(keys.held(space_name(key)))
    return sum(int(n) for n in pipe.execute())


def migrate(root: Path, spaces: int, turns: int, rate: float, hold_s: float) -> dict[str, Any]:
    with running_redis(root / "redis") as server:
        settings = QueueSettings(
            redis_url=server.url, redis_namespace="migration", shard_count=16, lease_ttl_s=2.0
        )
        config = MemoryConfig(data_dir=root / "data", faiss_use_gpu="never")
        client, keys = connect(settings), Keys(settings.redis_namespace)
        queue, reads = WriteQueue(client, settings), OwnerCallClient(client, settings)
        keys_ = [SpaceKey("default", f"user{i:04d}", "helper") for i in range(spaces)]
        writer = Writer(queue, keys_)
        with worker_in_thread(settings, config, HashEmbedder(name=MODEL_A)):
            for _ in range(spaces * turns):
                writer.write()
            wait_for(lambda: queue.depth() == 0, timeout_s=600)
        before = writer.count

        stop = threading.Event()
        writing = threading.Thread(target=writer.at_rate, args=(rate, stop), daemon=True)
        with worker_in_thread(settings, config, HashEmbedder(name=MODEL_B, salt="b")):
            writing.start()
            time.sleep(hold_s)
            held_before = held_writes(client, keys, keys_)
            started = time.monotonic()
            peak = held_before
            for key in keys_:
                reads.ask(key, REINDEX, {"model": MODEL_B}, timeout_s=120)
                peak = max(peak, held_writes(client, keys, keys_))
            reindexed_s = time.monotonic() - started
            stop.set()
            writing.join()
            wait_for(lambda: queue.depth() == 0 and held_writes(client, keys, keys_) == 0, timeout_s=600)
            drained_s = time.monotonic() - started - reindexed_s
            stored = {
                key: [page.user_input for page in reads.ask(key, LIST_PAGES, {"limit": 1000}).pages]
                for key in keys_
            }
        wrong = [space_name(key) for key in keys_ if stored[key] != writer.acknowledged[key]]
        return {
            "spaces": spaces,
            "writes_before_the_change": before,
            "writes_during_the_change": writer.count - before,
            "offered_writes_per_s": rate,
            "held_writes_when_the_reindex_began": held_before,
            "held_writes_peak": peak,
            "reindex_all_s": round(reindexed_s, 2),
            "last_held_write_applied_after_s": round(drained_s, 2),
            "dead_letters": int(client.llen(keys.dead_letters())),
            "spaces_not_exactly_as_acknowledged": len(wrong),
            "examples_not_as_acknowledged": wrong[:5],
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spaces", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--hold-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        emit(migrate(Path(scratch), args.spaces, args.turns, args.rate, args.hold_s), args.out)


if __name__ == "__main__":
    main()
