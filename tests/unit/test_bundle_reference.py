"""Import from the reference MemoryOS's JSON files (`memoryos/portability/reference_import.py`), from the fixture
`tests/data/reference_space/` written in its layout."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from memoryos import InvalidInputError, MemoryConfig, Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.portability.bundles import SpaceNotEmptyError
from memoryos.portability.reference_import import import_reference
from memoryos.space.layout import STORE_FILE
from tests.support.fakes import FakeClock, HashEmbedder

REFERENCE = Path(__file__).parent.parent / "data" / "reference_space"
ASSISTANT = "default_assistant_profile"


def config(root: Path) -> MemoryConfig:
    return MemoryConfig(data_dir=root, faiss_use_gpu="never", ingest_mode="inline")


def test_reference_user_becomes_pages_segments_chains_profile_and_facts(tmp_path: Path) -> None:
    cfg = config(tmp_path / "data")
    embedder = HashEmbedder()
    report = import_reference(cfg, "maya", ASSISTANT, REFERENCE, embedder=embedder)
    assert report.counts == {
        "short_term_pages": 2,
        "mid_term_pages": 3,  # the page filed under two sessions is kept once
        "segments": 2,
        "facts": 3,  # "- None" is the reference's "nothing extracted"
        "profile_versions": 1,
    }
    db = sqlite3.connect(cfg.space_dir("maya", ASSISTANT) / STORE_FILE)
    try:
        pages = db.execute(
            "SELECT page_id, user_input, tier, segment_id, chain_id, analyzed FROM pages"
        ).fetchall()
        chains = db.execute("SELECT chain_id, summary FROM chains ORDER BY chain_id").fetchall()
        segments = db.execute("SELECT segment_id, visit_count, interaction_count FROM segments").fetchall()
        origins = {row[0] for row in db.execute("SELECT origin FROM knowledge")}
    finally:
        db.close()
    assert [(p[0], p[1][:22], p[2], p[3], p[4], p[5]) for p in pages] == [
        (1, "I adopted a dog called", "mtm", 1, 1, 1),  # in time order, the chain's first page names it
        (2, "Pico only eats grain-f", "mtm", 1, 1, 0),
        (3, "I work night shifts as", "mtm", 2, 3, 0),
        (4, "I booked a ferry to Co", "stm", None, None, 0),
        (5, "Can you remind me what", "stm", None, None, 0),
    ]
    assert chains[0] == (1, "Maya adopted a dog named Pico and discussed feeding him grain-free kibble.")
    assert segments == [(1, 3, 2), (2, 0, 1)] and origins == {"import"}

    memory = Memoryos.from_config("maya", cfg, embedder=embedder, llm=OfflineLLM(), clock=FakeClock())
    try:
        context = memory.retrieve("What does Pico eat? grain-free kibble")
        profile = memory.get_user_profile_summary()
        user_facts = [fact["knowledge"] for fact in memory.get_user_knowledge()]
    finally:
        memory.close()
    assert context.retrieved_pages[0].user_input == "Pico only eats grain-free kibble, twice a day."
    assert context.retrieved_pages[0].meta_info and "Pico" in context.retrieved_pages[0].meta_info
    assert profile.startswith("Maya is a nurse in Lyon")
    assert "Maya's dog is called Pico." in user_facts
    assert [k.knowledge for k in context.retrieved_assistant_knowledge] == [
        "The assistant recommended grain-free kibble twice a day for Pico."
    ]


def test_reference_import_refuses_bad_files_and_a_space_with_memory(tmp_path: Path) -> None:
    cfg = config(tmp_path / "data")
    with pytest.raises(InvalidInputError, match="not a reference MemoryOS data directory"):
        import_reference(cfg, "maya", ASSISTANT, tmp_path, embedder=HashEmbedder())

    broken = tmp_path / "reference"
    shutil.copytree(REFERENCE, broken)
    short_term = broken / "users" / "maya" / "short_term.json"
    short_term.write_text(json.dumps([{"user_input": "", "agent_response": "hi", "timestamp": None}]))
    with pytest.raises(InvalidInputError, match=r"short_term.json \[0\].*user_input"):
        import_reference(cfg, "maya", ASSISTANT, broken, embedder=HashEmbedder())
    (broken / "users" / "maya" / "mid_term.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match=r"mid_term\.json: cannot read it as JSON"):
        import_reference(cfg, "maya", ASSISTANT, broken / "users" / "maya", embedder=HashEmbedder())
    assert not cfg.data_dir.exists()

    import_reference(cfg, "maya", ASSISTANT, REFERENCE, embedder=HashEmbedder())
    with pytest.raises(SpaceNotEmptyError, match="already has memory"):
        import_reference(cfg, "maya", ASSISTANT, REFERENCE, embedder=HashEmbedder())
