"""Moving a data directory into the PostgreSQL database and back (`memoryos/portability/database_move.py`):
a space built by the engine on SQLite is the same space after each move — ids, texts, tiers, segments,
chains, facts with their history and sources, the profile, the op log and every question's retrieval —
a write delivered again is still recognized by its write id, and ids go on after the highest ever given.
Also: a space the database already holds is refused and left as it is, `--remove-files`, `unmoved_spaces`,
and the command line."""

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.cli.main import main
from memoryos.portability.database_move import move_to_database, move_to_files, unmoved_spaces
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddKnowledge, UpdateProfile
from memoryos.storage.records.factory import STORE_FILE
from memoryos.storage.records.postgres.connection import close_pools
from tests.support.fakes import FakeClock, HashEmbedder

pytestmark = pytest.mark.integration

CONVERSATION = Path(__file__).parents[1] / "data" / "own_conversation.json"
USER = "nadia"
ASSISTANT = "default_assistant_profile"
RESENT = [
    {"user_input": "I also booked a ceramics weekend in May.", "agent_response": "Sounds lovely!"},
    {"user_input": "My sister is coming along.", "agent_response": "Even better."},
]

USER_FACTS = ["Nadia started a pottery class.", "Nadia has a sister."]
ASSISTANT_FACTS = ["The assistant suggested a ceramics weekend."]


@pytest.fixture(autouse=True)
def _closed_pools() -> Iterator[None]:
    """The per-test database can be dropped only once this process's connections to it are closed."""
    yield
    close_pools()


def config_of(data_dir: Path, database_url: str | None = None) -> MemoryConfig:
    config = MemoryConfig.model_validate(
        {"faiss_use_gpu": "never", "ingest_mode": "inline", "short_term_capacity": 4}
        | ({} if database_url is None else {"database_url": database_url})
    )
    return config.model_copy(update={"data_dir": data_dir})


def opened(config: MemoryConfig, user: str = USER) -> Memoryos:
    # No LLM key: the offline backend's summaries and facts, deterministic on both stores.
    return Memoryos.from_config(user, config, embedder=HashEmbedder(), clock=FakeClock())


def build_space(data_dir: Path) -> dict[str, Any]:
    """The conversation through the engine on SQLite, a write with a write id, a fact edited (history)
    and the last page deleted (its id must never come back)."""
    conversation = json.loads(CONVERSATION.read_text())
    memory = opened(config_of(data_dir))
    try:
        for pair in conversation["pairs"]:
            memory.add_memory(pair["user_input"], pair["agent_response"], timestamp=pair["timestamp"])
        memory.flush()
        written = memory.add_memories(RESENT, write_id="w1")
        # The offline backend extracts no facts: some as consolidation with an LLM would store them.
        for kind, texts in (("user", USER_FACTS), ("assistant", ASSISTANT_FACTS)):
            memory.space.apply(
                AddKnowledge(
                    knowledge_kind=kind,
                    texts=texts,
                    vectors=memory.embedder.encode(texts),
                    timestamp="2024-03-20 10:00:00",
                    source_page_ids=written,
                    at=memory.clock(),
                )
            )
        memory.space.apply(
            UpdateProfile(text="Nadia, a potter in training.", source_page_ids=written, at=memory.clock())
        )
        memory.update_fact(memory.list_facts("user")[0].entry_id, "Nadia takes a pottery class on Tuesdays.")
        deleted = memory.add_memory("Remind me to call the studio.", "I will.")
        memory.flush()
        memory.delete_page(deleted)
        memory.flush()
        return {"written": written, "deleted": deleted}
    finally:
        memory.close()


def view(config: MemoryConfig) -> dict[str, Any]:
    """Everything the space holds that a client can see, read without changing it."""
    memory = opened(config)
    try:
        pages = memory.list_pages(limit=1000)
        facts = [f for kind in ("user", "assistant") for f in memory.list_facts(kind)]
        stats = memory.stats()
        return {
            "pages": [page.model_dump() for page in pages.pages],
            "segments": [segment.model_dump() for segment in memory.space.segments(count_pages=True)],
            "facts": [fact.model_dump() for fact in facts],
            "histories": [memory.fact_history(fact.entry_id).model_dump() for fact in facts],
            "profile": memory.get_user_profile_summary(),
            "profile_versions": memory.space.store.profile_version_count(),
            "tiers": (stats.short_term_pages, stats.mid_term_pages, stats.archived_pages),
            "write": memory.write_status("w1"),
        }
    finally:
        memory.close()


def retrievals(config: MemoryConfig) -> list[list[tuple[int, str, float]]]:
    """Every question of the conversation, ranked pages with their scores (retrieval records visits)."""
    memory = opened(config)
    try:
        return [
            [
                (page.page_id, page.tier, round(page.score, 9))
                for page in memory.retrieve(qa["question"]).retrieved_pages
            ]
            for qa in json.loads(CONVERSATION.read_text())["qa"]
        ]
    finally:
        memory.close()


def file_log(data_dir: Path, user: str = USER) -> list[tuple[Any, ...]]:
    store = data_dir / "default" / user / ASSISTANT / STORE_FILE
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return db.execute("SELECT seq, kind, at, detail, op_id, write_id FROM op_log ORDER BY seq").fetchall()
    finally:
        db.close()


def database_log(database_url: str, user: str = USER) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as connection:
        return connection.execute(
            "SELECT o.seq, o.kind, o.at, o.detail, o.op_id, o.write_id FROM op_log o JOIN spaces s "
            "USING (space_id) WHERE s.user_id = %s ORDER BY o.seq",
            (user,),
        ).fetchall()


def database_spaces(database_url: str) -> set[tuple[str, str, str]]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute("SELECT tenant, user_id, assistant_id FROM spaces").fetchall()
    return {(row[0], row[1], row[2]) for row in rows}


def resend_and_add(config: MemoryConfig, built: dict[str, Any]) -> None:
    """A write delivered again gives its first page ids and stores nothing; a new page's id is above
    every id the space gave, the deleted last page's too."""
    memory = opened(config)
    try:
        total = memory.list_pages(limit=1000).total
        assert memory.add_memories(RESENT, write_id="w1") == built["written"]
        assert memory.list_pages(limit=1000).total == total
        assert memory.add_memory("A new turn after the move.", "Noted.") == built["deleted"] + 1
    finally:
        memory.close()


def test_a_space_moves_into_the_database_and_back_unchanged(tmp_path: Path, database_url: str) -> None:
    files, twin, back = tmp_path / "files", tmp_path / "twin", tmp_path / "back"
    built = build_space(files)
    shutil.copytree(files, twin)  # stays on SQLite: the retrievals the moved space must give
    before, log_before = view(config_of(files)), file_log(files)
    assert before["write"] is not None and before["write"].page_ids == built["written"]
    assert any(len(h["versions"]) > 1 for h in before["histories"])
    assert before["pages"][-1]["page_id"] < built["deleted"]

    report = move_to_database(config_of(files, database_url))
    assert report.ok and [move.outcome for move in report.spaces] == ["moved"]
    with psycopg.connect(database_url, autocommit=True) as connection:  # settled: as autovacuum would
        settled = connection.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE last_vacuum IS NOT NULL "
            "AND last_analyze IS NOT NULL AND relname IN ('pages', 'page_terms', 'spaces', 'op_log')"
        ).fetchall()
    assert sorted(row[0] for row in settled) == ["op_log", "page_terms", "pages", "spaces"]
    (move,) = report.spaces
    assert move.space == ("default", USER, ASSISTANT)
    assert move.left_at == str(files / "default" / USER / ASSISTANT / STORE_FILE)
    in_database = config_of(files, database_url)
    assert view(in_database) == before
    assert database_log(database_url) == log_before
    asked = retrievals(in_database)
    assert asked == retrievals(config_of(twin))
    assert sum(map(len, asked)) > 0

    back_report = move_to_files(config_of(back, database_url))
    assert back_report.ok and [move.left_at for move in back_report.spaces] == ["the database"]
    assert view(config_of(back)) == view(in_database)
    assert file_log(back) == database_log(database_url)
    assert retrievals(config_of(back)) == retrievals(config_of(twin))
    again = move_to_files(config_of(files, database_url))  # the original file is still there
    assert [move.outcome for move in again.spaces] == ["refused"] and not again.ok
    assert file_log(files) == log_before

    resend_and_add(in_database, built)
    resend_and_add(config_of(back), built)


def small_space(data_dir: Path, user: str, text: str, database_url: str | None = None) -> None:
    memory = opened(config_of(data_dir, database_url), user)
    try:
        memory.add_memory(text, "ok")
    finally:
        memory.close()


def test_held_spaces_are_refused_moved_ones_removed(tmp_path: Path, database_url: str) -> None:
    data = tmp_path / "data"
    small_space(data, "ann", "ann's first turn")
    small_space(data, "bob", "bob's turn on a file")
    small_space(tmp_path / "elsewhere", "bob", "bob's turn in the database", database_url)
    (data / "default" / "eve" / ASSISTANT).mkdir(parents=True)
    (data / "default" / "eve" / ASSISTANT / STORE_FILE).write_bytes(b"not a database" * 100)
    (data / ".tombstones").mkdir()
    held_before = database_log(database_url, "bob")

    def database_has(space: tuple[str, str, str]) -> bool:
        return space in database_spaces(database_url)

    assert unmoved_spaces(data, database_has) == [
        ("default", "ann", ASSISTANT),
        ("default", "eve", ASSISTANT),
    ]
    report = move_to_database(config_of(data, database_url), remove_files=True)
    outcomes = {move.space[1]: (move.outcome, move.left_at) for move in report.spaces}
    assert outcomes == {"ann": ("moved", None), "bob": ("refused", None), "eve": ("failed", None)}
    assert not report.ok
    assert not (data / "default" / "ann").exists()  # its directory and the user's, left empty
    assert (data / "default" / "bob" / ASSISTANT / STORE_FILE).is_file()
    assert database_log(database_url, "bob") == held_before  # left as it was
    assert database_spaces(database_url) == {("default", "ann", ASSISTANT), ("default", "bob", ASSISTANT)}
    assert unmoved_spaces(data, database_has) == [("default", "eve", ASSISTANT)]
    small_space(data, "dan", "dan arrives after the move")
    assert unmoved_spaces(data, database_has) == [
        ("default", "dan", ASSISTANT),
        ("default", "eve", ASSISTANT),
    ]

    memory = opened(config_of(data, database_url), "ann")
    try:
        assert [page.user_input for page in memory.list_pages().pages] == ["ann's first turn"]
    finally:
        memory.close()


def test_the_command(tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    small_space(data, "ann", "a secret only ann knows")
    command = [sys.executable, "-c", "import sys; from memoryos.cli.main import main; sys.exit(main())"]
    done = subprocess.run(
        [*command, "move-to-database", "--database-url", database_url, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"moved default/ann/{ASSISTANT}: 1 pages,")
    assert lines[0].endswith(f"kept at {data / 'default' / 'ann' / ASSISTANT / STORE_FILE}")
    assert lines[1].startswith("moved 1 of 1 spaces into the database; 0 refused, 0 failed")
    assert "secret" not in done.stdout + done.stderr

    assert main(["move-to-database", "--database-url", database_url, "--data-dir", str(data)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"refused default/ann/{ASSISTANT}: already in the database")
    assert err == "error: 1 of 1 spaces were not moved (listed above)\n"

    back = tmp_path / "back"
    assert (
        main(["move-to-files", "--database-url", database_url, "--data-dir", str(back), "--remove-rows"]) == 0
    )
    out, _err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("moved 1 of 1 spaces into files")
    assert (back / "default" / "ann" / ASSISTANT / STORE_FILE).is_file()
    assert database_spaces(database_url) == set()


def test_a_missing_url_names_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MEMORYOS_DATABASE_URL", raising=False)
    assert main(["move-to-database", "--data-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: --database-url: missing")


def test_a_worker_on_the_database_refuses_to_start_while_spaces_were_never_moved(
    tmp_path: Path, database_url: str
) -> None:
    from services.worker.process import unsafe_store

    data = tmp_path / "data"
    config = MemoryConfig(data_dir=data, database_url=database_url, faiss_use_gpu="never")
    assert unsafe_store(config) is None  # nothing to move
    files = config.model_copy(update={"database_url": None})
    space = MemorySpace(files.space_dir("eve", ASSISTANT), files, "m", lambda: 4, FakeClock())
    space.close()
    refusal = unsafe_store(config)
    assert refusal is not None and "move-to-database" in refusal and "1 memory space" in refusal
    move_to_database(config)
    assert unsafe_store(config) is None  # moved: the files that stay are in the database too
