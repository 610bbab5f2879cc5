"""Writes held for a reindex (issue 14), against a real `redis-server`: when the workers serve a new
embedding model, a space still stored on the old one cannot be opened until its reindex. Its writes wait
aside in order (never dead-lettered, never holding up the other spaces of their shard) and apply after the
reindex, whether it ran on the owner or while no worker ran; a forget erases such a space and its held
writes without waiting for any reindex."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from memoryos import MemoryConfig
from memoryos.portability.reindex import reindex_space
from memoryos.scheduler import shared_scheduler
from memoryos.space.ops import ForgetSpace, op_to_json
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.keys import Keys, shard_of, space_name
from services.queue.owner_calls import OwnerCallClient, OwnerRefusedError
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import LIST_PAGES, REINDEX, STATS
from services.worker.held import HeldWrites
from services.worker.metrics import WorkerCollector
from tests.support.fakes import HashEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

MAYA = SpaceKey("default", "maya", "helper")
OMAR = SpaceKey("default", "omar", "helper")  # the same shard: one shard in these tests
NEW_MODEL = "other-model"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


class Deployment:
    """The queue of one test deployment (one shard, so every space shares it), its data directory, and a
    space of MAYA's stored by workers on the old model before the test's new-model workers start."""

    def __init__(self, server: RedisServer, tmp_path: Path, namespace: str) -> None:
        # Two deliveries before a failing write is dead-lettered: without holding, writes of a space on
        # the old model would be dead-lettered within a few polls.
        self.settings = QueueSettings(
            redis_url=server.url,
            redis_namespace=namespace,
            shard_count=1,
            lease_ttl_s=1.0,  # a killed owner's shard moves after it; a stop waits out a poll of a quarter
            max_deliveries=2,
            batch_entries=2,  # held writes then apply over several polls, as a long backlog would
        )
        self.client = redis.Redis.from_url(server.url)
        self.queue = WriteQueue(self.client, self.settings)
        self.owner_calls = OwnerCallClient(self.client, self.settings)
        self.keys = Keys(namespace)
        self.config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")
        old = Running(self.settings, self.config, "w-old")
        try:
            self.write(MAYA, "first")
            wait_for(lambda: self.pages(MAYA) == ["first"])
        finally:
            old.stop()

    def write(self, key: SpaceKey, text: str) -> None:
        turns = [{"user_input": text, "agent_response": "noted"}]
        self.queue.enqueue(key, plan_write(turns, max_text_chars=500, at=time.time()))

    def pages(self, key: SpaceKey) -> list[str]:
        return [page.user_input for page in self.owner_calls.ask(key, LIST_PAGES, {"limit": 100}).pages]

    def held(self, key: SpaceKey) -> int:
        return int(self.client.llen(self.keys.held(space_name(key))))

    def held_spaces(self) -> set[bytes]:
        return set(self.client.smembers(self.keys.held_spaces(shard_of(MAYA, 1))))

    def stream_empty(self) -> bool:
        return int(self.client.xlen(self.keys.writes(0))) == 0

    def dead_letters(self) -> int:
        return int(self.client.llen(self.keys.dead_letters()))


def scrape(worker: Running, config: MemoryConfig) -> str:
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker.worker, shared_scheduler(config)))
    return generate_latest(registry).decode()


def new_model() -> HashEmbedder:
    return HashEmbedder(name=NEW_MODEL, dim=128, salt="v2")


def test_writes_of_a_space_on_the_old_model_wait_for_its_reindex_then_apply_in_order(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(redis_server, tmp_path, "held")
    worker = Running(deployment.settings, deployment.config, "w-new", embedder=new_model())
    try:
        for text in ("second", "third", "fourth"):
            deployment.write(MAYA, text)
        deployment.write(OMAR, "omar's first")  # behind MAYA's in the same stream
        wait_for(lambda: deployment.stream_empty() and deployment.held(MAYA) == 3)
        assert deployment.pages(OMAR) == ["omar's first"]  # the shard's other spaces go on
        time.sleep(1.0)  # polls go by: under dead-lettering, two deliveries would have done it
        assert deployment.dead_letters() == 0
        assert deployment.held_spaces() == {b"default/maya/helper"}
        assert "memoryos_held_spaces 1.0" in scrape(worker, deployment.config)
        with pytest.raises(OwnerRefusedError) as refused:
            deployment.owner_calls.ask(MAYA, STATS, {})
        assert refused.value.kind == "EmbeddingModelMismatchError"  # unusable until reindexed

        deployment.write(MAYA, "fifth")  # goes behind the held ones
        wait_for(lambda: deployment.held(MAYA) == 4)
        report = deployment.owner_calls.ask(MAYA, REINDEX, {"model": NEW_MODEL})
        assert report.pages == 1  # only what was stored before the move; the held writes come after
        wait_for(lambda: deployment.pages(MAYA) == ["first", "second", "third", "fourth", "fifth"])
        # A held write's page is readable before the worker trims it from the held list: wait for both.
        wait_for(lambda: deployment.held(MAYA) == 0 and deployment.held_spaces() == set())
        assert "memoryos_held_spaces 0.0" in scrape(worker, deployment.config)

        deployment.write(MAYA, "sixth")  # no longer held: applied as any write
        wait_for(lambda: deployment.pages(MAYA)[-1:] == ["sixth"])
        assert deployment.dead_letters() == 0
    finally:
        worker.stop()


def test_the_next_owner_applies_the_held_writes_of_a_space_reindexed_meanwhile(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The owner that held the writes dies; the space is reindexed while no worker runs (the engine's
    own reindex); the worker that takes the shard over finds the space openable and applies them."""
    deployment = Deployment(redis_server, tmp_path, "takeover")
    embedder = new_model()
    dying = Running(deployment.settings, deployment.config, "w-dying", embedder=embedder)
    try:
        deployment.write(MAYA, "second")
        deployment.write(MAYA, "third")
        wait_for(lambda: deployment.held(MAYA) == 2)
    finally:
        dying.kill()
    reindex_space(deployment.config, MAYA.user_id, MAYA.assistant_id, embedder=embedder)
    successor = Running(deployment.settings, deployment.config, "w-next", embedder=embedder)
    try:
        wait_for(lambda: deployment.pages(MAYA) == ["first", "second", "third"])
        wait_for(lambda: deployment.held_spaces() == set())  # trimmed just after the pages are stored
        assert deployment.dead_letters() == 0
    finally:
        successor.stop()


def test_a_forget_erases_a_space_whose_writes_are_held_without_waiting_for_a_reindex(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(redis_server, tmp_path, "forget")
    worker = Running(deployment.settings, deployment.config, "w-new", embedder=new_model())
    space_dir = deployment.config.space_dir(MAYA.user_id, MAYA.assistant_id)
    try:
        deployment.write(MAYA, "my card number is 4111")
        wait_for(lambda: deployment.held(MAYA) == 1)
        # The API's forget: purge what Redis holds of the space, then queue the forget. A write that
        # was accepted between the two is held by the owner, which drops it when it applies the forget.
        deployment.queue.purge(MAYA)
        assert deployment.held(MAYA) == 0 and deployment.held_spaces() == set()
        deployment.write(MAYA, "and my pin is 1234")
        deployment.queue.enqueue(MAYA, ForgetSpace())
        wait_for(lambda: deployment.stream_empty() and not space_dir.exists())
        assert deployment.held(MAYA) == 0 and deployment.held_spaces() == set()
        assert deployment.dead_letters() == 0
        assert worker.worker.consumer.held.count() == 0
        wait_for(lambda: deployment.queue.last_write_id(MAYA) == "0-0")  # her id left Redis too

        deployment.write(MAYA, "hello again")  # a new space, on the new model
        assert deployment.queue.last_write_id(MAYA) != "0-0"
        wait_for(lambda: deployment.pages(MAYA) == ["hello again"])
        assert deployment.queue.last_write_id(MAYA) != "0-0"  # a newer write's note is kept
    finally:
        worker.stop()


def test_chance_tries_of_held_spaces_are_paced_and_a_reindexed_space_goes_first(
    redis_server: RedisServer,
) -> None:
    """A takeover finds 40 held spaces: they are tried 16 every 0.5 s (each failed try costs an open),
    all again each minute; a space whose reindex finished here is tried at once, ahead of them."""
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys("pacing")
    spaces = [SpaceKey("default", f"user{i:02d}", "helper") for i in range(40)]
    client.sadd(keys.held_spaces(0), *[space_name(key) for key in spaces])
    now = [1000.0]
    held = HeldWrites(client, keys, clock=lambda: now[0])
    held.take_over(0)
    assert held.count() == 40 and held.holds(0, spaces[0])

    first = held.due([0])
    assert len(first) == 16 and {shard for shard, _ in first} == {0}
    now[0] += 0.1
    assert held.due([0]) == []  # paced
    reindexed = next(key for key in spaces if (0, key) not in first)
    held.ask_release(reindexed)
    held.ask_release(SpaceKey("default", "nobody", "helper"))  # holds nothing: not tried
    assert held.due([0]) == [(0, reindexed)]  # at once, unpaced
    tried = {key for _, key in first} | {reindexed}
    for _ in range(2):
        now[0] += 0.5
        tried |= {key for _, key in held.due([0])}
    assert tried == set(spaces) and held.due([0]) == []
    now[0] += 0.5
    assert held.due([1]) == []  # another shard's: none of these
    now[0] += 60.0
    assert len(held.due([0])) == 16  # the minute's sweep: every held space again


def test_a_held_write_that_cannot_be_read_back_is_dead_lettered_and_the_rest_apply(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A held op of a version this worker does not know (parked by a newer worker before a rollback)
    goes to the dead-letter list; the space's next held write applies and the space is released."""
    settings = QueueSettings(redis_url=redis_server.url, redis_namespace="unreadable", shard_count=1)
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys("unreadable")
    later = plan_write(
        [{"user_input": "kept", "agent_response": "noted"}], max_text_chars=500, at=time.time()
    )
    newer_op = json.dumps({"kind": "add_turns", "version": 99})
    client.rpush(
        keys.held("default/maya/helper"),
        json.dumps({"entry": "1-0", "op": newer_op}),
        json.dumps({"entry": "2-0", "op": op_to_json(later)}),
    )
    client.sadd(keys.held_spaces(0), "default/maya/helper")
    config = MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")
    worker = Running(settings, config, "w-rollback")
    try:
        reads = OwnerCallClient(client, settings)
        wait_for(lambda: client.scard(keys.held_spaces(0)) == 0)
        assert [page.user_input for page in reads.ask(MAYA, LIST_PAGES, {}).pages] == ["kept"]
        letters = [json.loads(raw) for raw in client.lrange(keys.dead_letters(), 0, -1)]
        assert [(letter["entry"], letter["space"]) for letter in letters] == [("1-0", "default/maya/helper")]
        assert letters[0]["error"].startswith("malformed held write")
        assert client.llen(keys.held("default/maya/helper")) == 0
    finally:
        worker.stop()
