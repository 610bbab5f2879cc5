"""Export and import bundles (`memoryos/portability/bundles/`) with the hashed fake embedder and the offline LLM."""

import io
import json
import sqlite3
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryos import MemoryConfig, Memoryos, SpaceBusyError, SpaceNotFoundError
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.portability.bundles import (
    FORMAT_VERSION,
    InvalidBundleError,
    SpaceNotEmptyError,
    export_space,
    import_space,
)
from memoryos.portability.bundles.format import MEMBERS
from memoryos.space.layout import STORE_FILE
from memoryos.storage.records.sqlite.schema import SCHEMA_VERSION
from memoryos.storage.records.sqlite.store import SqliteStore
from memoryos.storage.records.vector_blobs import at_stored_precision
from tests.support.fakes import FakeClock, HashEmbedder

ASSISTANT = "default_assistant_profile"
PAIRS = [
    ("I work as a nurse in Lyon.", "Nursing in Lyon must keep you busy."),
    ("I have a cat named Miso.", "Miso is a lovely name for a cat."),
    ("I love hiking in the Alps every summer.", "Alpine trails are beautiful in summer."),
    ("My sister Maria lives in Porto.", "Porto is a beautiful city by the river."),
    ("Any museum tips for Lyon?", "I recommend the Musée des Confluences in Lyon."),
    ("I started learning the guitar last month.", "Guitar takes patience; scales help."),
]
QUERIES = ["Where does my sister live?", "What is my cat called?", "museum in Lyon", "guitar lessons"]


def config(root: Path, **overrides: Any) -> MemoryConfig:
    return MemoryConfig(
        data_dir=root,
        faiss_use_gpu="never",
        ingest_mode="inline",
        short_term_capacity=2,
        mid_term_heat_threshold=1.0,
        **overrides,
    )


def open_space(cfg: MemoryConfig, user: str, embedder: HashEmbedder | None = None) -> Memoryos:
    return Memoryos.from_config(
        user, cfg, embedder=embedder or HashEmbedder(), llm=OfflineLLM(), clock=FakeClock()
    )


def answers(memory: Memoryos) -> list[dict[str, Any]]:
    """What retrieval returns for every query, without the wall-clock `retrieved_at`."""
    results = []
    for query in QUERIES:
        context = memory.retrieve(query).model_dump()
        context.pop("retrieved_at")
        results.append(context)
    return results


@pytest.fixture
def source(tmp_path: Path) -> tuple[MemoryConfig, list[dict[str, Any]]]:
    """A space with pages in short- and mid-term memory, chains, segments, facts and profile versions, whose
    page ids went up to 50 once (pages deleted since); with what retrieval gave before export."""
    cfg = config(tmp_path / "source")
    memory = open_space(cfg, "alice")
    for i, (user, agent) in enumerate(PAIRS):
        memory.add_memory(user, agent, timestamp=f"2024-05-01 10:0{i}:00", meta_data={"n": i})
    memory.force_mid_term_analysis()
    before = answers(memory)
    memory.close()
    db = sqlite3.connect(cfg.space_dir("alice", ASSISTANT) / STORE_FILE)
    db.execute("UPDATE sqlite_sequence SET seq = 50 WHERE name = 'pages'")
    db.commit()
    db.close()
    return cfg, before


def rows(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every bundled table's rows, and the id sequences."""
    db = sqlite3.connect(directory / STORE_FILE)
    try:
        tables = {m.table: db.execute(f"SELECT * FROM {m.table} ORDER BY 1, 2").fetchall() for m in MEMBERS}
    finally:
        db.close()
    return tables


def test_export_then_import_elsewhere_retrieves_exactly_the_same(
    tmp_path: Path, source: tuple[MemoryConfig, list[dict[str, Any]]]
) -> None:
    cfg, before = source
    bundle = tmp_path / "alice.bundle"
    manifest = export_space(cfg, "alice", ASSISTANT, bundle)
    assert manifest.format_version == FORMAT_VERSION and manifest.counts()["pages"] == len(PAIRS)
    assert zipfile.ZipFile(bundle).namelist()[0] == "manifest.json"

    target = config(tmp_path / "target", tenant="acme")
    report = import_space(target, "bob", "helper", bundle, embedder=HashEmbedder())
    assert not report.re_embedded and report.counts == manifest.counts()
    source_rows, target_rows = (
        rows(cfg.space_dir("alice", ASSISTANT)),
        rows(target.space_dir("bob", "helper")),
    )
    imported_log = target_rows["op_log"].pop()
    assert imported_log[1] == "ImportBundle" and "Porto" not in imported_log[3]
    assert imported_log[0] == source_rows["op_log"][-1][0] + 1
    source_rows["meta"] = sorted([*source_rows["meta"], ("vector_generation", "0")])
    sequences = dict(target_rows.pop("sqlite_sequence"))
    assert sequences == {**dict(source_rows.pop("sqlite_sequence")), "op_log": imported_log[0]}
    assert sequences["pages"] == 50  # ids of deleted pages are never given again
    assert target_rows == source_rows  # every row, vectors bit for bit

    memory = Memoryos.from_config(
        "bob", target, assistant_id="helper", embedder=HashEmbedder(), llm=OfflineLLM(), clock=FakeClock()
    )
    after = answers(memory)
    memory.close()
    for was, now in zip(before, after, strict=True):
        assert [p["page_id"] for p in now["retrieved_pages"]] == [
            p["page_id"] for p in was["retrieved_pages"]
        ]
        assert [p["score"] for p in now["retrieved_pages"]] == pytest.approx(
            [p["score"] for p in was["retrieved_pages"]], abs=1e-6
        )
        assert now == was  # texts, facts with their scores, profile, short-term memory
    assert any(context["retrieved_user_knowledge"] for context in after) and after[0]["user_profile"]


def test_import_under_another_model_re_embeds_from_text(
    tmp_path: Path, source: tuple[MemoryConfig, list[dict[str, Any]]]
) -> None:
    cfg, _ = source
    bundle = tmp_path / "alice.bundle"
    export_space(cfg, "alice", ASSISTANT, bundle)
    other = HashEmbedder(name="other-model", dim=128)
    target = config(tmp_path / "target")
    report = import_space(target, "alice", ASSISTANT, bundle, embedder=other)
    assert report.re_embedded and (report.embedding_model, report.embedding_dim) == ("other-model", 128)
    assert other.encoded_texts > len(PAIRS)  # pages and facts

    store = SqliteStore(target.space_dir("alice", ASSISTANT) / STORE_FILE)
    try:
        assert (
            store.get_meta("embedding_model") == "other-model" and store.get_meta("vector_generation") == "1"
        )
        pages = store.pages(list(range(1, len(PAIRS) + 1)))
        page_vectors = store.page_vectors([page.page_id for page in pages], 128)
        blobs = store._db.execute(
            "SELECT vector FROM segments UNION ALL SELECT vector FROM knowledge"
        ).fetchall()
    finally:
        store.close()
    assert page_vectors.tobytes() == at_stored_precision(other.encode([p.text() for p in pages])).tobytes()
    assert {len(blob[0]) for blob in blobs} == {128 * 2}
    memory = open_space(target, "alice", other)
    top = memory.retrieve("Where does my sister Maria live?", top_k=1).retrieved_pages[0]
    memory.close()
    assert top.user_input == PAIRS[3][0]


def rezip(bundle: Path, out: Path, change: Callable[[dict[str, bytes]], object]) -> Path:
    """A copy of `bundle` with its members changed by `change` (a valid zip: only our checks can tell)."""
    with zipfile.ZipFile(bundle) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    change(members)
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out


def edit_manifest(members: dict[str, bytes], **fields: Any) -> None:
    manifest = json.loads(members["manifest.json"])
    manifest.update(fields)
    members["manifest.json"] = json.dumps(manifest).encode()


def with_valid_digest(members: dict[str, bytes], name: str, data: bytes) -> None:
    """Replace a member and make the manifest agree, so the item checks are what must refuse it."""
    import hashlib

    members[f"{name}.jsonl"] = data
    manifest = json.loads(members["manifest.json"])
    manifest["members"][name] = {
        "items": data.count(b"\n"),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    whole = hashlib.sha256(b"".join(members[f"{m.name}.jsonl"] for m in MEMBERS))
    manifest["items_sha256"] = whole.hexdigest()
    members["manifest.json"] = json.dumps(manifest).encode()


def flip_byte(bundle: Path, out: Path, at: float) -> Path:
    data = bytearray(bundle.read_bytes())
    data[int(len(data) * at)] ^= 0x40
    out.write_bytes(bytes(data))
    return out


def truncate(bundle: Path, out: Path) -> Path:
    out.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])
    return out


def page_lines_with(members: dict[str, bytes], **fields: Any) -> bytes:
    lines = members["pages.jsonl"].splitlines()
    changed = {**json.loads(lines[0]), **fields}
    return b"\n".join([json.dumps(changed).encode(), *lines[1:]]) + b"\n"


BROKEN: list[tuple[str, Callable[[Path, Path], Path], str]] = [
    (
        "byte flipped in the items",
        lambda b, o: flip_byte(b, o, 0.5),
        "damaged|checksum|not a MemoryOS bundle|missing",
    ),
    (
        "byte flipped near the end",
        lambda b, o: flip_byte(b, o, 0.97),
        "damaged|checksum|not a MemoryOS bundle|missing",
    ),
    ("truncated", truncate, "truncated"),
    (
        "a page's text altered",
        lambda b, o: rezip(
            b, o, lambda m: m.update({"pages.jsonl": m["pages.jsonl"].replace(b"Porto", b"Paris")})
        ),
        "pages.jsonl fails its SHA-256 checksum",
    ),
    (
        "a member missing",
        lambda b, o: rezip(b, o, lambda m: m.pop("knowledge.jsonl")),
        "knowledge.jsonl is missing",
    ),
    (
        "a newer format version",
        lambda b, o: rezip(b, o, lambda m: edit_manifest(m, format_version=FORMAT_VERSION + 1, new_field=1)),
        "newer than this MemoryOS reads.*upgrade MemoryOS",
    ),
    (
        "not a bundle's manifest",
        lambda b, o: rezip(b, o, lambda m: edit_manifest(m, format="x")),
        "not a MemoryOS",
    ),
    (
        "an unknown field in an item",
        lambda b, o: rezip(b, o, lambda m: with_valid_digest(m, "pages", page_lines_with(m, colour="red"))),
        "pages.jsonl line 1: colour",
    ),
    (
        "a vector of another dimension",
        lambda b, o: rezip(b, o, lambda m: with_valid_digest(m, "pages", page_lines_with(m, vector="AAAA"))),
        "pages.jsonl line 1: vector holds 3 bytes",
    ),
    (
        "a page in a segment the bundle lacks",
        lambda b, o: rezip(b, o, lambda m: with_valid_digest(m, "pages", page_lines_with(m, segment_id=999))),
        "segment_id 999 is not in segments.jsonl",
    ),
    (
        "a duplicated page id",
        lambda b, o: rezip(
            b,
            o,
            lambda m: with_valid_digest(
                m, "pages", m["pages.jsonl"].splitlines(keepends=True)[0] + m["pages.jsonl"]
            ),
        ),
        "page_id.*is not above",
    ),
]


@pytest.mark.parametrize("breakage", [b[1] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_bundle_is_refused_with_nothing_written(
    tmp_path: Path,
    source: tuple[MemoryConfig, list[dict[str, Any]]],
    breakage: Callable[[Path, Path], Path],
    request: pytest.FixtureRequest,
) -> None:
    expected = next(b[2] for b in BROKEN if b[0] == request.node.callspec.id)
    cfg, _ = source
    bundle = tmp_path / "alice.bundle"
    export_space(cfg, "alice", ASSISTANT, bundle)
    broken = breakage(bundle, tmp_path / "broken.bundle")
    target = config(tmp_path / "target")
    with pytest.raises(InvalidBundleError, match=expected) as refused:
        import_space(target, "bob", ASSISTANT, broken, embedder=HashEmbedder())
    assert str(broken) in str(refused.value)
    assert not (tmp_path / "target").exists()


def test_import_refuses_a_space_that_has_memory_and_one_open_elsewhere(
    tmp_path: Path, source: tuple[MemoryConfig, list[dict[str, Any]]]
) -> None:
    cfg, _ = source
    bundle = tmp_path / "alice.bundle"
    export_space(cfg, "alice", ASSISTANT, bundle)
    before = rows(cfg.space_dir("alice", ASSISTANT))
    with pytest.raises(SpaceNotEmptyError, match=r"already has memory .*6 pages.*forget it first"):
        import_space(cfg, "alice", ASSISTANT, bundle, embedder=HashEmbedder())
    assert rows(cfg.space_dir("alice", ASSISTANT)) == before

    target = config(tmp_path / "target")
    empty = open_space(target, "bob")  # an empty space, open in this process: its hold blocks the claim
    try:  # the bundle is checked first: a broken one is refused as such, the space not even claimed
        with pytest.raises(InvalidBundleError, match="truncated"):
            import_space(
                target, "bob", ASSISTANT, truncate(bundle, tmp_path / "cut"), embedder=HashEmbedder()
            )
        with pytest.raises(SpaceBusyError, match="cannot import"):
            import_space(target, "bob", ASSISTANT, bundle, embedder=HashEmbedder())
    finally:
        empty.close()
    import_space(target, "bob", ASSISTANT, bundle, embedder=HashEmbedder())  # closed: an empty space is fine
    assert len(rows(target.space_dir("bob", ASSISTANT))["pages"]) == len(PAIRS)


def test_export_of_a_missing_space_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(SpaceNotFoundError):
        export_space(config(tmp_path / "data"), "nobody", ASSISTANT, tmp_path / "out.bundle")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_export_is_a_snapshot_while_another_process_writes(
    tmp_path: Path, source: tuple[MemoryConfig, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write committed by another connection while the export reads is not half in the bundle."""
    import memoryos.portability.bundles.export as bundle_export

    cfg, _ = source
    store_path = cfg.space_dir("alice", ASSISTANT) / STORE_FILE
    staged = bundle_export._stage_member

    def stage_then_write(member: Any, *args: Any) -> Any:
        digest = staged(member, *args)
        if member.name == "chains":  # between members: a writer adds a page and a fact
            writer = sqlite3.connect(store_path, timeout=5)
            writer.execute(
                "INSERT INTO pages(user_input, agent_response, timestamp) VALUES ('late', 'page', '2024-05-02')"
            )
            writer.execute("UPDATE knowledge SET text = 'changed' WHERE entry_id = 1")
            writer.commit()
            writer.close()
        return digest

    monkeypatch.setattr(bundle_export, "_stage_member", stage_then_write)
    export_space(cfg, "alice", ASSISTANT, tmp_path / "alice.bundle")
    with zipfile.ZipFile(tmp_path / "alice.bundle") as archive:
        pages = archive.read("pages.jsonl").decode()
        knowledge = archive.read("knowledge.jsonl").decode()
    assert len(pages.splitlines()) == len(PAIRS) and "late" not in pages and "changed" not in knowledge


def test_every_store_column_travels_in_the_bundle(tmp_path: Path) -> None:
    """A column added to the store without a bundle field would be lost by export: this fails first."""
    path = tmp_path / STORE_FILE
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    try:
        for member in MEMBERS:
            if member.table == "sqlite_sequence":
                continue
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({member.table})")]
            assert sorted(columns) == sorted(member.columns), member.table
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()
    bundled = {m.table for m in MEMBERS} | {"withdrawn_vectors", "sqlite_sequence"}  # see bundles/format.py
    assert {t for t in tables if not t.startswith("pages_fts")} <= bundled


def test_manifest_is_readable_without_memoryos(tmp_path: Path, source: tuple[MemoryConfig, Any]) -> None:
    cfg, _ = source
    export_space(cfg, "alice", ASSISTANT, tmp_path / "alice.bundle")
    with zipfile.ZipFile(tmp_path / "alice.bundle") as archive:
        manifest = json.load(io.BytesIO(archive.read("manifest.json")))
    assert manifest["format"] == "memoryos-bundle" and manifest["embedding"]["model"] == "fake-hash-embedder"
    assert manifest["source"] == {
        "tenant": "default",
        "user_id": "alice",
        "assistant_id": ASSISTANT,
        "schema_version": SCHEMA_VERSION,
    }
    assert list(manifest["members"]) == [m.name for m in MEMBERS]
