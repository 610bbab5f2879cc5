"""A retrieval's reads folded into few calls to the store (`RecordStore.read_marks`, `retrieval_basis`,
`read_opening` of both and of page counts, `retrieved_rows`, `document_frequencies` of several asks) give what the single reads give, on both
stores; a whole retrieval (pages, facts with their sources, short-term memory, profile) is the same on
both; and on PostgreSQL a retrieval and a write cost a bounded number of round trips."""

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.errors import EmbeddingModelMismatchError
from memoryos.llm.async_adapters import InlineAsyncLLM
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.planning.consolidation import Consolidator
from memoryos.space import memory_space
from memoryos.space.apply_lifecycle import PROFILE_STALE_META
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns, EmbedPages, FileTopic, LinkChain
from memoryos.storage.records.base import KNOWLEDGE_KINDS, FrequencyAsk, RecordStore
from memoryos.storage.records.factory import database_pool
from memoryos.storage.records.postgres import lexical
from memoryos.storage.records.postgres.connection import close_pools
from memoryos.storage.records.postgres.page_queries import term_rows
from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.types import Turn
from tests.support.fakes import FAKE_DIM, FakeClock, HashEmbedder

pytestmark = pytest.mark.integration

CONVERSATION = Path(__file__).parents[1] / "data" / "own_conversation.json"

ROUND_TRIPS_PER_WRITE = 2
"""What applying a run of turns costs on PostgreSQL when no other process wrote the space meanwhile: BEGIN
with the space's lock (counters, meta, fence) and the op log's entries for the run (one simple query),
and the writes with the op log, counters and COMMIT (one pipeline, whose counters' update returns the
data version the commit leaves). Catching the index up asks nothing: the counters read under the lock show no vector or
withdrawal newer than the index holds."""

ROUND_TRIPS_PER_RETRIEVE = 3
"""What a retrieval with nothing to wait for or catch up with costs on PostgreSQL: its opening (its marks,
its words' page counts and its basis, one pipeline), the ranking's rows (lexical search and the
candidates' neighbours, one statement; the other vectors ranking needs come from the page index) and the
rows returned."""


@contextmanager
def remembered(data_dir: Path, settings: dict[str, Any]) -> Iterator[tuple[Memoryos, FakeClock]]:
    """A space holding the repository's conversation, consolidated (facts, profile), with pages that
    expired (TTL), a deleted page (a gap in the ids) and an edited one."""
    conversation = json.loads(CONVERSATION.read_text())
    config = MemoryConfig.model_validate(
        {"faiss_use_gpu": "never", "ingest_mode": "inline", "short_term_capacity": 4, **settings}
    )
    clock = FakeClock()
    memory = Memoryos.from_config(
        "nadia", config.model_copy(update={"data_dir": data_dir}), embedder=HashEmbedder(), clock=clock
    )
    try:
        pairs = conversation["pairs"]
        for number, pair in enumerate(pairs):
            memory.add_memory(
                pair["user_input"],
                pair["agent_response"],
                timestamp=pair["timestamp"],
                ttl_s=60.0 if number % 7 == 3 else None,
            )
            # Each page's pass done before the next page: a pass moves the overflow it finds, so under load
            # one pass could move two pages as one run where an idle run moved them one by one, and the
            # two stores' spaces (chains, segments, facts) would differ by the machine's timing alone.
            memory.flush()
        memory.force_mid_term_analysis()  # facts and a profile (the offline LLM's)
        memory.delete_page(5)
        # The delete's pass (a profile rebuild) done before the edit: run after the edit, one rebuild
        # covers both, and the profile's version differed between the stores when a loaded machine
        # started one store's pass late (seen twice in 113 runs beside a benchmark).
        memory.flush()
        memory.update_page(8, user_input="I started a pottery class and a ceramics course.")
        memory.flush()
        clock.advance(120.0)  # the TTL pages expired, not yet swept
        yield memory, clock
    finally:
        memory.close()
        close_pools()


def _single_reads(
    store: RecordStore, now: float, page_ids: list[int], entry_ids: list[int]
) -> dict[str, Any]:
    pending = store.pending_page_ids(1)
    return {
        "marks": (store.max_page_id(), pending[0] if pending else None, store.data_version()),
        "basis": (
            store.count_expired(now),
            store.latest_profile(),
            store.latest_profile_version(),
            {kind: store.active_knowledge(kind) for kind in KNOWLEDGE_KINDS},
        ),
        "rows": (store.pages(page_ids), store.newest_in_tier("stm", 6), store.fact_support(entry_ids)),
    }


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_folded_reads_give_what_the_single_reads_give(
    tmp_path: Path, database_url: str, store_kind: str
) -> None:
    settings = {"database_url": database_url} if store_kind == "postgres" else {}
    with remembered(tmp_path / store_kind, settings) as (memory, clock):
        store = memory.space.store
        now = clock()
        max_page_id = store.max_page_id()
        page_ids = [9, 2, 999, *range(max_page_id, 0, -3)]
        facts = {kind: store.active_knowledge(kind) for kind in KNOWLEDGE_KINDS}
        entry_ids = [*[row["entry_id"] for rows in facts.values() for row in rows][::2], 10_000]
        assert entry_ids[:-1] and store.latest_profile() and store.count_expired(now) > 0

        single = _single_reads(store, now, page_ids, entry_ids)
        assert tuple(store.read_marks()) == single["marks"]
        assert tuple(store.retrieval_basis(now)) == single["basis"]
        assert tuple(store.retrieved_rows(page_ids, 6, entry_ids)) == single["rows"]
        empty = store.retrieved_rows([], 0, [])
        assert (empty.pages, empty.short_term, empty.support) == ([], [], {})

        asks = [
            FrequencyAsk(["pottery", "the", "zzzz", "ceramics"]),
            FrequencyAsk(["pottery", "class"], "user_input", 2),
            FrequencyAsk([]),
            FrequencyAsk(["pottery", "class", "e-mail"], "agent_response"),
            FrequencyAsk(["the"], None, 3),
        ]
        assert store.document_frequencies(asks) == [store.document_frequencies([ask])[0] for ask in asks]
        assert store.document_frequencies(asks)[0][0] > 0
        for asked in (asks, [FrequencyAsk([]), FrequencyAsk(["!"])], []):  # no statement for the counts
            opening = store.read_opening(asked, now)
            assert tuple(opening.marks) == single["marks"]
            assert opening.counts == store.document_frequencies(asked)
            assert tuple(opening.basis) == single["basis"]

        def single_rebuild_reads() -> tuple[Any, ...]:
            return (
                bool(store.count_expired(now) or store.expired_knowledge_ids(now)),
                sorted(store.stale_chain_ids()),
                sorted(store.stale_segment_ids()),
                store.get_meta(PROFILE_STALE_META) is not None,
            )

        def single_pass_reads() -> tuple[Any, ...]:
            return (
                single_rebuild_reads(),
                memory.space.last_chained_page(),
                store.active_segments(),
                store.unanalyzed_segment_ids(),
                store.next_expiry(),
            )

        def pass_marks(at: float) -> tuple[Any, ...]:
            marks = store.pass_marks(at, PROFILE_STALE_META, 4)
            assert marks.overflow == []  # every page moved (a flush after each): test_space's tests move some
            return (tuple(marks.rebuild), *marks[2:])

        every_id = list(range(1, max_page_id + 1))
        expiries = [page.expires_at for page in store.pages(every_id)]
        assert store.next_expiry() == min(at for at in expiries if at is not None)
        assert pass_marks(now) == single_pass_reads()
        assert store.pass_marks(0.0, PROFILE_STALE_META, 4).rebuild.expired is False
        assert store.unanalyzed_segment_ids() and store.active_segments()  # compared with something
        segment_ids = [segment.segment_id for segment in store.active_segments()]
        chain_ids = sorted({page.chain_id for page in store.pages(every_id) if page.chain_id is not None})
        with store.transaction():
            store.mark_stale(chain_ids[::-2], segment_ids[:2])
            store.set_meta(PROFILE_STALE_META, "1")
        assert pass_marks(now) == single_pass_reads()
        marks = store.pass_marks(now, PROFILE_STALE_META, 4).rebuild
        assert marks.stale_chain_ids == sorted(chain_ids[::-2]) and marks.profile_stale
        assert len(marks.stale_segment_ids) == min(2, len(segment_ids)) > 0

        # Neighbours across the deleted page's gap and at both ends, as a walk over every id finds them.
        every = sorted(page.page_id for page in store.pages(list(range(1, max_page_id + 1))))
        assert 5 not in every
        expected = {
            pid: (
                max((other for other in every if other < pid), default=None),
                min((other for other in every if other > pid), default=None),
            )
            for pid in [every[0], 4, 6, every[-1], *every[::5]]
        }
        assert store.neighbour_ids(list(expected)) == expected


def _retrievals(memory: Memoryos) -> list[Any]:
    """Every question's whole retrieval, scores to 9 digits, and the score sample's start: the page count
    and the vectors (every 4th embedded page, and all of them), read in binary on PostgreSQL."""
    conversation = json.loads(CONVERSATION.read_text())
    store = memory.space.store
    five = store.page_sample(5, memory.space.dim)
    found: list[Any] = [
        five.pages,
        five.vectors.tolist(),
        store.page_sample(1024, memory.space.dim).vectors.tolist(),
    ]
    for qa in conversation["qa"]:
        context = memory.retrieve(qa["question"]).model_dump()
        for key in ("retrieved_pages", "retrieved_user_knowledge", "retrieved_assistant_knowledge"):
            for item in context[key]:
                item["score"] = round(item["score"], 9)
        found.append(context)
    return found


def test_whole_retrievals_are_the_same_on_both_stores(tmp_path: Path, database_url: str) -> None:
    with remembered(tmp_path / "sqlite", {}) as (memory, _):
        on_sqlite = _retrievals(memory)
    with remembered(tmp_path / "postgres", {"database_url": database_url}) as (memory, _):
        on_postgres = _retrievals(memory)
    assert on_sqlite == on_postgres
    pages, five, every = on_sqlite[:3]
    assert len(five) == 5 and pages >= len(every) > 20
    contexts = on_sqlite[3:]
    assert any(
        c["retrieved_user_knowledge"] and c["retrieved_user_knowledge"][0]["source_page_ids"]
        for c in contexts
    )
    assert all(c["user_profile"] and c["short_term_memory"] for c in contexts)


@contextmanager
def counted_round_trips() -> Iterator[list[int]]:
    """Round trips psycopg makes on this thread: each statement or transaction command (psycopg's own
    BEGIN and COMMIT) sent outside a pipeline, each pipeline (its end's Sync: however many statements it
    sends), and each fetch inside a pipeline that waits for its answer (a Flush, then the wait)."""
    trips = [0]
    counted_thread = threading.get_ident()  # not a background write (the visits a read noted) meanwhile
    execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline
    command = psycopg.Connection._exec_command
    fetch = psycopg.Cursor._fetch_pipeline
    depth = [0]

    def counts() -> bool:
        return not depth[0] and threading.get_ident() == counted_thread

    def counted_execute(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
        trips[0] += counts()
        return execute(self, *args, **kwargs)

    def counted_command(self: psycopg.Connection, *args: Any, **kwargs: Any) -> Any:
        trips[0] += counts()
        return command(self, *args, **kwargs)

    def counted_fetch(self: psycopg.Cursor[Any]) -> None:
        waits = self._conn._pipeline is not None and not self.pgresult
        trips[0] += waits and threading.get_ident() == counted_thread
        fetch(self)

    @contextmanager
    def counted_pipeline(self: psycopg.Connection) -> Iterator[Any]:
        if threading.get_ident() != counted_thread:
            with pipeline(self) as opened:
                yield opened
            return
        trips[0] += counts()
        depth[0] += 1
        try:
            with pipeline(self) as opened:
                yield opened
        finally:
            depth[0] -= 1

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign,assignment]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign,assignment]
    psycopg.Connection._exec_command = counted_command  # type: ignore[method-assign]
    psycopg.Cursor._fetch_pipeline = counted_fetch  # type: ignore[method-assign]
    try:
        yield trips
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]
        psycopg.Connection._exec_command = command  # type: ignore[method-assign]
        psycopg.Cursor._fetch_pipeline = fetch  # type: ignore[method-assign]


def test_a_retrieval_costs_few_round_trips_on_postgres(tmp_path: Path, database_url: str) -> None:
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        memory.retrieve("What class did I start?")  # anything left to catch up with is caught up
        with counted_round_trips() as trips:
            memory.retrieve("What did my sister say about the pottery class?")
        assert trips[0] == ROUND_TRIPS_PER_RETRIEVE


def test_a_retrievals_prepared_statements_are_never_planned_again(tmp_path: Path, database_url: str) -> None:
    """The pool's sessions keep one plan per prepared statement (`plan_cache_mode`, `connection.py`): once
    psycopg prepared a connection's statements (at their fifth use) no execution makes a plan of its own.
    The server's default planned the first five anew and kept doing so for the word counts, whose arrays
    only a plan for the values at hand can size: 0.27 ms a retrieve, longer than they ran."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        for _ in range(8):
            memory.retrieve("What did my sister say about the pottery class?")
        memory.flush()
        pool = database_pool(memory.space.config)
        with ExitStack() as held:  # every connection of the pool at once: each session has its own plans
            connections = [
                held.enter_context(pool.connection()) for _ in range(pool.get_stats()["pool_size"])
            ]
            plans = [
                (statement, generic, custom)
                for connection in connections
                for statement, generic, custom in connection.execute(
                    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
                ).fetchall()
            ]
    counts = [generic for statement, generic, _ in plans if "FROM page_terms" in statement]
    assert counts and max(counts) >= 3  # the word counts and the lexical search, prepared and run again
    assert [(statement[:60], custom) for statement, _, custom in plans if custom] == []


def test_a_write_costs_few_round_trips_on_postgres(tmp_path: Path, database_url: str) -> None:
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        space = memory.space
        vectors = HashEmbedder().encode(["one", "two"])
        turns = [
            Turn(user_input=f"turn {n}", agent_response="noted", timestamp="2026-12-06 08:00:00")
            for n in range(2)
        ]
        space.apply(AddTurns(turns=turns, vectors=vectors))  # anything left to catch up with is caught up
        stored, indexed = space.store.max_page_id(), space.page_index.count()
        with counted_round_trips() as trips:
            space.apply(AddTurns(turns=turns, vectors=vectors))
        assert trips[0] == ROUND_TRIPS_PER_WRITE
        assert (space.store.max_page_id(), space.page_index.count()) == (stored + 2, indexed + 2)

        # Vectors for pages stored without them (the service's embedding batches): the pages still waiting
        # are read with BEGIN, so the op costs what a write does; a page that has its vector already (an
        # earlier delivery) is left as it is.
        waiting = space.apply(AddTurns(turns=turns))
        space.apply(EmbedPages(page_ids=waiting[:1], vectors=vectors[:1]))
        with counted_round_trips() as trips:
            space.apply(EmbedPages(page_ids=waiting, vectors=vectors[::-1]))
        assert trips[0] == ROUND_TRIPS_PER_WRITE
        assert space.pending_page_ids(10) == [] and space.page_index.count() == indexed + 4
        # The first keeps the vector it had (not the second op's first row); the second gets its row.
        expected = at_stored_precision(np.stack([vectors[0], vectors[0]]))
        np.testing.assert_array_equal(space.page_vectors(waiting), expected)


def test_a_consolidation_pass_reads_in_one_round_trip_and_again_only_after_it_applies(
    tmp_path: Path, database_url: str
) -> None:
    """A pass reads what it needs at once (`MemorySpace.pass_marks`): a pass with nothing to do — most of
    a busy worker's — is one round trip. One that moves pages reads the marks, the pages' vectors, then
    its commit (BEGIN with the lock and the pages it checks, the segments, COMMIT with the writes), and the
    marks again for promotion, since it changed the segments: the marks it returns (their next expiry
    serves its caller's timer) are those, current."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, clock):
        space = memory.space
        commits: list[int] = []

        async def apply_inline(_: MemorySpace, *ops: Any) -> list[list[int]]:
            commits.append(len(ops))
            return space.apply_ops(list(ops))

        async def no_texts(texts: list[str]) -> Any:
            raise AssertionError("nothing to embed in these passes")

        consolidator = Consolidator(InlineAsyncLLM(OfflineLLM()), no_texts, apply_inline, clock)
        asyncio.run(consolidator.run(space))  # the sweep of what expired, the rewrites after the delete
        assert commits
        commits.clear()
        with counted_round_trips() as trips:
            marks = asyncio.run(consolidator.run(space))
        assert trips[0] == 1 and commits == [] and marks is not None and marks.overflow == []

        texts = ["the kiln was hot", "the glaze cracked", "a new wheel", "the clay dried", "a blue vase"]
        turns = [Turn(user_input=t, agent_response="noted", timestamp="2026-12-06 08:00:00") for t in texts]
        space.apply(AddTurns(turns=turns, vectors=HashEmbedder().encode(texts)))
        with counted_round_trips() as trips:
            marks = asyncio.run(consolidator.run(space))
        assert len(commits) == 1  # the runs' links and filings
        assert trips[0] == 1 + 1 + 3 + 1
        assert marks is not None and marks.overflow == []  # read after the commit
        assert space.pass_marks(clock()) == marks


def _database_space(data_dir: Path, database_url: str, user: str, **options: Any) -> MemorySpace:
    config = MemoryConfig.model_validate(
        {"faiss_use_gpu": "never", "database_url": database_url, "data_dir": data_dir}
    )
    return MemorySpace(config.space_dir(user, "helper"), config, "hash", lambda: FAKE_DIM, **options)


def test_opening_a_new_space_costs_two_round_trips_on_postgres(tmp_path: Path, database_url: str) -> None:
    """A new user's first write opens a space: the row looked for (with its meta), then the row and
    first meta made in one statement, and nothing read back (no meta, pages, vectors, withdrawals or
    pending pages): also through `Memoryos`, which counts no pending pages in a space it created. An
    existing space's open reads its meta with its row, then its rows, and its fingerprint is checked
    against that meta."""
    _database_space(tmp_path, database_url, "warm").close()  # the pool, the schema's check
    with counted_round_trips() as trips:
        space = _database_space(tmp_path, database_url, "new")
    try:
        assert trips[0] == 2  # the row looked for, the row and meta made
        assert space.store.created and space.page_index.count() == 0 and len(space.score_sample()) == 0
        assert (
            space.store.meta_at_open()
            == space.store.all_meta()
            == {
                "embedding_model": "hash",
                "embedding_dim": str(FAKE_DIM),
            }
        )
        vectors = HashEmbedder().encode(["kiln", "glaze"])
        turns = [
            Turn(user_input=t, agent_response="ok", timestamp="2026-12-06 08:00:00")
            for t in ("kiln", "glaze")
        ]
        ids = space.apply(AddTurns(turns=turns, vectors=vectors))
    finally:
        space.close()
    with counted_round_trips() as trips:
        again = _database_space(tmp_path, database_url, "new", create=False)
    try:
        assert not again.store.created
        assert again.store.meta_at_open() == again.store.all_meta()
        assert again.page_index.count() == 2 and len(again.score_sample()) == 2
        assert again.pages(ids)[0].user_input == "kiln"
        reopened = trips[0]
    finally:
        again.close()
    with pytest.raises(EmbeddingModelMismatchError):  # the fingerprint the row's meta holds
        MemorySpace(again.directory, again.config, "another-model", lambda: FAKE_DIM, create=False)
    config = MemoryConfig.model_validate(
        {"faiss_use_gpu": "never", "database_url": database_url, "data_dir": tmp_path}
    )
    with counted_round_trips() as trips:
        memory = Memoryos.from_config(
            "new-facade", config, "helper", embedder=HashEmbedder(), llm=OfflineLLM()
        )
    try:
        assert trips[0] == 2 and memory.pending_pages_at_open == 0
    finally:
        memory.close()
    with counted_round_trips() as trips:
        memory = Memoryos.from_config(
            "new-facade", config, "helper", embedder=HashEmbedder(), llm=OfflineLLM()
        )
    try:
        assert trips[0] == reopened + 1  # a space's open, then its pending pages counted
        assert memory.pending_pages_at_open == 0
    finally:
        memory.close()


def test_a_space_another_process_wrote_while_this_open_created_it_is_caught_up(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open that created a space reads nothing back. A write another process made to the space while
    this open went on (its own open found the row just made) is caught up at this process's first read,
    or at its first write."""
    vectors = HashEmbedder().encode(["kiln"])
    turn = Turn(user_input="kiln", agent_response="ok", timestamp="2026-12-06 08:00:00")
    written: list[int] = []
    opening = memory_space.SpacePageIndex

    def index_then_another_write(*args: Any, **kwargs: Any) -> Any:
        index = opening(*args, **kwargs)
        if written:  # the other process's own open
            return index
        written.append(0)
        other = _database_space(tmp_path / "b", database_url, user, create=False)
        try:
            written[:] = other.apply(AddTurns(turns=[turn], vectors=vectors))
        finally:
            other.close()
        return index

    for first_use in ("read", "write"):
        user = f"raced-{first_use}"
        written.clear()
        with monkeypatch.context() as patched:
            patched.setattr(memory_space, "SpacePageIndex", index_then_another_write)
            creator = _database_space(tmp_path / "a", database_url, user)
        try:
            assert creator.store.created and len(written) == 1
            if first_use == "read":
                creator.refresh()
            else:
                creator.apply(AddTurns(turns=[turn], vectors=vectors))
            assert written[0] in dict(creator.page_index.search(vectors, 5).hits(0))
            assert len(creator.score_sample()) == creator.page_index.count()
        finally:
            creator.close()


def test_a_reads_facts_are_sent_again_only_once_the_space_changed(tmp_path: Path, database_url: str) -> None:
    """PostgreSQL's basis sends the active facts (their vectors most of a read's bytes) only when the space
    moved past the data version of those it kept: the same objects at the same version; after a write,
    anyone's, the facts as they are then (a retired one gone)."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, clock):
        store = memory.space.store
        now = clock()
        first = store.retrieval_basis(now)
        assert first.facts["user"] and store.read_opening([], now).basis.facts is first.facts
        assert store.retrieval_basis(now).facts is first.facts
        retired = first.facts["user"][0]["entry_id"]
        with store.transaction():
            store.retire_knowledge(retired, None)
        after = store.retrieval_basis(now)
        assert after.facts is not first.facts
        assert [row["entry_id"] for row in after.facts["user"]] == [
            row["entry_id"] for row in first.facts["user"][1:]
        ]
        assert after.facts == {kind: store.active_knowledge(kind) for kind in KNOWLEDGE_KINDS}
        assert store.retrieval_basis(now).facts is after.facts


def test_a_read_in_a_transaction_sends_the_writes_waiting_with_it(tmp_path: Path, database_url: str) -> None:
    """Consolidation checks each op against the pages after the ops before it wrote: the writes waiting
    and the read go in one round trip, and the read sees them."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        store = memory.space.store
        (before,) = store.pages([2])
        with store.transaction():
            store.set_page_fields([2], analyzed=not before.analyzed)
            with counted_round_trips() as trips:
                (page,) = store.pages([2])
                assert page.analyzed is not before.analyzed
            assert trips[0] == 1
            with counted_round_trips() as trips:
                store.pages([2])  # nothing waiting: the read alone
            assert trips[0] == 1


@contextmanager
def sent_statements() -> Iterator[list[str]]:
    """The text of each statement psycopg sends on this thread, in order (inside pipelines too)."""
    sent: list[str] = []
    counted_thread = threading.get_ident()
    execute = psycopg.Cursor.execute

    def recorded(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == counted_thread:
            sent.append(query.decode() if isinstance(query, bytes) else str(query))
        return execute(self, query, *args, **kwargs)

    psycopg.Cursor.execute = recorded  # type: ignore[method-assign,assignment]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def _writing(sent: list[str], table: str) -> list[str]:
    """The statements of `sent` that insert into or update `table`, by their first words."""
    verbs = {f"INSERT INTO {table}": "INSERT", f"UPDATE {table}": "UPDATE"}
    return [verb for sql in sent for start, verb in verbs.items() if re.match(rf"{start}\b", sql)]


def adding(*texts: str) -> AddTurns:
    """A write of a turn per text, each answered "noted", with the texts' vectors."""
    return AddTurns(
        turns=[Turn(user_input=t, agent_response="noted", timestamp="2026-12-06 08:00:00") for t in texts],
        vectors=HashEmbedder().encode(list(texts)),
    )


def test_a_run_of_writes_sends_one_statement_a_table_unless_another_write_of_it_comes_between(
    tmp_path: Path, database_url: str
) -> None:
    """Rows of the same statement join across the writes of other tables (a run of turns: its pages and
    their terms in one statement each, not two a turn), and never across a write of their own table
    whose order against them would change: the pages inserted after a page's vector is written are a
    statement of their own, after it."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        space = memory.space
        with sent_statements() as sent:
            created = space.apply_ops([adding("quokka"), adding("axolotl", "narwhal"), adding("pangolin")])
        assert _writing(sent, "pages") == ["INSERT"] and _writing(sent, "page_terms") == ["INSERT"]
        ids = [page_id for run in created for page_id in run]
        assert [p.user_input for p in space.pages(ids)] == ["quokka", "axolotl", "narwhal", "pangolin"]
        assert [pid for pid, _ in space.store.lexical_search(["narwhal"], 5, None)] == [ids[2]]

        store = space.store
        with sent_statements() as sent, store.transaction():
            first = store.insert_pages(adding("five").turns, None)
            store.assign_vectors([(first[0], HashEmbedder().encode(["five"])[0])])
            second = store.insert_pages(adding("six").turns, None)
        assert _writing(sent, "pages") == ["INSERT", "UPDATE", "INSERT"]
        assert _writing(sent, "page_terms") == ["INSERT"]
        assert [
            (p.user_input, p.page_id in store.pending_among([*first, *second]))
            for p in store.pages([*first, *second])
        ] == [
            ("five", False),
            ("six", True),
        ]


def test_a_run_of_writes_tokenizes_its_pages_in_one_batch_and_counts_their_tokens(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages of a run of turns are tokenized together when the transaction sends its writes (one call
    into FTS5, not one a page), and the corpus totals BM25 reads count their tokens: a page of no token
    (punctuation) has no terms and still counts as a page. A read in the transaction sends the pages
    before it, tokenized then, and the pages after it are a batch of their own. Pages inserted and then
    erased in the same transaction leave the totals at zero."""
    batches: list[int] = []
    instances = lexical._instances

    def counted(sides: Any) -> Any:
        batches.append(len(sides))
        return instances(sides)

    monkeypatch.setattr(lexical, "_instances", counted)
    space = _database_space(tmp_path, database_url, "tokens")
    try:
        created = space.apply_ops([adding("quokka hops"), adding("axolotl", "narwhal"), adding("?!")])
        assert batches == [4]
        ids = [page_id for run in created for page_id in run]
        punctuation = space.pages([ids[-1]])[0]
        space_id = space.store.space_id  # type: ignore[attr-defined]  # the PostgreSQL store's row
        with psycopg.connect(database_url) as conn:
            lengths = conn.execute(
                "SELECT page_id, user_len, agent_len FROM pages WHERE space_id = %s ORDER BY page_id",
                (space_id,),
            ).fetchall()
            totals = conn.execute(
                "SELECT page_count, token_count FROM spaces WHERE space_id = %s", (space_id,)
            ).fetchone()
            terms_of_punctuation = conn.execute(
                "SELECT term FROM page_terms WHERE space_id = %s AND page_id = %s AND user_tf > 0",
                (space_id, punctuation.page_id),
            ).fetchall()
        assert [row[1:] for row in lengths] == [(2, 1), (1, 1), (1, 1), (0, 1)]
        assert totals == (4, 8) and terms_of_punctuation == []
        assert [pid for pid, _ in space.store.lexical_search(["narwhal"], 5, None)] == [ids[2]]

        store = space.store
        batches.clear()
        with store.transaction():  # a read between two inserts sends the first: two batches, in order
            (first,) = store.insert_pages(adding("red panda").turns, None)
            assert store.pages([first])[0].user_input == "red panda"
            (second,) = store.insert_pages(adding("okapi").turns, None)
        assert batches == [1, 1]
        assert [pid for pid, _ in store.lexical_search(["panda"], 5, None)] == [first]
        assert [pid for pid, _ in store.lexical_search(["okapi"], 5, None)] == [second]
        with psycopg.connect(database_url) as conn:
            assert conn.execute(
                "SELECT page_count, token_count FROM spaces WHERE space_id = %s", (space_id,)
            ).fetchone() == (6, 13)

        with store.transaction():
            store.insert_pages(adding("pangolin").turns, None)
            store.delete_all(("pages",), keep_meta=("embedding_model", "embedding_dim"))
        with psycopg.connect(database_url) as conn:
            assert conn.execute(
                "SELECT page_count, token_count FROM spaces WHERE space_id = %s", (space_id,)
            ).fetchone() == (0, 0)
            assert conn.execute(
                "SELECT count(*) FROM page_terms WHERE space_id = %s", (space_id,)
            ).fetchone() == (0,)
    finally:
        space.close()


def test_a_pages_stored_terms_are_the_tokenizers_whatever_its_text_holds(
    tmp_path: Path, database_url: str
) -> None:
    """The term rows go as one joined text and integer literals (`terms_statement`): the rows stored are
    exactly the tokenizer's, with the separator itself, other control characters, the array literal's
    own syntax, quotes, non-Latin scripts and a token cut at `MAX_TERM_CHARS` in the text; and so when a
    page's text is replaced."""
    long_token = "ab" * lexical.MAX_TERM_CHARS
    texts = [
        ('kiln\x1fglaze\x1e{raku,"bisque"}', "a\tb\\c NULL null"),
        ("café CAFE 日本語 ß", f"{long_token} {long_token[:-1]}x"),
        ("'quoted' $1 %s", "{}"),
    ]
    space = _database_space(tmp_path, database_url, "odd-texts")
    try:
        store = space.store
        space_id = store.space_id  # type: ignore[attr-defined]  # the PostgreSQL store's row

        def stored_terms() -> set[tuple[Any, ...]]:
            with psycopg.connect(database_url) as conn:
                rows = conn.execute(
                    "SELECT term, page_id, user_tf, agent_tf, length FROM page_terms WHERE space_id = %s",
                    (space_id,),
                ).fetchall()
            return set(rows)

        turns = [Turn(user_input=u, agent_response=a, timestamp="2026-12-06 08:00:00") for u, a in texts]
        with store.transaction():
            ids = store.insert_pages(turns, None)
        assert stored_terms() == set(term_rows(ids, lexical.page_terms(texts)))
        assert [pid for pid, _ in store.lexical_search(["glaze"], 5, None)] == [ids[0]]
        assert [pid for pid, _ in store.lexical_search(["bisque"], 5, None)] == [ids[0]]

        replaced = ("raku\x1fkiln", "saggar")
        with store.transaction():
            store.replace_page_text(store.pages([ids[0]])[0], *replaced, {}, 0.0)
        expected = term_rows([ids[0]], lexical.page_terms([replaced])) + term_rows(
            ids[1:], lexical.page_terms(texts[1:])
        )
        assert stored_terms() == set(expected)
    finally:
        space.close()


def test_updates_of_rows_by_id_go_as_one_statement_a_set_of_columns_with_the_effect_of_all_in_order(
    tmp_path: Path, database_url: str
) -> None:
    """Consolidation updates each page and segment it moves with one-row updates (a chain, then a tier and
    segment; a segment's summary, then its counters): a transaction gathers the updates of a table into one
    statement per set of columns changed, after the new rows they may name (new rows pass waiting updates:
    no update given before a row existed can name it). A column set twice keeps the last value, counters
    added twice hold both, a time raised twice the greater; a plain write of the table between keeps its
    place."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        store = memory.space.store
        turns = [
            Turn(user_input=t, agent_response="noted", timestamp="2026-12-06 08:00:00") for t in ("a", "b")
        ]
        vector = HashEmbedder().encode(["a"])[0]
        with sent_statements() as sent, store.transaction():
            (first,) = store.insert_pages(turns[:1], None)
            store.set_page_fields([first], analyzed=True)
            (second,) = store.insert_pages(turns[1:], None)  # joins the first insert, past the update
            store.set_page_fields([second], chain_id=second)
            store.set_page_fields([first], tier="mtm", analyzed=False)
            store.count_analysis_attempt([first])
            store.count_analysis_attempt([first])
            store.assign_vectors([(second, vector)])  # a plain write of pages: what follows stays after it
            store.set_page_fields([second], tier="archived")
            segment = store.insert_segment("kilns", ["kiln"], vector, 100.0, 1)
            store.update_segment(segment, summary="kilns and glaze", topic_count=2)
            store.add_segment_counters(segment, visits=1, interactions=2, at=300.0)
            store.add_segment_counters(segment, visits=1, interactions=0, at=200.0)
            later = store.insert_segment("glaze", ["glaze"], vector, 400.0, 1)  # joins, past the updates
            store.update_segment(later, archived=1)
        # The first page's columns, the second's chain, the vector, the second's tier: in that order.
        assert _updated_columns(sent, "pages") == ["analysis_attempts", "chain_id", "vector", "tier"]
        assert _writing(sent, "pages")[0] == "INSERT" and _writing(sent, "segments") == [
            "INSERT",
            "UPDATE",
            "UPDATE",
        ]
        a, b = store.pages([first, second])
        assert (a.tier, a.analyzed, a.chain_id, b.tier, b.analyzed, b.chain_id) == (
            "mtm",
            False,
            None,
            "archived",
            False,
            second,
        )
        assert store.analysis_attempts([first]) == 2 and store.analysis_attempts([second]) == 0
        assert store.pending_among([first, second]) == [first]
        (kept,) = store.active_segments()[-1:]
        assert (
            kept.segment_id,
            kept.summary,
            kept.visit_count,
            kept.interaction_count,
            kept.last_visit_at,
        ) == (
            segment,
            "kilns and glaze",
            2,
            3,
            300.0,
        )


def test_an_update_of_a_column_the_store_does_not_update_by_id_is_refused_with_its_name(
    tmp_path: Path, database_url: str
) -> None:
    """The columns updated by id are a fixed list with their types (`PAGE_FIELDS`, `SEGMENT_FIELDS`): any
    other is a `ValueError` naming the table and the column, and the transaction stores nothing of it."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, _):
        store = memory.space.store
        (before,) = store.pages([1])
        with (
            pytest.raises(ValueError, match="pages: no column to update named user_input"),
            store.transaction(),
        ):
            store.set_page_fields([1], tier="archived")
            store.set_page_fields([1], user_input="rewritten")
        assert store.pages([1]) == [before] and before.tier != "archived"


def _updated_columns(sent: list[str], table: str) -> list[str]:
    """The first column each UPDATE of `table` in `sent` sets, in order."""
    return [m.group(1) for sql in sent if (m := re.match(rf"UPDATE {table}\b \w+ SET (\w+)", sql))]


def test_a_commit_of_runs_reads_the_active_segments_once_and_sends_a_statement_a_table(
    tmp_path: Path, database_url: str
) -> None:
    """Consolidation's commit of several runs — each a link per page and a filing — reads the active
    segments at its first filing only (`FilingSegments` keeps them through the transaction), so its writes
    wait together for the commit: one statement for the chains, the meta, the pages and the new segments,
    whatever the number of runs. The outcome is the one of the runs applied one by one: the second run
    merges into the segment the first made in the same commit."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, clock):
        space = memory.space
        texts = ["the kiln was hot", "the glaze cracked", "a new wheel", "the clay dried"]
        turns = [
            Turn(user_input=text, agent_response="noted", timestamp="2026-12-06 08:00:00") for text in texts
        ]
        pages = space.apply(AddTurns(turns=turns, vectors=HashEmbedder().encode(texts)))
        previous = space.last_chained_page()
        assert previous is not None
        topic = HashEmbedder().encode(["an unheard-of topic"])[0]
        ops: list[Any] = []
        last = previous.page_id
        for page_id in pages:
            ops.append(
                LinkChain(
                    page_id=page_id,
                    continues_previous=False,
                    chain_summary=f"chain {page_id}",
                    previous_page_id=last,
                    at=clock(),
                )
            )
            last = page_id
            # The first run makes a segment of its own; the others merge into it (the same topic).
            ops.append(
                FileTopic(
                    page_ids=[page_id], summary="Pottery.", keywords=["pottery"], vector=topic, at=clock()
                )
            )
        with sent_statements() as sent:
            space.apply_ops(ops)
        assert sum(1 for sql in sent if re.search(r"FROM segments s WHERE s\.space_id", sql)) == 1
        assert _writing(sent, "chains") == ["INSERT"] and _writing(sent, "meta") == ["INSERT"]
        assert _writing(sent, "pages") == ["UPDATE"]
        assert _writing(sent, "segments") == ["INSERT", "UPDATE"]
        filed = space.pages(pages)
        assert {page.chain_id for page in filed} == set(pages)  # each its own chain
        assert len({page.segment_id for page in filed}) == 1 and {page.tier for page in filed} == {"mtm"}
        (segment,) = [s for s in space.segments() if s.segment_id == filed[0].segment_id]
        assert segment.interaction_count == 4
        assert space.last_chained_page() == filed[-1]


def test_linking_a_page_reads_it_and_the_page_chained_last_at_once(tmp_path: Path, database_url: str) -> None:
    """Consolidation links every page it moves, most into the chain of the page linked before it: the op's
    check of the page and the chain it continues come from one read, made with the transaction's BEGIN
    (`transaction(pages=…)`: the pages the ops name and the page chained last)."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, clock):
        space = memory.space
        turn = Turn(user_input="and then the kiln", agent_response="noted", timestamp="2026-12-06 08:00:00")
        (page_id,) = space.apply(AddTurns(turns=[turn], vectors=HashEmbedder().encode(["kiln"])))
        previous = space.last_chained_page()
        assert previous is not None and previous.chain_id is not None
        link = LinkChain(
            page_id=page_id,
            continues_previous=True,
            chain_summary="pottery",
            previous_page_id=previous.page_id,
            at=clock(),
        )
        with counted_round_trips() as trips:
            space.apply(link)
        assert trips[0] == 2  # BEGIN with the lock, the op log and the two pages; the writes with COMMIT
        (linked,) = space.pages([page_id])
        assert linked.chain_id == previous.chain_id
        assert space.last_chained_page() == linked


def test_a_run_linked_and_filed_in_one_commit_reads_its_pages_once(tmp_path: Path, database_url: str) -> None:
    """Consolidation's commit of a run — a link per page, then the run's filing — checks each op against
    the pages as the ops before it left them: the pages are read once, when the transaction begins, not
    once per check (two statements and round trips for every page moved, each also carrying the writes
    waiting before it)."""
    with remembered(tmp_path, {"database_url": database_url}) as (memory, clock):
        space = memory.space
        texts = ["the kiln was hot", "the glaze cracked"]
        turns = [
            Turn(user_input=text, agent_response="noted", timestamp="2026-12-06 08:00:00") for text in texts
        ]
        first, second = space.apply(AddTurns(turns=turns, vectors=HashEmbedder().encode(texts)))
        previous = space.last_chained_page()
        assert previous is not None
        # A filing merged into an existing segment (its own vector and keywords), which reads no topic count
        # of its own: the active segments' read gives it.
        (segment, *_), vectors, _ = space.store.active_segments_with_vectors(space.dim)
        ops = [
            LinkChain(
                page_id=first,
                continues_previous=True,
                chain_summary="pottery",
                previous_page_id=previous.page_id,
                at=clock(),
            ),
            LinkChain(
                page_id=second,
                continues_previous=True,
                chain_summary="pottery",
                previous_page_id=first,
                at=clock(),
            ),
            FileTopic(
                page_ids=[first, second],
                summary="Kilns.",
                keywords=segment.keywords,
                vector=vectors[0],
                at=clock(),
            ),
        ]
        with counted_round_trips() as trips:
            space.apply_ops(ops)
        # BEGIN with the lock, the op log and the pages; the active segments (before any write waits); the
        # writes with COMMIT.
        assert trips[0] == 3
        linked = space.pages([first, second])
        assert {page.chain_id for page in linked} == {previous.chain_id}
        assert {page.tier for page in linked} == {"mtm"}
        assert linked[0].segment_id == linked[1].segment_id == segment.segment_id
