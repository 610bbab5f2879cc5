"""Ids drawn without a system call (`memoryos/ids.py`): valid op keys, distinct, and distinct across a fork."""

import os
import re

from memoryos.ids import new_id


def test_ids_are_32_hex_digits_and_do_not_repeat() -> None:
    drawn = [new_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", found) for found in drawn)
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    """A worker forked by rq (or any pre-fork server) must not repeat its parent's next ids."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write_end, new_id().encode())
        os._exit(0)
    os.close(write_end)
    parents_next = new_id()
    childs_next = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{32}", childs_next)
    assert childs_next != parents_next
