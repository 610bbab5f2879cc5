"""`SpacePool`: least recently used idle spaces are closed to fit a byte budget and a count, a space in use
is never closed, a key is never open twice, and a real `Memoryos` closed by the pool reopens intact."""

import contextlib
import random
import threading
import time
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space.pool import (
    INDEX_BYTES_PER_DIM,
    SPACE_OVERHEAD_BYTES,
    SpaceKey,
    SpacePool,
    estimate_resident_bytes,
)
from tests.support.fakes import FAKE_DIM, FakeClock, HashEmbedder


def key(user: str) -> SpaceKey:
    return SpaceKey("acme", user, "helper")


class FakeSpace:
    """A space that records its life; `size` is what the pool's estimator reads."""

    def __init__(self, space_key: SpaceKey, size: int, live: dict[SpaceKey, "FakeSpace"]) -> None:
        assert space_key not in live, f"{space_key} opened twice"
        self.key, self.size, self.closed, self._live = space_key, size, False, live
        live[space_key] = self

    def close(self) -> None:
        assert not self.closed, "closed twice"
        self.closed = True
        del self._live[self.key]


class Opener:
    """The pool's factory: counts opens per user, keeps the live spaces, and can be told to fail or wait."""

    def __init__(self, size: int = 10) -> None:
        self.size = size
        self.live: dict[SpaceKey, FakeSpace] = {}
        self.opens: dict[str, int] = {}
        self.fail_next = False
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()

    def __call__(self, space_key: SpaceKey, create: bool = True) -> FakeSpace:
        if self.gate is not None:
            self.gate.wait(5)
        with self._lock:
            self.opens[space_key.user_id] = self.opens.get(space_key.user_id, 0) + 1
            if self.fail_next:
                self.fail_next = False
                raise OSError("disk unavailable")
            return FakeSpace(space_key, self.size, self.live)


def pool_of(opener: Opener, budget: int = 10**9, max_open: int = 100) -> SpacePool[FakeSpace]:
    return SpacePool(opener, memory_budget_bytes=budget, max_open=max_open, resident_bytes=lambda s: s.size)


def use_once(pool: SpacePool[FakeSpace], user: str) -> FakeSpace:
    with pool.use(key(user)) as space:
        return space


def open_users(pool: SpacePool[FakeSpace]) -> list[str]:
    return [k.user_id for k in pool.open_keys()]


def test_a_space_is_opened_once_and_reused() -> None:
    opener = Opener()
    pool = pool_of(opener)
    first = use_once(pool, "ann")
    assert use_once(pool, "ann") is first and not first.closed
    assert opener.opens == {"ann": 1} and len(pool) == 1


def test_past_max_open_the_least_recently_used_space_is_closed() -> None:
    opener = Opener()
    pool = pool_of(opener, max_open=2)
    ann, _ = use_once(pool, "ann"), use_once(pool, "bob")
    use_once(pool, "ann")  # ann is now the most recently used
    use_once(pool, "cid")
    assert open_users(pool) == ["ann", "cid"]
    assert not ann.closed and "bob" not in {k.user_id for k in opener.live}
    use_once(pool, "bob")
    assert opener.opens["bob"] == 2 and open_users(pool) == ["cid", "bob"]


def test_the_byte_budget_closes_idle_spaces_and_rereads_sizes_on_release() -> None:
    opener = Opener(size=40)
    pool = pool_of(opener, budget=100)
    use_once(pool, "ann")
    use_once(pool, "bob")
    assert pool.resident_bytes() == 80
    use_once(pool, "cid")
    assert open_users(pool) == ["bob", "cid"] and pool.resident_bytes() == 80
    with pool.use(key("cid")) as cid:
        cid.size = 90  # the space grew while in use: the pool learns it when the use ends
    assert open_users(pool) == ["cid"] and pool.resident_bytes() == 90


def test_a_space_in_use_is_never_closed_and_the_limit_is_restored_on_release() -> None:
    opener = Opener()
    pool = pool_of(opener, max_open=1)
    with pool.use(key("ann")) as ann:
        bob = use_once(pool, "bob")
        assert bob.closed and not ann.closed  # over the limit: the idle one goes, the busy one stays
        with pool.use(key("cid")) as cid:
            assert open_users(pool) == ["ann", "cid"]  # both busy: the limit is soft
        assert cid.closed and not ann.closed
    assert open_users(pool) == ["ann"] and not ann.closed


def test_a_space_closed_during_use_is_dropped_and_reopened_next_time() -> None:
    opener = Opener()
    pool = pool_of(opener)
    with pool.use(key("ann")) as ann:
        ann.close()  # what forget_user does: the space is erased and closed
    assert open_users(pool) == []
    assert not use_once(pool, "ann").closed and opener.opens["ann"] == 2


def test_a_failed_open_leaves_nothing_behind_and_is_retried() -> None:
    opener = Opener()
    pool = pool_of(opener)
    opener.fail_next = True
    with pytest.raises(OSError, match="disk unavailable"):
        use_once(pool, "ann")
    assert len(pool) == 0
    assert not use_once(pool, "ann").closed and opener.opens["ann"] == 2


def test_callers_of_a_space_being_opened_wait_for_the_same_instance() -> None:
    opener = Opener()
    opener.gate = threading.Event()
    pool = pool_of(opener)
    got: list[FakeSpace] = []

    def user() -> None:
        got.append(use_once(pool, "ann"))

    threads = [threading.Thread(target=user) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    opener.gate.set()
    for thread in threads:
        thread.join(5)
    assert len(got) == 4 and all(space is got[0] for space in got)
    assert opener.opens == {"ann": 1}


def test_concurrent_use_never_opens_a_key_twice_nor_hands_out_a_closed_space() -> None:
    opener = Opener()
    pool = pool_of(opener, max_open=3)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(200):
                with pool.use(key(f"user{rng.randrange(8)}")) as space:
                    assert not space.closed
                    time.sleep(0)
                    assert not space.closed
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert len(pool) <= 3 and len(opener.live) == len(pool)


def test_closing_the_pool_closes_every_space_and_refuses_new_uses() -> None:
    opener = Opener()
    pool = pool_of(opener)
    spaces = [use_once(pool, user) for user in ("ann", "bob")]
    pool.close()
    assert all(space.closed for space in spaces) and not opener.live
    with pytest.raises(RuntimeError, match="closed"):
        use_once(pool, "cid")


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        SpacePool(Opener(), memory_budget_bytes=0)
    with pytest.raises(ValueError, match="max_open"):
        SpacePool(Opener(), memory_budget_bytes=1, max_open=0)


def test_real_spaces_are_costed_by_their_index_and_reopen_intact_after_eviction(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    config = MemoryConfig(data_dir=tmp_path, faiss_use_gpu="never")

    def open_memory(space_key: SpaceKey, create: bool) -> Memoryos:
        return Memoryos(
            space_key.user_id,
            None,
            tmp_path,
            assistant_id=space_key.assistant_id,
            config=config,
            embedder=embedder,
            llm=OfflineLLM(),
            clock=FakeClock(),
        )

    pool: SpacePool[Memoryos] = SpacePool(open_memory, memory_budget_bytes=10**9, max_open=1)
    with pool.use(key("ann")) as ann:
        for i in range(12):
            ann.add_memory(f"I planted tomato number {i}", f"Noted tomato {i}")
        ann.flush()  # background ingest: wait until every page is embedded and indexed
        pages = ann.space.page_index.count()
        estimate = estimate_resident_bytes(ann)
    assert pages == 12
    assert (
        estimate
        >= SPACE_OVERHEAD_BYTES + pages * FAKE_DIM * INDEX_BYTES_PER_DIM + ann.space.score_sample().nbytes
    )
    with pool.use(key("bob")) as bob:
        bob.add_memory("My sailing regatta is on Sunday", "Good luck at the regatta")
        bob.flush()
    assert ann.space.closed and open_users(pool) == ["bob"]  # type: ignore[arg-type]
    with pool.use(key("ann")) as reopened:
        assert reopened is not ann and reopened.space.page_index.count() == 12
        context = reopened.retrieve("tomato number 7")
        assert any("tomato number 7" in page.user_input for page in context.retrieved_pages)
    pool.close()


def test_closed_for_waits_for_users_then_keeps_the_space_closed_until_it_exits() -> None:
    opener = Opener()
    pool = pool_of(opener)
    in_use, leave = threading.Event(), threading.Event()
    first: list[FakeSpace] = []

    def user_inside() -> None:
        with pool.use(key("ann")) as space:
            first.append(space)
            in_use.set()
            leave.wait(5)

    held, finish = threading.Event(), threading.Event()
    seen_while_held: list[bool] = []

    def holder() -> None:
        with pool.closed_for(key("ann")):
            seen_while_held.append(first[0].closed)
            held.set()
            finish.wait(5)

    inside = threading.Thread(target=user_inside)
    inside.start()
    assert in_use.wait(5)
    holding = threading.Thread(target=holder)
    holding.start()
    assert not held.wait(0.2)  # the space is in use: not closed under its user
    leave.set()
    assert held.wait(5) and seen_while_held == [True]
    waits: list[int] = []
    second: list[FakeSpace] = []

    def newcomer_use() -> None:
        with pool.use(key("ann"), on_wait=lambda: waits.append(1)) as space:
            second.append(space)

    newcomer = threading.Thread(target=newcomer_use)
    newcomer.start()
    deadline = time.monotonic() + 5
    while not waits:  # the newcomer waits, doing its upkeep, while the key is held
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not second and opener.opens == {"ann": 1} and key("ann") not in opener.live
    finish.set()
    for thread in (inside, holding, newcomer):
        thread.join(5)
    assert second and second[0] is not first[0] and not second[0].closed
    assert opener.opens == {"ann": 2}


def test_closed_for_does_its_callers_upkeep_while_it_waits_for_users() -> None:
    """A worker's forget waiting for a long read (or a reindex) keeps renewing its leases meanwhile."""
    pool = pool_of(Opener())
    in_use, leave = threading.Event(), threading.Event()

    def user_inside() -> None:
        with pool.use(key("ann")):
            in_use.set()
            leave.wait(5)

    inside = threading.Thread(target=user_inside)
    inside.start()
    assert in_use.wait(5)
    waits: list[int] = []

    def upkeep() -> None:
        waits.append(1)
        if len(waits) == 3:
            leave.set()  # the user leaves once the waiter has done its upkeep a few times

    with pool.closed_for(key("ann"), on_wait=upkeep):
        assert len(waits) >= 3
    inside.join(5)


def test_closed_for_a_space_not_open_holds_the_key_and_leaves_others_alone() -> None:
    opener = Opener()
    pool = pool_of(opener)
    bob = use_once(pool, "bob")
    with pool.closed_for(key("ann")):
        assert use_once(pool, "bob") is bob  # other keys are served meanwhile
        assert "ann" not in opener.opens
    assert not use_once(pool, "ann").closed and not bob.closed


def test_the_pools_counts_stay_those_of_its_open_spaces_through_every_kind_of_change() -> None:
    """The pool keeps its open count and bytes as entries change (a use costs the same with 10,000 spaces
    open): after uses that grow a space's estimate, failed opens, evictions, `closed_for` and a space
    erased under its user, they equal what the open spaces add up to, and the limits hold."""
    opener = Opener()
    pool: SpacePool[FakeSpace] = SpacePool(
        opener, memory_budget_bytes=200, max_open=12, resident_bytes=lambda space: space.size
    )
    rng = random.Random(7)
    for step in range(600):
        user = key(f"u{rng.randrange(30)}")
        action = rng.random()
        if action < 0.05:
            opener.fail_next = True  # fails if the space must be opened
            with contextlib.suppress(OSError), pool.use(user):
                pass
            opener.fail_next = False
        elif action < 0.1:
            with pool.closed_for(user):
                pass
        else:
            with pool.use(user) as space:
                space.size = rng.randrange(5, 40)  # re-read when released
                if action > 0.97:
                    space.close()  # erased under its user (a forget): dropped on release
        assert len(pool) == len(opener.live) <= 12, step
        assert pool.resident_bytes() == sum(space.size for space in opener.live.values()) <= 200, step


def test_the_use_that_opens_a_space_tells_the_factory_whether_it_may_create_it() -> None:
    """A read's use (`create=False`) that opens the space, after a forget erased it meanwhile, must not make
    it again: the factory hears it from the use that opens, and only from that one."""
    asked: list[bool] = []
    live: dict[SpaceKey, FakeSpace] = {}

    def open_space(space_key: SpaceKey, create: bool) -> FakeSpace:
        asked.append(create)
        return FakeSpace(space_key, 1, live)

    pool: SpacePool[FakeSpace] = SpacePool(open_space, memory_budget_bytes=10**9)
    with pool.use(key("ann"), create=False), pool.use(key("ann")):
        pass  # the second use finds it open: no second open
    with pool.use(key("bob")):
        pass
    assert asked == [False, True]
