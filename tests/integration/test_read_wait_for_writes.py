"""A worker's read waiting for its writes to leave the shard's stream, against a real `redis-server`: it
looks in Redis when the consumer says entries left (`services/worker/stream_progress.py`), not every
10 ms, and still notices on its own writes that left unseen (applied by the shard's next owner)."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memoryos import MemoryConfig
from services.queue.keys import Keys
from services.queue.settings import QueueSettings
from services.worker import stream_progress
from services.worker.owner_calls import OwnerCallServer
from services.worker.spaces import WorkerSpaces
from services.worker.stream_progress import StreamProgress
from tests.support.fakes import HashEmbedder
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

SHARD = 3


@pytest.fixture
def client(tmp_path: Path) -> Iterator[redis.Redis]:
    with running_redis(tmp_path / "redis") as server:
        yield redis.Redis.from_url(server.url)


def read_server(client: redis.Redis, tmp_path: Path, progress: StreamProgress) -> OwnerCallServer:
    url = client.connection_pool.connection_kwargs
    settings = QueueSettings(redis_url=f"redis://{url['host']}:{url['port']}/0", read_timeout_s=10.0)
    spaces = WorkerSpaces(MemoryConfig(data_dir=tmp_path / "spaces"), settings, embedder=HashEmbedder())
    return OwnerCallServer(client, settings, spaces, lambda: [SHARD], lambda key: None, progress)


def lookups(client: redis.Redis) -> int:
    """XRANGE calls Redis has served: how a waiting read looks for its write."""
    return int(client.info("commandstats").get("cmdstat_xrange", {}).get("calls", 0))


def waiting_read(server: OwnerCallServer, through: str) -> threading.Thread:
    thread = threading.Thread(target=server._wait_applied, args=(SHARD, through), daemon=True)
    thread.start()
    return thread


def test_a_waiting_read_looks_again_when_told_that_entries_left(
    client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_progress, "UNTOLD_S", 30.0)  # no looking on its own in this test
    progress = StreamProgress()
    server = read_server(client, tmp_path, progress)
    stream = Keys(server.settings.redis_namespace).writes(SHARD)
    entry = client.xadd(stream, {"space": "acme/maya/helper"}).decode()
    before = lookups(client)

    read = waiting_read(server, entry)
    time.sleep(0.5)
    assert read.is_alive()
    assert lookups(client) - before <= 2  # polled every 10 ms, it made ~50
    assert server.shards_awaiting_writes() == {SHARD}  # the held worker applies this shard

    client.xdel(stream, entry)
    progress.left(SHARD + 1)  # another shard's news does not wake it into a look
    time.sleep(0.2)
    assert read.is_alive() and lookups(client) - before <= 2
    progress.left(SHARD)  # what the consumer says after acknowledging
    read.join(5)
    assert not read.is_alive()
    assert server.shards_awaiting_writes() == frozenset()


def test_a_waiting_read_notices_writes_that_left_unseen(
    client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shard's next owner applies them in another process, and tells nobody here."""
    monkeypatch.setattr(stream_progress, "UNTOLD_S", 0.05)
    server = read_server(client, tmp_path, StreamProgress())
    stream = Keys(server.settings.redis_namespace).writes(SHARD)
    entry = client.xadd(stream, {"space": "acme/maya/helper"}).decode()

    read = waiting_read(server, entry)
    time.sleep(0.2)
    assert read.is_alive()
    client.xdel(stream, entry)
    read.join(5)
    assert not read.is_alive()


def test_a_read_whose_writes_never_leave_times_out(client: redis.Redis, tmp_path: Path) -> None:
    server = read_server(client, tmp_path, StreamProgress())
    server.settings = server.settings.model_copy(update={"read_timeout_s": 0.3})
    stream = Keys(server.settings.redis_namespace).writes(SHARD)
    entry = client.xadd(stream, {"space": "acme/maya/helper"}).decode()

    with pytest.raises(TimeoutError, match="not applied in time"):
        server._wait_applied(SHARD, entry)
