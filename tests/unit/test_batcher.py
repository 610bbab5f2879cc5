"""The embedding batcher: every space's pending pages, and other texts, pooled into shared encode calls.

Nothing here asserts on wall time. Orderings are forced with events (a gate holds a page batch inside the
model), and waits on events have a generous timeout only so that a bug fails the test instead of hanging it.
"""

import contextlib
import logging
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from memoryos.embedding.base import estimate_tokens
from memoryos.scheduler.batcher import RETRY_MAX_S, BatcherClosedError, EmbeddingBatcher, retry_delay_s
from tests.support.fakes import HashEmbedder

HANG_GUARD_S = 10.0
"""Only a bug makes any wait reach this."""

REFERENCE = HashEmbedder()


@dataclass(frozen=True)
class Call:
    texts: list[str]
    is_query: bool


class RecordingEmbedder(HashEmbedder):
    """HashEmbedder that records every encode call in the order calls enter the model.

    `gate` (open unless a test clears it) holds page batches inside the model; `serialize` makes calls
    take one lock like PyTorch on a GPU; `fail_calls` page calls raise; texts containing `poison` raise.
    """

    def __init__(self, serialize: bool = False) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.gate = threading.Event()
        self.gate.set()
        self.page_batch_entered = threading.Event()
        self.query_arrived = threading.Event()
        self.fail_calls = 0
        self.poison: str | None = None
        self._model: contextlib.AbstractContextManager[object] = (
            threading.Lock() if serialize else contextlib.nullcontext()
        )
        self._record = threading.Lock()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if is_query:
            self.query_arrived.set()
        with self._model:
            with self._record:
                self.calls.append(Call(list(texts), is_query))
            if not is_query:
                self.page_batch_entered.set()
                assert self.gate.wait(HANG_GUARD_S)
                with self._record:
                    failing = self.fail_calls > 0
                    self.fail_calls -= failing
                if failing:
                    raise RuntimeError("model down")
                if self.poison is not None and any(self.poison in text for text in texts):
                    raise RuntimeError("poisoned batch")
            return super().encode(texts, is_query=is_query)

    def page_calls(self) -> list[Call]:
        with self._record:
            return [call for call in self.calls if not call.is_query]


class FakeSource:
    """A space's pending pages in memory; `fail_applies` apply calls raise."""

    def __init__(self, texts: Sequence[str] = (), fail_applies: int = 0) -> None:
        self._lock = threading.Lock()
        self.pending: dict[int, str] = dict(enumerate(texts, start=1))
        self.texts = dict(self.pending)
        self.applied: dict[int, np.ndarray] = {}
        self.errors: list[BaseException] = []
        self.asked = 0
        self.fail_applies = fail_applies
        self.done = threading.Event()
        self.failed = threading.Event()
        if not self.pending:
            self.done.set()

    def pending_texts(self, limit: int) -> list[tuple[int, str]]:
        with self._lock:
            self.asked += 1
            return list(self.pending.items())[:limit]

    def apply_vectors(self, page_ids: list[int], vectors: np.ndarray) -> None:
        assert vectors.shape == (len(page_ids), REFERENCE.dim)
        with self._lock:
            if self.fail_applies:
                self.fail_applies -= 1
                raise RuntimeError(f"disk full while storing {self.texts[page_ids[0]]}")
            for page_id, vector in zip(page_ids, vectors, strict=True):
                self.applied[page_id] = vector.copy()
                self.pending.pop(page_id, None)
            if not self.pending:
                self.done.set()

    def embedding_failed(self, error: BaseException) -> None:
        with self._lock:
            self.errors.append(error)
        self.failed.set()

    def assert_vectors_right(self) -> None:
        assert sorted(self.applied) == sorted(self.texts)
        for page_id, text in self.texts.items():
            np.testing.assert_allclose(self.applied[page_id], REFERENCE.vector(text), atol=1e-6)


MakeBatcher = Callable[..., EmbeddingBatcher]


@pytest.fixture
def make_batcher() -> Iterator[MakeBatcher]:
    made: list[tuple[RecordingEmbedder, EmbeddingBatcher]] = []

    def make(
        embedder: RecordingEmbedder,
        *,
        size: int = 64,
        tokens: int = 1_000_000,
        wait_ms: float = 0.0,
        name: str | None = None,
        yield_s: float = 0.0,
        yield_max_s: float = 0.0,
    ) -> EmbeddingBatcher:
        batcher = EmbeddingBatcher(
            embedder,
            max_batch_size=size,
            max_batch_tokens=tokens,
            max_wait_ms=wait_ms,
            name=name or f"test-embed-{uuid.uuid4().hex[:8]}",
            yield_s=yield_s,
            yield_max_s=yield_max_s,
        )
        made.append((embedder, batcher))
        return batcher

    yield make
    for embedder, batcher in made:
        embedder.gate.set()
        batcher.close(timeout_s=HANG_GUARD_S)


def wait(event: threading.Event) -> None:
    assert event.wait(HANG_GUARD_S), "the batcher never got there"


def hold_a_batch_in_flight(embedder: RecordingEmbedder, batcher: EmbeddingBatcher) -> FakeSource:
    """A page batch held inside the model until `embedder.gate` is set, and its source: what is notified
    now queues behind it."""
    in_flight = FakeSource(["page in flight"])
    embedder.gate.clear()
    embedder.page_batch_entered.clear()
    batcher.notify(in_flight)
    wait(embedder.page_batch_entered)
    return in_flight


def batcher_threads(name: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_two_hundred_sources_share_a_few_encode_calls(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=64, wait_ms=100)
    sources = [FakeSource([f"turn {i} about topic{i}"]) for i in range(200)]
    for source in sources:
        batcher.notify(source)
    for source in sources:
        wait(source.done)

    calls = embedder.page_calls()
    assert len(calls) <= math.ceil(200 / 64) + 2
    assert sum(len(call.texts) for call in calls) == 200, "each page encoded once"
    for source in sources:
        source.assert_vectors_right()
    stats = batcher.stats()
    assert (stats.batches, stats.texts, stats.failures) == (len(calls), 200, 0)
    assert stats.largest_batch <= 64
    assert stats.mean_batch_size == pytest.approx(200 / len(calls))
    assert stats.tokens_estimated == sum(estimate_tokens(f"turn {i} about topic{i}") for i in range(200))


def test_max_batch_tokens_splits_batches_and_a_long_text_goes_alone(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    budget = 30
    text = "x" * 40  # 12 estimated tokens: two fit in 30, three do not
    assert estimate_tokens(text) == 12
    batcher = make_batcher(embedder, size=100, tokens=budget, wait_ms=20)
    long_text = "word " * 80  # 102 estimated tokens, over the budget on its own
    sources = [FakeSource([f"{text[:-2]}{i:02d}"]) for i in range(6)] + [FakeSource([long_text])]
    for source in sources:
        batcher.notify(source)
    for source in sources:
        wait(source.done)

    calls = embedder.page_calls()
    assert sum(len(call.texts) for call in calls) == 7
    assert Call([long_text], False) in calls
    for call in calls:
        if call.texts != [long_text]:
            assert long_text not in call.texts
            assert sum(estimate_tokens(t) for t in call.texts) <= budget
    for source in sources:
        source.assert_vectors_right()


def test_a_big_source_does_not_starve_small_ones(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=16, wait_ms=0)
    big = FakeSource([f"bulk import turn {i}" for i in range(1000)])
    small = [FakeSource([f"small space {i} says hello"]) for i in range(10)]
    batcher.notify(big)
    for source in small:
        batcher.notify(source)
    for source in [big, *small]:
        wait(source.done)

    calls = embedder.page_calls()
    assert sum(len(call.texts) for call in calls) == 1010
    first_two = {text for call in calls[:2] for text in call.texts}
    for source in small:
        assert source.texts[1] in first_two, "every small space is served within the first two batches"
        source.assert_vectors_right()
    big.assert_vectors_right()


def test_a_source_a_reader_waits_for_goes_ahead_of_earlier_ones(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=2, wait_ms=0)
    hold_a_batch_in_flight(embedder, batcher)
    earlier = [FakeSource([f"nobody reads space {i}"]) for i in range(4)]
    for source in earlier:
        batcher.notify(source)
    read = FakeSource(["the page a reader waits for"])
    batcher.notify(read, awaited=True)
    embedder.gate.set()
    for source in [*earlier, read]:
        wait(source.done)

    batches = [call.texts for call in embedder.page_calls()]
    assert batches[0] == ["page in flight"]
    assert "the page a reader waits for" in batches[1], "the read's page waited behind earlier spaces"
    read.assert_vectors_right()


def test_the_sources_readers_wait_for_take_all_their_pages_first_in_the_order_the_readers_came(
    make_batcher: MakeBatcher,
) -> None:
    """Ten other spaces queued with three pages each leave a fair share of one text per space in a batch of
    eight; a space a reader waits for gets all five of its pages into the next batch instead (it had one
    a batch, and its reader waited for five), and of two such spaces the one whose reader came first goes
    first."""
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=8, wait_ms=0)
    hold_a_batch_in_flight(embedder, batcher)
    others = [FakeSource([f"space {i} page {p}" for p in range(3)]) for i in range(10)]
    for source in others:
        batcher.notify(source)
    first = FakeSource([f"first reader's page {p}" for p in range(5)])
    second = FakeSource([f"second reader's page {p}" for p in range(5)])
    with batcher.awaited(first), batcher.awaited(second):
        batcher.notify(first, awaited=True)
        batcher.notify(second, awaited=True)  # now at the front of the queue, ahead of `first`
        embedder.gate.set()
        for source in [first, second, *others]:
            wait(source.done)

    batches = [call.texts for call in embedder.page_calls()]
    assert batches[0] == ["page in flight"]
    first_texts, second_texts = set(first.texts.values()), set(second.texts.values())
    assert first_texts <= set(batches[1]), f"the first reader's pages were spread over batches: {batches}"
    assert len(second_texts & set(batches[1])) == 3, "the second reader's space did not fill the room left"
    assert second_texts <= set(batches[1]) | set(batches[2])
    first.assert_vectors_right()
    second.assert_vectors_right()


def test_a_readers_space_with_more_than_a_batch_takes_turns_with_the_other_readers(
    make_batcher: MakeBatcher,
) -> None:
    """A reader waiting for a space with 20 pages (batches of 8) does not hold every batch until it drains:
    served once, its space goes behind the space another reader waits for, whose 3 pages are in the next
    batch."""
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=8, wait_ms=0)
    hold_a_batch_in_flight(embedder, batcher)
    big = FakeSource([f"big backlog page {p}" for p in range(20)])
    small = FakeSource([f"small space page {p}" for p in range(3)])
    with batcher.awaited(big), batcher.awaited(small):
        batcher.notify(big, awaited=True)
        batcher.notify(small, awaited=True)
        embedder.gate.set()
        for source in [big, small]:
            wait(source.done)

    batches = [call.texts for call in embedder.page_calls()]
    assert batches[1] == [big.texts[p] for p in range(1, 9)], batches
    assert set(small.texts.values()) <= set(batches[2]), f"the small space waited for the big one: {batches}"
    big.assert_vectors_right()
    small.assert_vectors_right()


def test_a_sources_vectors_are_due_after_the_batch_in_flight_and_one_more_unless_it_is_in_it(
    make_batcher: MakeBatcher,
) -> None:
    """`vectors_due_in_s` (a bounded read stops waiting when it says its vectors come too late): nothing
    to go by before the first batch; a source in the batch in flight is due before one behind it; and one
    behind more queued sources is due later, since each of them takes a text of the next batch."""
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=8, wait_ms=0)
    learned = FakeSource(["a page to learn a batch's time from"])
    assert batcher.vectors_due_in_s(learned) is None
    batcher.notify(learned)
    wait(learned.done)
    in_flight = hold_a_batch_in_flight(embedder, batcher)
    alone = FakeSource(["a queued page"])
    batcher.notify(alone)
    due_in_flight, due_alone = batcher.vectors_due_in_s(in_flight), batcher.vectors_due_in_s(alone)
    for i in range(5):
        batcher.notify(FakeSource([f"another queued page {i}"]))
    due_behind_more = batcher.vectors_due_in_s(alone)
    embedder.gate.set()
    assert due_in_flight is not None and due_alone is not None and due_behind_more is not None
    assert 0 <= due_in_flight < due_alone < due_behind_more


def test_texts_in_a_batch_are_sorted_longest_first(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=5, wait_ms=60_000)
    source = FakeSource(["mid sized text", "a", "the longest text of them all by far", "short", "ab cd ef"])
    batcher.notify(source)
    wait(source.done)

    [call] = embedder.page_calls()
    assert [len(text) for text in call.texts] == sorted((len(t) for t in source.texts.values()), reverse=True)
    source.assert_vectors_right()  # each vector went back to its own page


def test_a_full_batch_goes_at_once_despite_a_long_wait(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=4, wait_ms=60_000)  # a minute: only a full batch can go now
    first = FakeSource(["first space writes"])
    batcher.notify(first)
    rest = [FakeSource([f"space {i} writes too"]) for i in range(3)]
    for source in rest:
        batcher.notify(source)
    for source in [first, *rest]:
        wait(source.done)

    calls = embedder.page_calls()
    assert [len(call.texts) for call in calls] == [4], "the first page waited for the others, then all went"


def test_encode_texts_pool_with_pages_and_resolve_in_input_order(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=5, wait_ms=60_000)
    source = FakeSource(["a page of the user", "another page"])
    batcher.notify(source)
    facts = ["the user likes hiking in the alps", "owns a cat", "works as a nurse"]
    future = batcher.encode_texts(facts)

    np.testing.assert_allclose(future.result(HANG_GUARD_S), REFERENCE.encode(facts), atol=1e-6)
    wait(source.done)
    source.assert_vectors_right()
    [call] = embedder.page_calls()
    assert sorted(call.texts) == sorted([*facts, *source.texts.values()]), "one encode call for both"


def test_encode_texts_larger_than_a_batch_are_split_and_reassembled(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=4, wait_ms=0)
    texts = [f"fact number {i} " + "detail " * (i % 3) for i in range(10)]

    vectors = batcher.encode_texts(texts).result(HANG_GUARD_S)
    np.testing.assert_allclose(vectors, REFERENCE.encode(texts), atol=1e-6)
    assert all(len(call.texts) <= 4 for call in embedder.page_calls())
    empty = batcher.encode_texts([]).result(HANG_GUARD_S)
    assert empty.shape == (0, REFERENCE.dim)


def test_a_query_goes_ahead_of_the_next_page_batch(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder(serialize=True)  # one model lock, as PyTorch on a GPU
    batcher = make_batcher(embedder, size=1, wait_ms=0)
    hold_a_batch_in_flight(embedder, batcher)
    waiting = FakeSource(["page waiting"])
    batcher.notify(waiting)
    result: list[np.ndarray] = []
    query = threading.Thread(target=lambda: result.append(batcher.encode_query("what does she like?")))
    query.start()
    wait(embedder.query_arrived)  # the query is counted and waits for the model lock
    embedder.gate.set()
    query.join(HANG_GUARD_S)
    wait(waiting.done)

    assert [(call.texts, call.is_query) for call in embedder.calls] == [
        (["page in flight"], False),
        (["what does she like?"], True),
        (["page waiting"], False),
    ]
    np.testing.assert_allclose(result[0], REFERENCE.vector("what does she like?"), atol=1e-6)
    assert batcher.stats().queries == 1


HELD_S = 0.3
"""How long a test watches a batch that must not start (it is held for a minute unless the rule breaks)."""


def test_pages_of_acknowledged_writes_wait_while_writes_keep_coming(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, yield_s=60, yield_max_s=60)  # writes "keep coming" for a minute
    found = FakeSource(["a page found pending when its space opened"])
    batcher.notify(found)  # no write being acknowledged: nothing to give way to
    wait(found.done)
    written = FakeSource(["a write acknowledged just now"])
    batcher.notify(written, acknowledged=True)
    assert not written.done.wait(HELD_S), "a page batch started while writes were being acknowledged"
    assert len(embedder.page_calls()) == 1


def held_write(make_batcher: MakeBatcher, text: str) -> tuple[EmbeddingBatcher, FakeSource]:
    """A batcher whose writes "keep coming" for a minute, and a write's pages it holds."""
    batcher = make_batcher(RecordingEmbedder(), yield_s=60, yield_max_s=60)
    written = FakeSource([text])
    batcher.notify(written, acknowledged=True)
    assert not written.done.wait(HELD_S), "not held to begin with"
    return batcher, written


def test_a_reader_waiting_for_vectors_ends_the_wait_at_once(make_batcher: MakeBatcher) -> None:
    batcher, written = held_write(make_batcher, "a write the reader needs")
    with batcher.awaited():
        wait(written.done)
    later = FakeSource(["a write after the reader left"])
    batcher.notify(later, acknowledged=True)
    assert not later.done.wait(HELD_S), "with no reader left, pages give way to writes again"


def test_requested_texts_are_not_held_behind_writes(make_batcher: MakeBatcher) -> None:
    batcher, _ = held_write(make_batcher, "a write acknowledged just now")
    edited = ["the user's edited fact"]
    np.testing.assert_allclose(
        batcher.encode_texts(edited).result(HANG_GUARD_S), REFERENCE.encode(edited), atol=1e-6
    )


def test_pages_wait_for_writes_at_most_yield_max(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, yield_s=60, yield_max_s=0.05)
    written = FakeSource(["written during an endless burst"])
    batcher.notify(written, acknowledged=True)
    wait(written.done)  # held for 50 ms, not for the minute the writes "keep coming"


def test_a_batcher_that_does_not_yield_embeds_acknowledged_writes_at_once(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, yield_s=0, yield_max_s=60)  # a service worker's
    written = FakeSource(["applied from the queue"])
    batcher.notify(written, acknowledged=True)
    wait(written.done)


def test_an_encode_failure_fails_the_batch_and_a_later_batch_succeeds(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    embedder.fail_calls = 1
    batcher = make_batcher(embedder, size=3, wait_ms=60_000)
    first, second = FakeSource(["page one"]), FakeSource(["page two"])
    batcher.notify(first)
    batcher.notify(second)
    future = batcher.encode_texts(["a fact"])

    with pytest.raises(RuntimeError, match="model down"):
        future.result(HANG_GUARD_S)
    wait(first.failed)
    wait(second.failed)
    assert str(first.errors[0]) == str(second.errors[0]) == "model down"
    # Both retry after their backoff, each alone; the model works again.
    wait(first.done)
    wait(second.done)
    first.assert_vectors_right()
    second.assert_vectors_right()
    later = FakeSource(["three", "more", "pages"])
    batcher.notify(later)
    wait(later.done)
    later.assert_vectors_right()
    assert batcher.stats().failures == 1


def test_a_text_that_breaks_the_model_fails_only_its_own_source_after_the_first_try(
    make_batcher: MakeBatcher,
) -> None:
    embedder = RecordingEmbedder()
    embedder.poison = "POISON"
    batcher = make_batcher(embedder, size=3, wait_ms=60_000)
    good = [FakeSource(["good page one"]), FakeSource(["good page two"])]
    bad = FakeSource(["POISON page"])
    for source in [good[0], bad, good[1]]:
        batcher.notify(source)
    for source in good:
        wait(source.done)
        source.assert_vectors_right()
        assert len(source.errors) == 1, "failed only with the shared batch, then succeeded alone"
    wait(bad.failed)
    assert bad.pending == {1: "POISON page"}


def test_a_failing_apply_affects_only_its_source(
    make_batcher: MakeBatcher, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=3, wait_ms=60_000)
    broken = FakeSource(["my secret diary entry"], fail_applies=1)
    fine = [FakeSource(["fine page one"]), FakeSource(["fine page two"])]
    with caplog.at_level(logging.WARNING, logger="memoryos.scheduler.batcher"):
        for source in [fine[0], broken, fine[1]]:
            batcher.notify(source)
        for source in fine:
            wait(source.done)
            source.assert_vectors_right()
            assert source.errors == []
        wait(broken.failed)
        wait(broken.done)  # retried after its backoff
    broken.assert_vectors_right()
    assert len(embedder.page_calls()) == 2
    assert batcher.stats().apply_failures == 1
    assert any(record.levelno == logging.WARNING for record in caplog.records)
    assert "secret" not in caplog.text, "logs carry counts, never memory text"


def test_a_source_with_nothing_pending_leaves_the_queue(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    batcher = make_batcher(embedder, size=4, wait_ms=0)
    empty, writer = FakeSource(), FakeSource(["one page"])
    batcher.notify(empty)
    batcher.notify(writer)
    wait(writer.done)
    second = FakeSource(["another page"])
    batcher.notify(second)
    wait(second.done)

    assert empty.asked == 1
    assert [call.texts for call in embedder.page_calls()] in (
        [["one page"], ["another page"]],
        [["one page", "another page"]],
    )


def test_close_finishes_the_batch_in_flight_and_stops_the_thread(make_batcher: MakeBatcher) -> None:
    embedder = RecordingEmbedder()
    name = f"test-embed-close-{uuid.uuid4().hex[:8]}"
    batcher = make_batcher(embedder, size=1, wait_ms=0, name=name)
    [thread] = batcher_threads(name)
    assert thread.daemon
    in_flight = hold_a_batch_in_flight(embedder, batcher)
    queued = FakeSource(["page still queued"])
    batcher.notify(queued)
    queued_texts = batcher.encode_texts(["queued fact"])
    closer = threading.Thread(target=batcher.close)
    closer.start()

    assert isinstance(queued_texts.exception(HANG_GUARD_S), BatcherClosedError)
    embedder.gate.set()
    closer.join(HANG_GUARD_S)
    assert not closer.is_alive()
    assert not thread.is_alive()
    in_flight.assert_vectors_right()
    assert queued.pending == {1: "page still queued"}, "left to the store"
    assert [call.texts for call in embedder.page_calls()] == [["page in flight"]]

    batcher.close()  # a no-op
    batcher.notify(queued)  # ignored
    assert isinstance(batcher.encode_texts(["late"]).exception(HANG_GUARD_S), BatcherClosedError)
    np.testing.assert_allclose(
        batcher.encode_query("still works"), REFERENCE.vector("still works"), atol=1e-6
    )
    assert len(embedder.page_calls()) == 1


def test_retry_delay_doubles_from_a_tenth_of_a_second_up_to_a_cap() -> None:
    assert [retry_delay_s(n) for n in (1, 2, 3)] == pytest.approx([0.1, 0.2, 0.4])
    assert retry_delay_s(20) == retry_delay_s(10_000) == RETRY_MAX_S


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        EmbeddingBatcher(HashEmbedder(), max_batch_size=0, max_batch_tokens=10, max_wait_ms=0)
    with pytest.raises(ValueError, match="yield_s"):
        EmbeddingBatcher(HashEmbedder(), max_batch_size=1, max_batch_tokens=10, max_wait_ms=0, yield_s=-1)
