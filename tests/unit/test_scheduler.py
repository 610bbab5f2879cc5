"""The process's scheduler (issue 10): one set of threads for every open space, pooled embedding batches,
reads that wait for vectors and not for consolidation, an LLM that fails without holding anything up.

Each test builds its own `Scheduler`, so thread counts and batch counts are its own.
"""

import asyncio
import gc
import math
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.scheduler import Scheduler
from memoryos.space.layout import STORE_FILE
from memoryos.types import Page
from tests.support.committed import committed_rows
from tests.support.fakes import FakeClock, HashEmbedder, ScriptedLLM

REPO = Path(__file__).resolve().parents[2]


class GatedEmbedder(HashEmbedder):
    """Logs the size of every page-encode call; `gate` (when cleared) holds a call in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.page_calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if not is_query:
            self.page_calls.append(len(texts))
            self.entered.set()
            self.gate.wait()
        return super().encode(texts, is_query=is_query)


class SlowLLM(OfflineLLM):
    """The offline backend with an async view whose topic summaries take `delay_s`, and a flag telling
    whether one is in flight right now."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.in_flight = threading.Event()

    def async_view(self) -> "SlowAsyncView":
        return SlowAsyncView(self)


class SlowAsyncView:
    def __init__(self, llm: SlowLLM) -> None:
        self._llm = llm

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self._llm.usage

    async def is_continuation(self, previous: Page, current: Page) -> bool:
        return self._llm.is_continuation(previous, current)

    async def summarize_chain(self, pages: Sequence[Page]) -> str:
        return self._llm.summarize_chain(pages)

    async def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        self._llm.in_flight.set()
        try:
            await asyncio.sleep(self._llm.delay_s)
            return self._llm.summarize_topic(pages)
        finally:
            self._llm.in_flight.clear()

    async def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        return self._llm.update_profile(current_profile, pages)

    async def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        return self._llm.extract_knowledge(pages)

    async def answer(self, request: AnswerRequest) -> str:
        return self._llm.answer(request)


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    own = Scheduler(MemoryConfig(embedding_max_wait_ms=5.0), name="test-sched")
    yield own
    own.close()


def open_memory(root: Path, user: str, scheduler: Scheduler, **parts: object) -> Memoryos:
    config = MemoryConfig(data_dir=root, faiss_use_gpu="never", short_term_capacity=3)
    parts.setdefault("embedder", HashEmbedder())
    parts.setdefault("llm", OfflineLLM())
    return Memoryos.from_config(user, config, scheduler=scheduler, **parts)


def test_130_spaces_adding_one_turn_each_are_encoded_in_a_few_pooled_batches(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The first write's batch is held in flight while the other 129 spaces write: the batcher then packs
    them into full batches instead of one encode per space. 130 spaces fill two batches of 64 and start a
    third; each space costs the test ~10 ms."""
    embedder = GatedEmbedder()
    spaces = 130
    memories = [open_memory(tmp_path, f"user{i}", scheduler, embedder=embedder) for i in range(spaces)]
    embedder.gate.clear()
    memories[0].add_memory("first write of user0", "ok")
    assert embedder.entered.wait(10)
    for i, memory in enumerate(memories[1:], start=1):
        memory.add_memory(f"user{i} likes colour{i}", "ok")
    embedder.gate.set()
    for i, memory in enumerate(memories):
        found = memory.retrieve(f"colour{i}" if i else "first write", top_k=1).retrieved_pages
        assert len(found) == 1
    batch = MemoryConfig().embedding_batch_size
    assert sum(embedder.page_calls) == spaces
    assert len(embedder.page_calls) <= math.ceil(spaces / batch) + 2, embedder.page_calls
    for memory in memories:
        memory.close()


def test_64_open_spaces_add_at_most_16_threads(tmp_path: Path, scheduler: Scheduler) -> None:
    """Four times as many spaces as the bound: a thread per space (as before the scheduler: 302 threads
    for 300 spaces) fails it as surely as with more, and each space costs the test ~20 ms."""
    before = threading.active_count()
    embedder = HashEmbedder()
    memories = [open_memory(tmp_path, f"user{i}", scheduler, embedder=embedder) for i in range(64)]
    for i, memory in enumerate(memories):
        memory.add_memories(
            [{"user_input": f"turn {j} of user{i}", "agent_response": "ok"} for j in range(5)]
        )
    for memory in memories:
        memory.flush()
    assert threading.active_count() - before <= 16, [t.name for t in threading.enumerate()]
    assert len(scheduler.threads()) <= 8
    for memory in memories:
        memory.close()


def test_a_read_returns_while_a_one_second_llm_call_is_in_flight_and_finds_the_page(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    llm = SlowLLM(delay_s=1.0)
    memory = open_memory(tmp_path, "maya", scheduler, llm=llm)
    for i in range(4):  # one past short-term capacity: a topic summary is asked for
        memory.add_memory(f"filler turn {i} about weather", "ok")
    assert llm.in_flight.wait(10)
    memory.add_memory("My locker code is 4411.", "I'll remember it.")
    found = memory.retrieve("locker code", top_k=1).retrieved_pages
    assert llm.in_flight.is_set(), "the read waited for consolidation"
    assert [p.user_input for p in found] == ["My locker code is 4411."]
    memory.flush()  # consolidation does finish, behind the read
    assert memory.stats().mid_term_pages >= 1
    memory.close()


def test_a_failing_llm_leaves_writes_and_reads_working_and_is_not_retried_on_every_write(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    llm = ScriptedLLM(fail_on={"topic"})  # each pass fails at its first topic: one attempt per pass
    memory = open_memory(tmp_path, "maya", scheduler, llm=llm)
    for i in range(30):
        memory.add_memory(f"note {i}: kiwi{i} grows in pots", "noted")
    memory.flush()  # returns: a space backing off holds nobody
    found = memory.retrieve("kiwi17", top_k=1).retrieved_pages
    assert [p.user_input for p in found] == ["note 17: kiwi17 grows in pots"]
    stats = memory.stats()
    assert stats.short_term_pages == 30 and stats.mid_term_pages == 0  # nothing filed, nothing lost
    assert memory.get_user_profile_summary() == ""  # no error text became memory
    assert 1 <= llm.calls["topic"] <= 4, "the failing LLM was retried on every write"
    memory.close()


EIGHT_THREADS = """
import sys, threading
from memoryos import Memoryos
from memoryos.config import MemoryConfig
from tests.support.fakes import HashEmbedder

memory = Memoryos.from_config("maya", MemoryConfig(data_dir=sys.argv[1]), embedder=HashEmbedder())
errors = []

def worker(w):
    try:
        for i in range(50):
            memory.add_memory(f"thread {w} turn {i} word{w}x{i}", "ok")
            if i % 10 == 9:
                memory.retrieve(f"word{w}x{i}")
    except BaseException as error:
        errors.append(repr(error))

threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
memory.flush()
stats = memory.stats()
print(len(errors), stats.short_term_pages + stats.mid_term_pages + stats.archived_pages, memory.space.page_index.count())
print("\\n".join(errors[:3]))
"""


def test_eight_threads_adding_and_reading_on_one_instance_store_every_page_and_exit_cleanly(
    tmp_path: Path,
) -> None:
    """The measured failure: 7 of 8 threads died with a TypeError (a page ranked lexically had no vector
    yet), 57 of 400 turns were stored, and the process aborted at exit. Run as its own process, so its
    exit is tested too (no Memoryos.close: the scheduler's exit hook must cope)."""
    child = subprocess.run(
        [sys.executable, "-c", EIGHT_THREADS, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    assert "terminate called" not in child.stderr
    errors, pages, indexed = child.stdout.split("\n")[0].split()
    assert (errors, pages, indexed) == ("0", "400", "400"), child.stdout


def test_spaces_closed_leave_no_llm_wrapper_behind_and_a_shared_backend_keeps_its_own(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    shared = OfflineLLM()
    keeper = open_memory(tmp_path, "keeper", scheduler, llm=shared)
    wrappers = scheduler.pooled_backends
    for n in range(20):  # each with a backend of its own, as the engine builds one per Memoryos
        open_memory(tmp_path, f"user{n}", scheduler).close()
        open_memory(tmp_path, f"guest{n}", scheduler, llm=shared).close()
    assert scheduler.pooled_backends == wrappers, "a closed space's wrapper stays for the process's life"
    keeper.add_memory("I moved to Lyon.", "Nice city.")
    keeper.flush()  # the shared backend's wrapper still serves the space that remains
    keeper.close()
    assert scheduler.pooled_backends == wrappers - 1


def test_a_closed_space_is_freed_at_once_not_left_to_the_cyclic_collector(tmp_path: Path) -> None:
    """A worker's pool opens and closes spaces all day: a closed space in a reference cycle kept its
    index, score sample and SQLite connection until a full collection, and RSS climbed far past the pool
    budget while the open spaces stayed within it. (The scheduler is closed first so that no batch in
    flight holds the space for the instant of the check.)"""
    own = Scheduler(MemoryConfig(embedding_max_wait_ms=5.0), name="test-freed")
    memory = open_memory(tmp_path, "ann", own)
    memory.add_memory("I moved to Lyon.", "Nice city.")
    memory.retrieve("Where do I live?")
    space, work = weakref.ref(memory.space), weakref.ref(memory._work)
    gc.collect()
    gc.disable()
    try:
        memory.close()
        own.close()
        del memory
        assert space() is None and work() is None
    finally:
        gc.enable()


def mid_term_pages_on_disk(memory: Memoryos) -> int:
    """Pages consolidation moved out of short-term memory, committed."""
    return int(committed_rows(memory, "SELECT COUNT(*) FROM pages WHERE tier != 'stm'")[0][0])


def store_threads(scheduler: Scheduler) -> list[str]:
    """The scheduler's store threads started so far (its pool starts one when first given work)."""
    return [t.name for t in scheduler.threads() if "-store" in t.name]


def test_consolidation_applies_on_the_loop_without_a_store_thread(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Handing each commit to a store thread and back cost more CPU than the commit: a space nobody else
    writes has its consolidation ops applied by the loop itself."""
    memory = open_memory(tmp_path, "ana", scheduler)
    for i in range(8):
        memory.add_memory(f"turn {i} about green tea", "ok")
    memory.flush()
    assert memory.stats().mid_term_pages >= 5
    assert store_threads(scheduler) == []
    memory.close()


def test_a_space_another_process_writes_waits_on_a_store_thread_while_other_spaces_consolidate(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The loop never waits for another process's write transaction (an import or a reindex may hold one
    for minutes): the ops of that space go to a store thread, which waits, and every other space's
    consolidation goes on."""
    llm = SlowLLM(delay_s=0.5)
    busy = open_memory(tmp_path, "busy", scheduler, llm=llm)
    for i in range(4):  # one past short-term capacity: a pass, held in its topic summary
        busy.add_memory(f"busy turn {i} about rowing", "ok")
    assert llm.in_flight.wait(10)
    other_process = sqlite3.connect(busy.space.directory / STORE_FILE, isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")  # holds the store's write lock
    try:
        deadline = time.monotonic() + 10
        while not store_threads(scheduler) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store_threads(scheduler), "the busy space's ops were not handed to a store thread"
        other = open_memory(tmp_path, "other", scheduler)
        for i in range(4):
            other.add_memory(f"other turn {i} about chess", "ok")
        flushing = threading.Thread(target=other.flush, daemon=True)
        flushing.start()
        flushing.join(timeout=10)
        assert not flushing.is_alive(), "the other space's consolidation waited for the busy space"
        assert other.stats().mid_term_pages >= 1
        assert mid_term_pages_on_disk(busy) == 0  # read beside the store thread waiting on the space
    finally:
        other_process.execute("COMMIT")
        other_process.close()
    busy.flush()
    assert busy.stats().mid_term_pages >= 1
    for memory in (busy, other):
        memory.close()


def test_an_expiry_sweep_is_applied_on_a_store_thread(tmp_path: Path, scheduler: Scheduler) -> None:
    """Ops that may take text out are followed by the space's files being scrubbed (an index snapshot
    without the withdrawn vectors, a WAL checkpoint): work that grows with the space, kept off the loop."""
    clock = FakeClock()
    memory = open_memory(tmp_path, "eve", scheduler, clock=clock)
    short = memory.add_memory("my gate code is 1234", "noted", ttl_s=60)
    memory.flush()
    assert store_threads(scheduler) == []
    clock.advance(61)
    memory.flush()  # the pass sweeps
    assert memory.space.store.pages([short]) == []
    assert store_threads(scheduler) != []
    memory.close()
