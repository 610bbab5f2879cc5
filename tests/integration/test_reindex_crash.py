"""`memoryos reindex` killed at each step, and refused while another process has the space open (issue 9).

A crash before the commit leaves the space on its old model, whole; a crash after it (before the old index
snapshot is deleted) leaves the new model, and the old snapshot is never trusted: it records the old
embedding fingerprint, so the index is rebuilt from the store's new vectors.
"""

import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from memoryos.errors import EmbeddingModelMismatchError
from memoryos.portability.reindex import reindex_space
from memoryos.storage.space_lock import SpaceBusyError
from tests.integration.test_shared_space import REPO, USER, Client
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

PAGES = 300
"""More than one re-embedding batch (`REINDEX_BATCH` = 256), so a crash can come between batches."""

CHILD = """
import os, sys
import memoryos.portability.reindex as reindex
from memoryos.config import MemoryConfig
from memoryos.storage.records.sqlite.store import SqliteStore
from tests.support.fakes import HashEmbedder

root, step = sys.argv[1], sys.argv[2]
new = HashEmbedder(name="hash-salted", salt="new:")
reindex.create_embedder = lambda config: new

def crash(*args, **kwargs):
    os._exit(9)

if step == "between_batches":
    encode, batches = new.encode, []
    def encode_then_crash(texts, **kwargs):
        batches.append(len(texts))
        if len(batches) == 2:
            crash()
        return encode(texts, **kwargs)
    new.encode = encode_then_crash
elif step == "before_commit":
    assign = SqliteStore.assign_vectors
    def assign_then_crash(self, vectors):
        assign(self, vectors)
        crash()
    SqliteStore.assign_vectors = assign_then_crash
elif step == "after_commit":
    reindex.remove_page_index_files = crash
reindex.reindex_space(MemoryConfig(data_dir=root), "maya", "default_assistant_profile")
"""


def text(i: int) -> str:
    return f"page {i}: word{i} colour{i * 7} town{i * 13}"


def build_space(root: Path) -> None:
    with Memoryos.from_config(USER, MemoryConfig(data_dir=root), embedder=HashEmbedder()) as memory:
        memory.add_memories([{"user_input": text(i), "agent_response": "ok"} for i in range(PAGES)])
        memory.flush()


def assert_every_page_found_by_its_own_vector(memory: Memoryos, embedder: HashEmbedder) -> None:
    """Top-1 with a score of 1 (at fp16 precision): the index holds the vectors of this model."""
    index = memory.space.page_index
    assert index.count() == PAGES
    queries = embedder.encode([f"User: {text(i)} Assistant: ok" for i in range(PAGES)])
    found = index.search(queries, 1)
    assert found.ids[:, 0].tolist() == list(range(1, PAGES + 1))
    assert np.all(found.scores[:, 0] > 0.999)


@pytest.mark.parametrize(
    "step, model_after",
    [("between_batches", "old"), ("before_commit", "old"), ("after_commit", "new")],
)
def test_a_reindex_killed_at_each_step_leaves_one_consistent_model(
    tmp_path: Path, step: str, model_after: str
) -> None:
    build_space(tmp_path)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), step],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 9, child.stderr
    old, new = HashEmbedder(), HashEmbedder(name="hash-salted", salt="new:")
    current, other = (old, new) if model_after == "old" else (new, old)
    with pytest.raises(EmbeddingModelMismatchError):
        Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path), embedder=other)
    with Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path), embedder=current) as memory:
        assert_every_page_found_by_its_own_vector(memory, current)
        assert memory.retrieve(text(123), top_k=1).retrieved_pages[0].user_input == text(123)


def test_reindex_is_refused_while_another_process_has_the_space_open(tmp_path: Path) -> None:
    build_space(tmp_path)
    other = Client(tmp_path)
    try:
        config = MemoryConfig(data_dir=tmp_path)
        with pytest.raises(SpaceBusyError, match=rf"cannot reindex: .* open in process {other.pid}\b"):
            reindex_space(config, USER, "default_assistant_profile")
        assert other.ask("retrieve", query=text(7), top_k=1)["pages"] == [text(7)]  # untouched, working
        other.close()
    finally:
        other.kill()


def test_a_snapshot_of_another_vector_generation_is_rebuilt_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reindex renumbers every vector, so even a trusted old snapshot would be replayed over; the
    fingerprint makes the rule explicit: a snapshot of other embeddings is never loaded at all."""
    build_space(tmp_path)
    store = MemoryConfig(data_dir=tmp_path).space_dir(USER, "default_assistant_profile") / "memory.sqlite"
    db = sqlite3.connect(store)
    db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_generation', '7')")
    db.commit()
    db.close()
    with caplog.at_level(logging.WARNING, logger="memoryos.space.page_index"):
        memory = Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path), embedder=HashEmbedder())
    try:
        assert "written before a reindex" in caplog.text
        assert_every_page_found_by_its_own_vector(memory, HashEmbedder())
    finally:
        memory.close()
