"""Acknowledged writes survive a crash: a child process adds pages and prints each returned id (the
acknowledgement), then dies without closing (`os._exit`, or SIGKILL at a random instant of a long add
loop). The test process reopens the space and finds every acknowledged page, stored and searchable.

No model: the child uses the hashed fake embedder, so each run takes about a second.
"""

import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.storage.vectors.faiss_index import FaissIndex
from memoryos.storage.vectors.index_factory import FAISS_SNAPSHOT_FILE as PAGE_INDEX_FILE
from tests.support.fakes import FAKE_DIM, FakeClock, HashEmbedder

REPO_ROOT = Path(__file__).resolve().parents[2]
SHORT_TERM_CAPACITY = 3
MID_TERM_CAPACITY = 3

TEMPLATES = [
    ("My garden tomatoes {tag} are ripening.", "Tomatoes like sun; noted {tag}."),
    ("The sailing regatta {tag} starts Sunday.", "Good luck at the regatta; noted {tag}."),
    ("Our jazz quartet {tag} rehearses tonight.", "Enjoy the rehearsal; noted {tag}."),
    ("The mountain cabin {tag} needs firewood.", "Split the logs early; noted {tag}."),
    ("Quantum homework {tag} is due Friday.", "Start with the easy problems; noted {tag}."),
]


def pair(i: int) -> tuple[str, str]:
    """The exchange number `i`: one of a few topics, with a word (`kiwi<i>`) no other page has."""
    user, agent = TEMPLATES[i % len(TEMPLATES)]
    tag = f"kiwi{i}"
    return user.format(tag=tag), agent.format(tag=tag)


def timestamp(i: int) -> str:
    return (datetime(2024, 5, 1, 10, 0, 0) + timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M:%S")


# The child: add `count` pages, print "<page_id> <i>" after each add returns, optionally snapshot the
# index after `snapshot_after` adds, then exit without closing. Kept in sync with `pair` by importing it.
CHILD = r"""
import os, sys
from memoryos import Memoryos, MemoryConfig
from memoryos.llm.offline.backend import OfflineLLM
from tests.e2e.test_crash_durability import MID_TERM_CAPACITY, SHORT_TERM_CAPACITY, pair, timestamp
from tests.support.fakes import HashEmbedder

root, count, snapshot_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
memory = Memoryos(
    "alice", None, root, assistant_id="helper",
    short_term_capacity=SHORT_TERM_CAPACITY, mid_term_capacity=MID_TERM_CAPACITY,
    config=MemoryConfig(faiss_use_gpu="never"), embedder=HashEmbedder(), llm=OfflineLLM(),
)
for i in range(count):
    user, agent = pair(i)
    page_id = memory.add_memory(user, agent, timestamp=timestamp(i))
    print(page_id, i, flush=True)
    if i + 1 == snapshot_after:
        memory.flush()  # the snapshot covers embedded pages only
        memory.space.snapshot()
os._exit(1)
"""


def start_child(root: Path, count: int, snapshot_after: int = 0) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(count), str(snapshot_after)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def acknowledged(output: str) -> dict[int, int]:
    """{i: page_id} from the complete lines the child printed; a torn last line acknowledges nothing."""
    acks: dict[int, int] = {}
    for line in output.splitlines(keepends=True):
        if line.endswith("\n"):
            page_id, i = line.split()
            acks[int(i)] = int(page_id)
    return acks


def reopen(root: Path) -> Memoryos:
    return Memoryos(
        "alice",
        None,
        root,
        assistant_id="helper",
        short_term_capacity=SHORT_TERM_CAPACITY,
        mid_term_capacity=MID_TERM_CAPACITY,
        config=MemoryConfig(faiss_use_gpu="never"),
        embedder=HashEmbedder(),
        llm=OfflineLLM(),
        clock=FakeClock(),
    )


def assert_every_acknowledged_page_is_back(root: Path, acks: dict[int, int]) -> None:
    memory = reopen(root)
    try:
        memory.flush()  # pages acknowledged but not yet embedded before the crash are embedded now
        stored_ids = list(range(1, memory.space.store.max_page_id() + 1))
        stored = {p.page_id: p for p in memory.space.pages(stored_ids)}
        assert len(stored) >= len(acks)  # a page may be committed without its ack having been printed
        assert memory.space.page_index.count() == len(stored)
        embedder = HashEmbedder()
        for i, page_id in acks.items():
            page = stored[page_id]
            assert (page.user_input, page.agent_response, page.timestamp) == (*pair(i), timestamp(i))
            assert page.tier in ("stm", "mtm", "archived")
            assert page.tier == "stm" or page.segment_id is not None
            vector = embedder.encode([page.text()])
            # Its own vector is in the index (stored precision). Among the hits, not always first: the
            # hash embedder gives some of these texts the same vector (kiwi9 and kiwi44 collide).
            hits = dict(memory.space.page_index.search(vector, 5).hits(0))
            assert hits.get(page_id) == pytest.approx(1.0, abs=5e-3), (page_id, hits)
            found = memory.retrieve(f"kiwi{i}", top_k=3).retrieved_pages
            assert page_id in [p.page_id for p in found], f"page {page_id} (kiwi{i}) not retrieved"
        # The space keeps working after the crash: the next write finishes any interrupted consolidation.
        memory.add_memory("After the crash all is well.", "Glad to hear it.")
        memory.flush()
        assert len(memory.space.short_term_pages()) <= SHORT_TERM_CAPACITY
    finally:
        memory.close()


def test_pages_acknowledged_before_an_exit_without_close_survive(tmp_path: Path) -> None:
    child = start_child(tmp_path, count=12, snapshot_after=5)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 1, err
    acks = acknowledged(out)
    assert sorted(acks) == list(range(12)), err

    # The snapshot covers the first five pages only: the other seven must be replayed from the store.
    _, covered = FaissIndex.load(tmp_path / "default" / "alice" / "helper" / PAGE_INDEX_FILE, FAKE_DIM)
    assert covered == acks[4]
    assert_every_acknowledged_page_is_back(tmp_path, acks)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pages_acknowledged_before_a_sigkill_at_a_random_instant_survive(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    kill_after = rng.randint(3, 25)
    child = start_child(tmp_path, count=100_000, snapshot_after=rng.randint(1, kill_after))
    assert child.stdout is not None and child.stderr is not None
    lines: list[str] = []
    while len(lines) < kill_after:
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=30)
            pytest.fail(f"child ended early: {child.stderr.read()}")
        lines.append(line)
    # Somewhere inside the next add: embedding, a transaction, consolidation or its index update.
    time.sleep(rng.uniform(0.0, 0.02))
    child.send_signal(signal.SIGKILL)
    rest, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    acks = acknowledged("".join(lines) + rest)
    assert len(acks) >= kill_after
    assert sorted(acks) == list(range(len(acks)))
    assert_every_acknowledged_page_is_back(tmp_path, acks)
