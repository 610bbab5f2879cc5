"""Several processes on one memory space: writers side by side, readers beside a writer, forget beside
an open instance (issue 9). Each process is a real `python` child driven over stdin/stdout
(`tests/support/space_client.py`), as the stdio MCP servers of two editors would be."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.space_lock import SpaceBusyError
from memoryos.storage.vectors.faiss_index import FaissIndex
from tests.support.fakes import FAKE_DIM, FAKE_MODEL_NAME, HashEmbedder

REPO = Path(__file__).resolve().parents[2]
USER = "maya"

pytestmark = pytest.mark.integration


class Client:
    """One child process with the space open; `ask` sends a command and returns its JSON answer."""

    def __init__(self, data_dir: Path, embedder: str = "hash") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.space_client", str(data_dir), USER, "--embedder", embedder],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self._read()["ready"]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            assert self.process.stderr is not None
            raise AssertionError(f"client died: {self.process.stderr.read()[-3000:]}")
        return dict(json.loads(line))

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def add(self, text: str) -> int:
        answer = self.ask("add", user_input=text, agent_response=f"Noted: {text}.")
        assert "page_id" in answer, answer
        return int(answer["page_id"])

    def close(self) -> None:
        assert self.ask("close") == {"closed": True}
        assert self.process.wait(timeout=60) == 0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[list[Client]]:
    started: list[Client] = []
    yield started
    for client in started:
        client.kill()


def space_dir(data_dir: Path) -> Path:
    return MemoryConfig(data_dir=data_dir).space_dir(USER, "default_assistant_profile")


def open_space(data_dir: Path) -> MemorySpace:
    config = MemoryConfig(data_dir=data_dir)
    return MemorySpace(space_dir(data_dir), config, FAKE_MODEL_NAME, lambda: FAKE_DIM)


def fact(writer: str, i: int) -> str:
    """Distinct words per page, so a page's own vector finds it first."""
    return f"{writer} fact {i}: {writer}word{i} {writer}colour{i * 7} {writer}town{i * 13}"


def test_two_writers_pages_are_all_found_by_dense_search_after_the_first_closes_last(
    tmp_path: Path, clients: list[Client]
) -> None:
    """The measured failure: A and B each write 30 turns with the space open in both, A closes last.
    Before, A's final snapshot claimed B's pages without holding them: 30 vectors for 60 pages."""
    a = Client(tmp_path)
    clients.append(a)
    a_ids = [a.add(fact("alpha", i)) for i in range(15)]
    b = Client(tmp_path)
    clients.append(b)
    b_ids = []
    for i in range(15, 30):
        a_ids.append(a.add(fact("alpha", i)))
        b_ids.append(b.add(fact("beta", i - 15)))
    b_ids += [b.add(fact("beta", i)) for i in range(15, 30)]
    assert len(set(a_ids) | set(b_ids)) == 60
    # A reads B's latest write through dense search before either closes.
    assert a.ask("retrieve", query=fact("beta", 29), top_k=1)["pages"] == [fact("beta", 29)]
    b.close()
    a.close()

    snapshot, covered = FaissIndex.load(space_dir(tmp_path) / "pages.faiss", FAKE_DIM)
    assert snapshot.count() == 60  # the file itself holds every page it claims
    embedder = HashEmbedder()
    space = open_space(tmp_path)
    try:
        assert covered == space.store.max_vector_seq()
        assert space.page_index.count() == 60
        for writer, ids in (("alpha", a_ids), ("beta", b_ids)):
            for i, page_id in enumerate(ids):
                hits = space.page_index.search(embedder.encode([fact(writer, i)]), 1).hits(0)
                assert hits[0][0] == page_id
    finally:
        space.close()


def test_two_stdio_clients_and_a_cli_read_beside_a_writer(tmp_path: Path, clients: list[Client]) -> None:
    """Claude Desktop and Cursor each run their own `memoryos mcp` on one data directory, and the user
    runs `memoryos retrieve` while they are up: all read the writer's latest page, with the real model.
    The writer is this test's process."""
    readers = [Client(tmp_path, embedder="minilm") for _ in range(2)]
    clients.extend(readers)
    with Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path, short_term_capacity=5)) as writer:
        writer.add_memory("I adopted a dog called Pico last spring.", "What a lovely name.")
        for i in range(6):
            writer.add_memory(f"Note {i}: the weather was mild and I read a book about trains.", "Nice.")
        writer.add_memory("My sister Lena moved to Lisbon in August.", "Lisbon is beautiful.")
        writer.flush()
        for reader in readers:
            assert reader.ask("retrieve", query="Where did Lena move?", top_k=1)["pages"] == [
                "My sister Lena moved to Lisbon in August."
            ]
            dog = reader.ask("retrieve", query="What is my dog called?", top_k=3)["pages"]
            assert "I adopted a dog called Pico last spring." in dog
        cli = subprocess.run(
            [
                *(sys.executable, "-m", "memoryos.cli.main", "--data-dir", str(tmp_path), "retrieve"),
                *("--user", USER, "--json", "--top-k", "1", "Where did Lena move?"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert cli.returncode == 0, cli.stderr
        pages = json.loads(cli.stdout)["retrieved_pages"]
        assert [p["user_input"] for p in pages] == ["My sister Lena moved to Lisbon in August."]
        # The writer keeps writing after the readers came; they see it too.
        writer.add_memory("Pico learned to fetch a ball.", "Good dog.")
        writer.flush()
        for reader in readers:
            assert reader.ask("retrieve", query="What did Pico learn?", top_k=1)["pages"] == [
                "Pico learned to fetch a ball."
            ]
            reader.close()


def test_forget_is_refused_while_another_process_has_the_space_open(
    tmp_path: Path, clients: list[Client]
) -> None:
    other = Client(tmp_path)
    clients.append(other)
    other.add("I adopted a dog called Pico.")
    memory = Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path), embedder=HashEmbedder())
    with pytest.raises(SpaceBusyError, match=rf"open in process {other.pid}\b.*retry"):
        memory.forget_user()
    # Nothing was erased, and both instances go on working.
    assert [p.user_input for p in memory.retrieve("dog Pico", top_k=1).retrieved_pages] == [
        "I adopted a dog called Pico."
    ]
    memory.add_memory("Pico turned two.", "Happy birthday, Pico!")
    assert other.ask("retrieve", query="Pico turned two", top_k=1)["pages"] == ["Pico turned two."]
    other.close()
    memory.forget_user()
    assert not (tmp_path / "default" / USER).exists()


RACER = """
import sys
from memoryos import Memoryos
from memoryos.config import MemoryConfig
from tests.support.fakes import HashEmbedder
for i in range(int(sys.argv[2])):
    with Memoryos.from_config("maya", MemoryConfig(data_dir=sys.argv[1]), embedder=HashEmbedder()) as m:
        m.add_memory(f"racer page {i}", "ok")
        m.retrieve("racer page")
print("done", flush=True)
"""


def test_forget_racing_instances_that_open_write_and_close_leaves_nothing(tmp_path: Path) -> None:
    """A process opens the space, writes, reads and closes over and over (as CLI runs do) while forget is
    tried again and again: each forget either is refused or erases everything, and once the racer is done
    and one last forget succeeds, nothing of the user is left on disk: no late snapshot or store write
    recreated the directory."""
    racer = subprocess.Popen(
        [sys.executable, "-c", RACER, str(tmp_path), "25"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    forgotten = refused = 0
    try:
        while racer.poll() is None:
            if not space_dir(tmp_path).exists():
                time.sleep(0.01)
                continue
            try:
                memory = Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path), embedder=HashEmbedder())
            except SpaceBusyError:
                continue
            try:
                memory.forget_user()
                forgotten += 1
            except SpaceBusyError:
                refused += 1
                memory.close()
    finally:
        _, err = racer.communicate(timeout=120)
    assert racer.returncode == 0, err
    assert forgotten + refused > 0
    memory = Memoryos.from_config(USER, MemoryConfig(data_dir=tmp_path), embedder=HashEmbedder())
    memory.forget_user()
    assert not (tmp_path / "default").exists()
    assert os.listdir(tmp_path) == []
