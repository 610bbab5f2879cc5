"""The ingest bench's feeder queues exactly what the API would: its writes go through the producer's own
script (pipelined), so a change to that script's keys or arguments cannot leave the bench queueing
malformed entries — it did once, and every GPU run of the bench failed at its first write."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.serving.ingest import Feeder
from memoryos.eval.locomo import LocomoConversation, LocomoPair
from memoryos.space.ops import AddTurns, op_from_json
from services.queue.keys import Keys, space_name
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

USERS, TURNS = 3, 2


def conversation(pairs: int) -> LocomoConversation:
    return LocomoConversation(
        sample_id="s",
        speaker_a="A",
        speaker_b="B",
        pairs=[
            LocomoPair(
                index=i,
                session=1,
                timestamp="2024-01-01 13:00:00",
                timestamp_raw="1:00 pm on 1 January, 2024",
                user_input=f"question {i}",
                agent_response=f"answer {i}",
                dia_ids=[f"D1:{i}"],
            )
            for i in range(pairs)
        ],
        qa=[],
    )


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[QueueSettings]:
    with running_redis(tmp_path / "redis") as server:
        yield QueueSettings(redis_url=server.url, shard_count=4, redis_namespace="feeder")


def test_feeder_queues_each_users_turns_in_order_as_the_api_would(settings: QueueSettings) -> None:
    feeder = Feeder(settings, USERS, TURNS, [conversation(4)])
    for _ in range(TURNS):
        feeder.queue_slice()
    client = redis.Redis.from_url(settings.redis_url)
    keys, queue = Keys(settings.redis_namespace), WriteQueue(client, settings)
    by_space: dict[str, list[AddTurns]] = {}
    for shard in range(settings.shard_count):
        for _, fields in client.xrange(keys.writes(shard)):
            op = op_from_json(fields[b"op"])
            assert isinstance(op, AddTurns)
            by_space.setdefault(fields[b"space"].decode(), []).append(op)
    spaces = [feeder.space(0, user) for user in range(USERS)]
    assert sorted(by_space) == sorted(space_name(space) for space in spaces)
    for space in spaces:
        ops = by_space[space_name(space)]
        assert [op.write_id for op in ops] == [f"t{turn}" for turn in range(TURNS)]
        assert queue.last_write_id(space) != "0-0"  # noted as the space's newest write, as the API does
    texts = [op.turns[0].user_input for ops in by_space.values() for op in ops]
    assert len(set(texts)) == USERS * TURNS  # every text distinct
    assert feeder.to_wait_for() == [(space, f"t{TURNS - 1}") for space in spaces]
