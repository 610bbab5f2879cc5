"""A crash between an index snapshot and later writes loses no acknowledged page, for every vector backend.

A child process writes pages through a real `MemorySpace` (hashed fake embedder, no model), snapshots the
page index part way, keeps writing and printing each acknowledged op, and is SIGKILLed by this process in
the middle of its writes. Reopening the space through the `Memoryos` facade must find every acknowledged
page in the page index, each one its own nearest neighbour: the snapshot plus the store's replay of the
pages written after it.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.storage.vectors.index_factory import CHROMA_DIRECTORY, close_page_index, load_page_index
from memoryos.types import exchange_text
from tests.support.fakes import FAKE_DIM, FakeClock, HashEmbedder

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
USER, ASSISTANT = "carol", "helper"
TURNS_PER_OP = 5
SNAPSHOT_AFTER_OPS = 10
KILL_AFTER_OPS = 20
MAX_OPS = 60
IVF_THRESHOLD = 50
"""The faiss-ivf case turns approximate at 50 pages; the child waits for that background build before its
snapshot, so the snapshot is IVF too."""

BACKENDS: dict[str, dict[str, Any]] = {
    "faiss-flat": {"vector_backend": "faiss", "index_ann_threshold": 10**9},
    "faiss-ivf": {"vector_backend": "faiss", "index_ann_threshold": IVF_THRESHOLD},
    "chroma": {"vector_backend": "chroma"},
}


def page_text(i: int) -> tuple[str, str]:
    """Exchange `i`: a word no other page has (`tag<i>`), so its vector is its own nearest neighbour."""
    topics = ["garden tomatoes", "sailing regatta", "jazz quartet", "mountain cabin", "quantum homework"]
    return f"The {topics[i % 5]} tag{i} is on my mind.", f"Noted tag{i} about the {topics[i % 5]}."


def config_for(root: Path, backend: str) -> MemoryConfig:
    return MemoryConfig(
        data_dir=root,
        faiss_use_gpu="never",
        index_snapshot_every_ops=10**6,  # only the explicit snapshot, so the crash lands after it
        index_snapshot_every_s=10**6,
        **BACKENDS[backend],
    )


# The child: ops of TURNS_PER_OP pages; after op SNAPSHOT_AFTER_OPS a snapshot; "<op> <first> <last>" printed
# once each op returns (its acknowledgement); it runs until killed.
CHILD = r"""
import sys
from pathlib import Path
from memoryos.space.ops import AddTurns
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.vectors.index_factory import finish_page_index_rebuild
from memoryos.types import Turn
from tests.integration.test_index_crash import (
    ASSISTANT, MAX_OPS, SNAPSHOT_AFTER_OPS, TURNS_PER_OP, USER, config_for, page_text,
)
from tests.support.fakes import HashEmbedder

config = config_for(Path(sys.argv[1]), sys.argv[2])
embedder = HashEmbedder()
space = MemorySpace(config.space_dir(USER, ASSISTANT), config, embedder.name, lambda: embedder.dim)
for op in range(MAX_OPS):
    numbers = range(op * TURNS_PER_OP, (op + 1) * TURNS_PER_OP)
    turns = [
        Turn(user_input=page_text(i)[0], agent_response=page_text(i)[1], timestamp="2024-05-01 10:00:00")
        for i in numbers
    ]
    page_ids = space.apply(AddTurns(turns=turns, vectors=embedder.encode([t.text() for t in turns])))
    print(op, page_ids[0], page_ids[-1], flush=True)
    if op + 1 == SNAPSHOT_AFTER_OPS:
        with space.lock:
            finish_page_index_rebuild(space.page_index)
        space.snapshot()
        print("snapshot", flush=True)
"""


def run_child_until_killed(root: Path, backend: str) -> dict[int, int]:
    """{exchange number: page id} of every op the child acknowledged before it was SIGKILLed mid-write."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), backend],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines = []
    for line in child.stdout:
        lines.append(line)
        if line.split()[0] == str(KILL_AFTER_OPS - 1):
            child.send_signal(signal.SIGKILL)  # the child is already writing the next op
            break
    remaining, stderr = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, stderr
    acks: dict[int, int] = {}
    for line in [*lines, *remaining.splitlines(keepends=True)]:
        fields = line.split()
        if line.endswith("\n") and len(fields) == 3:  # a torn last line acknowledges nothing
            op, first, last = map(int, fields)
            acks.update(
                zip(range(op * TURNS_PER_OP, (op + 1) * TURNS_PER_OP), range(first, last + 1), strict=True)
            )
    assert "snapshot\n" in lines
    return acks


@pytest.mark.parametrize(
    "backend",
    ["faiss-flat", "faiss-ivf", "chroma"],
)
def test_acknowledged_pages_survive_a_crash_after_a_snapshot(tmp_path: Path, backend: str) -> None:
    acks = run_child_until_killed(tmp_path, backend)
    assert len(acks) >= KILL_AFTER_OPS * TURNS_PER_OP
    config = config_for(tmp_path, backend)
    space_dir = config.space_dir(USER, ASSISTANT)
    if backend == "chroma":
        assert (space_dir / CHROMA_DIRECTORY).is_dir(), "the space did not use the chroma backend"

    snapshot, covered = load_page_index(config, space_dir, FAKE_DIM)
    if backend == "faiss-ivf":
        assert snapshot.stats()["kind"] == "ivf"  # type: ignore[attr-defined]
    close_page_index(snapshot)
    assert covered == acks[SNAPSHOT_AFTER_OPS * TURNS_PER_OP - 1]  # later pages must come from the replay

    embedder = HashEmbedder()
    memory = Memoryos(
        USER,
        None,
        tmp_path,
        assistant_id=ASSISTANT,
        config=config,
        embedder=embedder,
        llm=OfflineLLM(),
        clock=FakeClock(),
    )
    try:
        index = memory.space.page_index
        stored = memory.space.store.max_page_id()
        assert index.count() == stored >= max(acks.values())  # an op may commit before its ack is printed
        if backend == "faiss-ivf":
            assert index.stats()["kind"] == "ivf"  # type: ignore[attr-defined]
        numbers = sorted(acks)
        queries = embedder.encode([exchange_text(*page_text(i)) for i in numbers])
        found = index.search(queries, 3)  # pages differ by one word, which may share a hash bucket
        for row, i in enumerate(numbers):
            hits = dict(found.hits(row))
            assert hits.get(acks[i], 0.0) > 0.99, f"page {acks[i]} (exchange {i}) not found"
    finally:
        memory.close()
