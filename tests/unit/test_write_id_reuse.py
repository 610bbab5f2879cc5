"""A write id reused for other content (issue 35): refused, never answered with the first write's ids.

A write id is an idempotency key: the same id again is the same write retried, so a retry stores nothing
and returns the first ids, while another write under that id is refused (`WriteIdConflictError`) and
stores nothing — before, it was answered as a retry and its text silently dropped.
"""

from pathlib import Path

import pytest

from memoryos.errors import InvalidInputError, WriteIdConflictError
from memoryos.space.ops import AddTurns
from memoryos.space.writes import plan_write
from tests.support.fakes import FakeClock
from tests.unit.test_facade import make
from tests.unit.test_space import turn

DOG = {"user_input": "I adopted a dog called Pico.", "agent_response": "Lovely name!"}
CAT = {"user_input": "I adopted a cat called Miso.", "agent_response": "Lovely name!"}


def test_a_write_id_reused_for_other_content_is_refused_and_a_retry_is_not(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = make(tmp_path, clock=clock)
    first = memory.add_memories([DOG], write_id="chat-1")
    clock.advance(30)  # the retry's default timestamp is later; it is still the same write
    spelled_otherwise = {**DOG, "user_input": f"  {DOG['user_input']} "}  # stored the same: stripped
    assert memory.add_memories([spelled_otherwise], write_id="chat-1") == first
    for turns, ttl_s in (
        ([CAT], None),
        ([DOG, CAT], None),
        ([DOG], 60.0),
        ([{**DOG, "timestamp": "2024-05-01 10:00:00"}], None),
        ([{**DOG, "meta_data": {"channel": "web"}}], None),
    ):
        with pytest.raises(WriteIdConflictError) as conflict:
            memory.add_memories(turns, write_id="chat-1", ttl_s=ttl_s)
        assert isinstance(conflict.value, InvalidInputError) and conflict.value.field == "write_id"
        assert "'chat-1'" in str(conflict.value)
    assert [page.user_input for page in memory.list_pages().pages] == [DOG["user_input"]]
    assert memory.add_memories([CAT], write_id="chat-2") != first  # a new id is a new write
    memory.close()


def test_only_two_content_ids_can_conflict(tmp_path: Path) -> None:
    """A write logged with a random op id (every write before issue 35, or an op built by hand) cannot
    tell its content: a later write under its id is taken as a retry, as before."""
    memory = make(tmp_path)
    (legacy,) = memory.apply_write(AddTurns(turns=[turn(1)], write_id="old-1"))
    assert memory.add_memories([CAT], write_id="old-1") == [legacy]
    planned = plan_write([DOG], max_text_chars=200, at=0.0, write_id="new-1")
    memory.apply_write(planned)
    with pytest.raises(WriteIdConflictError):  # both content ids: told apart inside the transaction
        memory.apply_write(plan_write([CAT], max_text_chars=200, at=0.0, write_id="new-1"))
    stored = memory.write_status("new-1")
    assert stored is not None
    from_an_older_api = planned.model_copy(update={"op_id": "a" * 32})  # a random op id: cannot tell
    assert memory.apply_write(from_an_older_api) == stored.page_ids
    memory.close()
