"""The memory lifecycle through the facade: ids and provenance, edit and delete of pages and facts,
fact history, expiry with a controlled clock, and what is stored after a delete (hashed fake embedder,
the offline LLM, inline ingest). The store's tests run on both record stores (`both_record_stores`);
those of files, caches and the Chroma index on SQLite only."""

import contextlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memoryos import Memoryos
from memoryos.embedding.cache import EmbeddingCache
from memoryos.errors import InvalidInputError, ItemNotFoundError
from memoryos.space.ops import DeletePages, op_from_json, op_to_json
from memoryos.types import exchange_text
from tests.support.fakes import FakeClock, HashEmbedder
from tests.support.record_stores import database_tables_holding, store_settings
from tests.unit.test_facade import CAT, GUITAR, HIKING, MUSEUM, NURSE, PORTO, add_all, make

SECRET = ("My locker code is zanzibar4471.", "I will remember zanzibar4471 for you.")


def analyzed(memory: Memoryos) -> Memoryos:
    """Every page moved to mid-term memory and analyzed into profile and facts."""
    memory.force_mid_term_analysis()
    memory.flush()
    return memory


def grep_data_dir(root: Path, needle: str) -> list[str]:
    """Files under `root` whose bytes contain `needle` (grep -rl, binary files included), and the
    database's tables with a row holding it on the PostgreSQL store."""
    found = subprocess.run(["grep", "-rla", needle, str(root)], capture_output=True, text=True)
    return found.stdout.split() + database_tables_holding(needle)


both_stores = pytest.mark.usefixtures("both_record_stores")


@both_stores
def test_every_item_has_an_id_times_and_provenance(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = make(tmp_path, clock=clock, short_term_capacity=2)
    page_ids = add_all(memory, [NURSE, CAT, HIKING, GUITAR])
    analyzed(memory)
    page = memory.get_page(page_ids[0])
    assert page.created_at == page.updated_at is not None and page.op_id
    context = memory.retrieve("Where do I work?")
    assert {p.page_id for p in context.retrieved_pages} <= set(page_ids)
    facts = memory.list_facts("user")
    assert facts and all(f.entry_id and f.created_at and f.origin == "consolidation" for f in facts)
    assert all(set(f.source_page_ids) <= set(page_ids) and f.source_page_ids for f in facts)
    assert all(k.entry_id is not None for k in context.retrieved_user_knowledge)
    listed = memory.list_pages(offset=1, limit=2)
    assert [p.page_id for p in listed.pages] == page_ids[1:3] and listed.total == 4


@both_stores
def test_deleting_a_page_removes_its_text_vector_and_the_facts_it_alone_supported(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=2, max_text_chars=400)
    ids = add_all(memory, [NURSE, SECRET, CAT, HIKING, GUITAR])
    analyzed(memory)
    assert any("zanzibar4471" in f.knowledge for f in memory.list_facts("user"))
    assert grep_data_dir(tmp_path, "zanzibar4471")
    result = memory.delete_page(ids[1])
    assert result.page_ids == [ids[1]] and result.fact_ids and result.profile_rebuild
    memory.flush()  # the next consolidation rewrites the summaries and the profile
    assert ids[1] not in memory.space.page_index.search(np.ones((1, memory.space.dim), np.float32), 10).ids
    assert all("zanzibar4471" not in f.knowledge for f in memory.list_facts("user"))
    assert "zanzibar4471" not in memory.get_user_profile_summary()
    hits = memory.retrieve("What is my locker code?", top_k=10)
    assert ids[1] not in {p.page_id for p in [*hits.retrieved_pages, *hits.short_term_memory]}
    memory.close()
    assert grep_data_dir(tmp_path, "zanzibar4471") == []
    with pytest.raises(ItemNotFoundError, match="no page with id"):
        make(tmp_path).get_page(ids[1])


@both_stores
def test_a_page_delete_survives_a_reopen_whose_snapshot_still_holds_the_vector(tmp_path: Path) -> None:
    memory = make(tmp_path)
    ids = add_all(memory, [NURSE, CAT, HIKING])
    memory.space.snapshot()
    other = make(tmp_path)  # a second process's view: its index came from the snapshot
    memory.delete_page(ids[0])
    other.space.refresh()
    assert ids[0] not in set(
        other.space.page_index.search(np.ones((1, other.space.dim), np.float32), 10).ids[0]
    )
    other.close()
    memory.close()


@both_stores
def test_editing_a_page_keeps_its_id_reembeds_it_and_drops_what_its_old_text_gave(tmp_path: Path) -> None:
    with make(tmp_path, short_term_capacity=2) as memory:
        ids = add_all(memory, [NURSE, CAT, HIKING, GUITAR])
        analyzed(memory)
        edited = memory.update_page(ids[0], user_input="I work as a baker in Nantes.")
        assert edited.page_id == ids[0] and edited.user_input == "I work as a baker in Nantes."
        assert edited.agent_response == NURSE[1] and edited.updated_at is not None
        hits = memory.retrieve("baker in Nantes", top_k=1)
        assert hits.retrieved_pages[0].page_id == ids[0]
        memory.flush()
        assert "nurse" not in memory.get_user_profile_summary().lower()
        assert all("nurse" not in f.knowledge.lower() for f in memory.list_facts("user"))


@both_stores
def test_a_fact_edit_is_a_new_version_and_history_leads_back_to_the_turns(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=2)
    ids = add_all(memory, [NURSE, CAT, HIKING, GUITAR])
    analyzed(memory)
    fact = memory.list_facts("user")[0]
    new = memory.update_fact(fact.entry_id, "The user works as a nurse in Grenoble.")
    assert new.entry_id != fact.entry_id and new.origin == "user"
    assert new.source_page_ids == fact.source_page_ids and set(new.source_page_ids) <= set(ids)
    history = memory.fact_history(fact.entry_id)
    assert [v.entry_id for v in history.versions] == [fact.entry_id, new.entry_id]
    assert history.versions[0].replaced_by == new.entry_id and not history.versions[0].active
    assert memory.fact_history(new.entry_id) == history.model_copy(update={"entry_id": new.entry_id})
    with pytest.raises(InvalidInputError, match=r"entry_id: fact .* was replaced"):
        memory.update_fact(fact.entry_id, "again")
    removed = memory.delete_fact(new.entry_id)
    assert sorted(removed.fact_ids) == [fact.entry_id, new.entry_id]
    with pytest.raises(ItemNotFoundError):
        memory.fact_history(fact.entry_id)


@both_stores
def test_expired_pages_are_never_returned_and_the_sweep_erases_them(tmp_path: Path) -> None:
    clock = FakeClock()
    with make(tmp_path, clock=clock) as memory:
        kept = memory.add_memory(*MUSEUM, timestamp="2024-05-01 10:00:00")
        short = memory.add_memory(*PORTO, timestamp="2024-05-01 10:01:00", ttl_s=60)
        memory.set_ttl(3600)
        by_space = memory.add_memory(*CAT, timestamp="2024-05-01 10:02:00")
        assert memory.get_page(short).expires_at == pytest.approx(clock() + 60)
        assert memory.get_page(by_space).expires_at == pytest.approx(clock() + 3600)
        clock.advance(61)
        context = memory.retrieve("Where does my sister live?", top_k=10)
        shown = {p.page_id for p in [*context.retrieved_pages, *context.short_term_memory]}
        assert short not in shown and {kept, by_space} <= shown
        with pytest.raises(ItemNotFoundError):
            memory.get_page(short)
        assert memory.space.store.pages([short])  # still stored until the sweep
        memory.flush()  # a consolidation pass sweeps
        assert memory.space.store.pages([short]) == []
        clock.advance(3600)
        memory.flush()
        assert memory.space.store.pages([by_space]) == [] and memory.space.store.pages([kept])
        memory.set_ttl(None)
        assert memory.get_page(memory.add_memory(*GUITAR)).expires_at is None


@both_stores
def test_bad_lifecycle_input_names_the_field_and_changes_nothing(tmp_path: Path) -> None:
    with make(tmp_path) as memory:
        (page_id,) = add_all(memory, [NURSE])
        for call, field in [
            (lambda: memory.delete_page(0), "page_id"),
            (lambda: memory.delete_page(True), "page_id"),  # type: ignore[arg-type]
            (lambda: memory.update_page(page_id, user_input=""), "user_input"),
            (lambda: memory.list_pages(limit=0), "limit"),
            (lambda: memory.set_ttl(-1), "ttl_s"),
            (lambda: memory.add_memory("a", "b", ttl_s=float("nan")), "ttl_s"),
            (lambda: memory.list_facts("everyone"), "kind"),  # type: ignore[arg-type]
        ]:
            with pytest.raises(InvalidInputError, match=f"^{field}:"):
                call()
        with pytest.raises(ItemNotFoundError):
            memory.delete_page(page_id + 100)
        assert [p.page_id for p in memory.list_pages().pages] == [page_id]


@both_stores
def test_a_delete_in_one_tenant_or_space_never_touches_another(tmp_path: Path) -> None:
    from memoryos import MemoryConfig

    with contextlib.ExitStack() as opened:
        spaces = [
            opened.enter_context(make(tmp_path, "alice", assistant_id))
            for assistant_id in ("helper", "other-assistant")
        ]
        other_tenant = opened.enter_context(
            Memoryos(
                "alice",
                None,
                tmp_path,
                assistant_id="helper",
                config=MemoryConfig(
                    faiss_use_gpu="never", tenant="acme", ingest_mode="inline", **store_settings()
                ),
                embedder=spaces[0].embedder,
                llm=spaces[0].llm,
                clock=FakeClock(),
            )
        )
        ids = [add_all(m, [NURSE, CAT]) for m in [*spaces, other_tenant]]
        assert ids[0] == ids[1] == ids[2]  # the same page ids in every space
        spaces[0].delete_page(ids[0][0])
        assert [p.page_id for p in spaces[1].list_pages().pages] == ids[1]
        assert [p.page_id for p in other_tenant.list_pages().pages] == ids[2]


@both_stores
def test_lifecycle_ops_travel_and_apply_once(tmp_path: Path) -> None:
    with make(tmp_path) as memory:
        ids = add_all(memory, [NURSE, CAT])
        op = op_from_json(op_to_json(DeletePages(page_ids=[ids[0]], at=FakeClock()())))
        first = memory.space.apply_for_detail(op)
        assert memory.space.apply_for_detail(op) == first and first["page_ids"] == [ids[0]]
        assert [p.page_id for p in memory.list_pages().pages] == [ids[1]]


class RecordingForgetEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.forgotten: list[list[str] | None] = []

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        self.forgotten.append(None if texts is None else list(texts))


def test_forget_is_an_op_that_empties_the_store_before_the_files_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = RecordingForgetEmbedder()
    memory = make(tmp_path, short_term_capacity=2, max_text_chars=400, embedder=embedder)
    add_all(memory, [NURSE, SECRET, CAT, HIKING])
    analyzed(memory)
    directory = memory.space.directory

    def crash(path: object, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("the process dies while the files are removed")

    monkeypatch.setattr("memoryos.space.memory_space.shutil.rmtree", crash)
    with pytest.raises(KeyboardInterrupt):
        memory.forget_user()
    memory.space._hold.release()  # the process died: the kernel drops its lock
    assert (directory / "memory.sqlite").is_file()  # the files survived the crash, the memory did not
    assert grep_data_dir(tmp_path, "zanzibar4471") == []
    reopened = make(tmp_path)
    assert reopened.list_pages().total == 0 and reopened.list_facts("user") == []
    assert reopened.get_user_profile_summary() == ""
    monkeypatch.undo()
    reopened.forget_user()
    assert not directory.exists()


@both_stores
def test_forget_empties_the_process_embedding_cache(tmp_path: Path) -> None:
    embedder = RecordingForgetEmbedder()
    memory = make(tmp_path, embedder=embedder)
    (page_id,) = add_all(memory, [SECRET])
    memory.delete_page(page_id)
    assert embedder.forgotten == [[exchange_text(*SECRET)]]
    memory.forget_user()
    assert embedder.forgotten[-1] is None  # the shared cache emptied whole


def test_the_embedding_cache_drops_texts_as_queries_and_documents() -> None:
    cache = EmbeddingCache(10)
    for is_query in (True, False):
        cache.put(is_query, "secret", np.ones(3, np.float32))
        cache.put(is_query, "other", np.ones(3, np.float32))
    cache.discard(["secret"])
    assert cache.get(True, "secret") is None and cache.get(False, "secret") is None and len(cache) == 2
    cache.discard(None)
    assert len(cache) == 0


def test_a_delete_reaches_the_chroma_index_too(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    from memoryos import MemoryConfig

    memory = Memoryos(
        "alice",
        None,
        tmp_path,
        config=MemoryConfig(vector_backend="chroma", ingest_mode="inline"),
        embedder=HashEmbedder(),
        llm=make(tmp_path / "other").llm,
        clock=FakeClock(),
    )
    ids = add_all(memory, [NURSE, CAT, HIKING])
    before = memory.space.page_index.count()
    memory.delete_page(ids[1])
    assert memory.space.page_index.count() == before - 1
    everything = memory.space.page_index.search(np.ones((1, memory.space.dim), np.float32), 10)
    assert ids[1] not in set(everything.ids[0]) and set(ids) - {ids[1]} <= set(everything.ids[0])
    memory.close()
