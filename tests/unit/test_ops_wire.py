"""Ops on the wire: every op survives JSON and back unchanged, and a malformed one is refused by name."""

import base64
import json
import time
import typing

import numpy as np
import pytest

from memoryos.space.ops import (
    OP_FORMAT_VERSION,
    AddKnowledge,
    AddTurns,
    AnyOp,
    DeferAnalysis,
    DeleteFacts,
    DeletePages,
    EmbedPages,
    ExpireDue,
    FileTopic,
    ForgetSpace,
    LinkChain,
    MarkAnalyzed,
    RecordVisits,
    RewriteChain,
    RewriteSegment,
    SetSpaceTTL,
    UpdateFact,
    UpdatePage,
    UpdateProfile,
    op_from_json,
    op_to_json,
)
from memoryos.storage.records.vector_blobs import at_stored_precision
from memoryos.types import Turn

DIM = 6
T0 = 1_714_557_600.25


def vectors(n: int, seed: int = 0) -> np.ndarray:
    """Unit rows that float16 cannot hold exactly, plus the awkward values: -0.0 and a subnormal."""
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    if n:
        rows[0, 0], rows[0, 1] = -0.0, 3e-6
    return rows


TURNS = [
    Turn(
        user_input="J'ai adopté un chien 🐕 qui s'appelle Pico",
        agent_response="Joli nom ! 好名字",
        timestamp="2026-03-01 10:00:00",
        meta_data={"channel": "web", "nested": {"ids": [1, 2.5, None], "ok": True}, "émoji": "☕"},
    ),
    Turn(user_input="second", agent_response="reply", timestamp="2026-03-01 10:01:00"),
]

ONE_OF_EACH: dict[str, AnyOp] = {
    "add_turns": AddTurns(turns=TURNS, vectors=vectors(2), at=T0),
    "add_turns_pending": AddTurns(turns=TURNS, write_id="client-write_42"),
    "embed_pages": EmbedPages(page_ids=[3, 4, 5], vectors=vectors(3, seed=1)),
    "link_chain": LinkChain(
        page_id=7, continues_previous=True, chain_summary="Tea, then Lyon.", previous_page_id=6
    ),
    "link_chain_first": LinkChain(page_id=1, continues_previous=False, chain_summary="Start"),
    "file_topic": FileTopic(
        page_ids=[1, 2], summary="Tea.", keywords=["tea", "thé"], vector=vectors(1)[0], at=T0
    ),
    "record_visits": RecordVisits(segment_ids=[2, 2, 9], at=T0 + 0.5),
    "update_profile": UpdateProfile(text="- Likes tea\n- Lives in Lyon", source_segment_id=3),
    "update_profile_no_source": UpdateProfile(text="- Likes tea"),
    "add_knowledge": AddKnowledge(
        knowledge_kind="assistant",
        texts=["Recommended Earl Grey", "Said hi"],
        vectors=vectors(2, 2),
        timestamp="t",
    ),
    "mark_analyzed": MarkAnalyzed(segment_id=4, page_ids=[1, 2, 3]),
    "defer_analysis": DeferAnalysis(segment_id=4, page_ids=[2, 3]),
    "delete_pages": DeletePages(page_ids=[3, 9], reason="user"),
    "update_page": UpdatePage(page_id=3, user_input="Thé vert 🍵", agent_response="ok", meta_data={"a": 1}),
    "delete_facts": DeleteFacts(entry_ids=[2], reason="expired"),
    "update_fact": UpdateFact(entry_id=2, text="The user likes tea.", vector=vectors(1)[0], timestamp="t"),
    "set_space_ttl": SetSpaceTTL(ttl_s=86400.5),
    "set_space_ttl_off": SetSpaceTTL(ttl_s=None),
    "expire_due": ExpireDue(at=T0),
    "forget_space": ForgetSpace(),
    "rewrite_chain": RewriteChain(chain_id=4, summary="Tea.", page_ids=[4, 5]),
    "rewrite_segment": RewriteSegment(
        segment_id=2, summary="Tea.", keywords=["tea"], vector=vectors(1, 3)[0], page_ids=[1, 2]
    ),
    "add_turns_ttl": AddTurns(turns=TURNS, ttl_s=60),
    "update_profile_rebuild": UpdateProfile(text="- Likes tea", source_page_ids=[1, 2], rebuild=True),
}


def arrays_of(op: AnyOp) -> dict[str, np.ndarray]:
    return {name: value for name, value in op.model_dump().items() if isinstance(value, np.ndarray)}


def assert_same_op(a: AnyOp, b: AnyOp) -> None:
    assert type(a) is type(b)
    assert op_to_json(a) == op_to_json(b)
    left, right = arrays_of(a), arrays_of(b)
    assert left.keys() == right.keys()
    for name in left:
        assert left[name].dtype == right[name].dtype == np.float32
        assert left[name].shape == right[name].shape
        assert left[name].tobytes() == right[name].tobytes(), name  # bit-identical, -0.0 included
    rest = lambda op: {k: v for k, v in op.model_dump().items() if k not in left}  # noqa: E731
    assert rest(a) == rest(b)


# --- round trips ------------------------------------------------------------------------------------------
def test_every_kind_is_covered() -> None:
    union = typing.get_args(typing.get_args(AnyOp)[0])  # Annotated[Union[...], ...]
    kinds = {typing.get_args(cls.model_fields["kind"].annotation)[0] for cls in union}
    assert {op.kind for op in ONE_OF_EACH.values()} == kinds


@pytest.mark.parametrize("name", list(ONE_OF_EACH))
def test_an_op_round_trips_through_json_unchanged(name: str) -> None:
    op = ONE_OF_EACH[name]
    text = op_to_json(op)
    decoded = op_from_json(text)
    assert_same_op(op, decoded)
    assert op_to_json(decoded) == text
    assert op_from_json(text.encode()).model_dump_json() == text  # bytes off a queue too
    assert json.loads(text)["kind"] == op.kind and next(iter(json.loads(text))) == "kind"


def test_the_envelope_fields_travel() -> None:
    op = op_from_json(op_to_json(ONE_OF_EACH["add_turns"]))
    assert isinstance(op, AddTurns)
    original = ONE_OF_EACH["add_turns"]
    assert (op.version, op.op_id, op.at, op.write_id) == (
        OP_FORMAT_VERSION,
        original.op_id,
        T0,
        getattr(original, "write_id", None),
    )
    assert op.turns == TURNS and op.turns[0].meta_data["nested"] == {"ids": [1, 2.5, None], "ok": True}
    pending = op_from_json(op_to_json(ONE_OF_EACH["add_turns_pending"]))
    assert isinstance(pending, AddTurns) and pending.vectors is None and pending.write_id == "client-write_42"
    chain = op_from_json(op_to_json(ONE_OF_EACH["link_chain"]))
    assert isinstance(chain, LinkChain) and chain.previous_page_id == 6
    assert LinkChain(page_id=1, continues_previous=False, chain_summary="s").previous_page_id is None


def test_vectors_go_on_the_wire_as_base64_little_endian_float16() -> None:
    rows = vectors(3, seed=5)
    wire = json.loads(op_to_json(EmbedPages(page_ids=[1, 2, 3], vectors=rows)))["vectors"]
    assert list(wire) == ["dtype", "shape", "b64"]
    assert wire["dtype"] == "float16" and wire["shape"] == [3, DIM]
    decoded = np.frombuffer(base64.b64decode(wire["b64"]), dtype="<f2").reshape(3, DIM)
    assert decoded.tobytes() == rows.astype("<f2").tobytes()

    one = json.loads(op_to_json(ONE_OF_EACH["file_topic"]))["vector"]
    assert one["shape"] == [DIM] and len(base64.b64decode(one["b64"])) == 2 * DIM

    empty = json.loads(op_to_json(EmbedPages(page_ids=[], vectors=np.zeros((0, DIM)))))["vectors"]
    assert empty == {"dtype": "float16", "shape": [0, DIM], "b64": ""}


def test_python_mode_keeps_the_ndarray_and_the_wire_dict_is_accepted_as_input() -> None:
    op = ONE_OF_EACH["embed_pages"]
    assert isinstance(op.model_dump()["vectors"], np.ndarray)
    wire = op.model_dump(mode="json")["vectors"]
    rebuilt = EmbedPages(page_ids=[3, 4, 5], vectors=wire)
    assert isinstance(op, EmbedPages) and rebuilt.vectors.tobytes() == op.vectors.tobytes()
    from_lists = EmbedPages(page_ids=[3, 4, 5], vectors=op.vectors.tolist())
    assert from_lists.vectors.tobytes() == op.vectors.tobytes()


# --- precision --------------------------------------------------------------------------------------------
def test_a_float32_vector_is_rounded_to_the_stored_precision_when_the_op_is_built() -> None:
    raw = np.array([0.1, 1 / 3, -0.7071068, 1e-3, 0.0, 1.0], dtype=np.float32)
    op = FileTopic(page_ids=[1], summary="s", keywords=[], vector=raw, at=T0)
    assert op.vector.dtype == np.float32 and op.vector.shape == (DIM,)
    assert not np.array_equal(op.vector, raw)  # 0.1 and 1/3 are not float16 values
    np.testing.assert_array_equal(op.vector, at_stored_precision(raw))
    np.testing.assert_array_equal(op.vector, raw.astype(np.float16).astype(np.float32))
    assert raw[0] == np.float32(0.1)  # the caller's array is not touched


def test_an_ops_vectors_are_read_only() -> None:
    op = ONE_OF_EACH["add_knowledge"]
    assert isinstance(op, AddKnowledge)
    with pytest.raises(ValueError, match="read-only"):
        op.vectors[0, 0] = 1.0


def test_float64_and_integer_input_are_stored_as_float32() -> None:
    assert EmbedPages(page_ids=[1], vectors=np.ones((1, DIM))).vectors.dtype == np.float32
    assert EmbedPages(page_ids=[1], vectors=[[1, 0, 0, 0, 0, 0]]).vectors.dtype == np.float32


# --- refusals ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [OP_FORMAT_VERSION + 1, 99])
def test_a_version_newer_than_this_memoryos_is_refused_with_a_hint_to_upgrade(version: int) -> None:
    with pytest.raises(ValueError, match=r"version(.|\n)*upgrade MemoryOS"):
        UpdateProfile(text="x", version=version)
    text = op_to_json(UpdateProfile(text="x")).replace(
        f'"version":{OP_FORMAT_VERSION}', f'"version":{version}'
    )
    with pytest.raises(ValueError, match=r"version(.|\n)*upgrade MemoryOS"):
        op_from_json(text)
    # A kind only the newer format knows still says to upgrade, not that the kind is unknown.
    with pytest.raises(ValueError, match="upgrade MemoryOS"):
        op_from_json(json.dumps({"kind": "merge_spaces", "version": version}))


@pytest.mark.parametrize("version", [0, -1])
def test_a_version_below_one_is_refused(version: int) -> None:
    with pytest.raises(ValueError, match="version"):
        MarkAnalyzed(segment_id=1, page_ids=[], version=version)
    with pytest.raises(ValueError, match="version"):
        op_from_json(
            json.dumps({"kind": "mark_analyzed", "segment_id": 1, "page_ids": [], "version": version})
        )


def test_a_version_must_be_an_integer() -> None:
    with pytest.raises(ValueError, match="version"):
        op_from_json(json.dumps({"kind": "update_profile", "text": "x", "version": "1"}))


def test_an_unknown_kind_is_refused_naming_kind() -> None:
    with pytest.raises(ValueError, match="found using 'kind' does not match"):
        op_from_json(json.dumps({"kind": "drop_everything", "version": 1}))
    with pytest.raises(ValueError, match="'kind'"):
        op_from_json(json.dumps({"text": "no kind at all"}))


@pytest.mark.parametrize("text", ["", "{", "not json", b"\xff\xfe", "[1, 2]", "null"])
def test_malformed_json_is_refused(text: str | bytes) -> None:
    with pytest.raises(ValueError):
        op_from_json(text)


def test_missing_and_unknown_fields_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="chain_summary"):
        op_from_json(json.dumps({"kind": "link_chain", "page_id": 1, "continues_previous": True}))
    with pytest.raises(ValueError, match="priority"):
        op_from_json(json.dumps({"kind": "update_profile", "text": "x", "priority": 3}))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_vectors_are_refused_naming_the_field(bad: float) -> None:
    rows = vectors(2)
    rows[1, 3] = bad
    with pytest.raises(ValueError, match="vectors: NaN or infinite"):
        EmbedPages(page_ids=[1, 2], vectors=rows)
    one = vectors(1)[0]
    one[2] = bad
    with pytest.raises(ValueError, match="vector: NaN or infinite"):
        FileTopic(page_ids=[1], summary="s", keywords=[], vector=one, at=T0)


def test_a_non_finite_value_inside_the_wire_bytes_is_refused() -> None:
    b64 = base64.b64encode(np.array([1, np.nan], "<f2").tobytes()).decode()
    wire = {"dtype": "float16", "shape": [1, 2], "b64": b64}
    text = json.dumps({"kind": "embed_pages", "page_ids": [1], "vectors": wire})
    with pytest.raises(ValueError, match="vectors: NaN or infinite"):
        op_from_json(text)


def test_a_wrong_number_of_dimensions_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="vectors: expected a 2-D array"):
        EmbedPages(page_ids=[1], vectors=np.ones(DIM))
    with pytest.raises(ValueError, match="vectors: expected a 2-D array"):
        AddTurns(turns=TURNS[:1], vectors=np.ones((1, 1, DIM)))
    with pytest.raises(ValueError, match="vector: expected a 1-D array"):
        FileTopic(page_ids=[1], summary="s", keywords=[], vector=np.ones((1, DIM)), at=T0)
    with pytest.raises(ValueError, match="vectors: not a rectangular array"):
        AddKnowledge(knowledge_kind="user", texts=["a", "b"], vectors=[[1.0, 0.0], [1.0]], timestamp="t")


def test_values_beyond_the_float16_range_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="vectors: values beyond the float16 range"):
        AddKnowledge(knowledge_kind="user", texts=["a"], vectors=np.full((1, DIM), 7e4), timestamp="t")


def test_non_numeric_vectors_are_refused() -> None:
    with pytest.raises(ValueError, match="vectors"):
        EmbedPages(page_ids=[1], vectors=[["a", "b"]])
    with pytest.raises(ValueError, match="vectors"):
        EmbedPages(page_ids=[1], vectors="AAAA")


@pytest.mark.parametrize(
    "wire, message",
    [
        ({"dtype": "float32", "shape": [1, 2], "b64": "AAAAAA=="}, "dtype"),
        ({"dtype": "float16", "shape": [2], "b64": "AAAAAA=="}, "shape"),
        ({"dtype": "float16", "shape": [1, -2], "b64": "AAAAAA=="}, "shape"),
        ({"dtype": "float16", "shape": [1, 3], "b64": "AAAAAA=="}, "bytes"),
        ({"dtype": "float16", "shape": [1, 2], "b64": "AA*AAA=="}, "base64"),
        ({"dtype": "float16", "shape": [1, 2]}, "keys"),
        ({"dtype": "float16", "shape": [1, 2], "b64": "AAAAAA==", "order": "C"}, "keys"),
    ],
)
def test_a_malformed_wire_vector_is_refused_naming_the_field(wire: dict[str, object], message: str) -> None:
    text = json.dumps({"kind": "embed_pages", "page_ids": [1], "vectors": wire})
    with pytest.raises(ValueError, match=rf"vectors: .*{message}"):
        op_from_json(text)


def test_at_must_be_finite() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="at"):
            RecordVisits(segment_ids=[1], at=bad)
    with pytest.raises(ValueError, match="at"):
        op_from_json(json.dumps({"kind": "update_profile", "text": "x", "at": None}))


@pytest.mark.parametrize("key", ["", "has space", "semi;colon", "ü", "x" * 65])
def test_ids_are_short_and_plain(key: str) -> None:
    with pytest.raises(ValueError, match="op_id"):
        UpdateProfile(text="x", op_id=key)
    with pytest.raises(ValueError, match="write_id"):
        AddTurns(turns=TURNS, write_id=key)
    assert UpdateProfile(text="x", op_id="A-z_09" + "x" * 58).op_id.startswith("A-z_09")


# --- defaults ---------------------------------------------------------------------------------------------
def test_op_ids_and_write_ids_default_to_fresh_unique_values() -> None:
    adds = [AddTurns(turns=TURNS) for _ in range(50)]
    assert len({op.op_id for op in adds}) == 50
    assert len({op.write_id for op in adds}) == 50
    assert {op.op_id for op in adds}.isdisjoint(op.write_id for op in adds)
    assert all(len(op.op_id) == 32 and len(op.write_id) == 32 for op in adds)
    assert len({UpdateProfile(text="x").op_id for _ in range(50)}) == 50


def test_a_redelivered_write_keeps_its_write_id_under_a_new_op_id() -> None:
    first = AddTurns(turns=TURNS, write_id="w1")
    again = AddTurns(turns=TURNS, write_id=first.write_id)
    assert again.write_id == first.write_id and again.op_id != first.op_id


def test_at_defaults_to_when_the_op_was_planned_and_is_kept_when_given() -> None:
    before = time.time()
    op = MarkAnalyzed(segment_id=1, page_ids=[2])
    assert before <= op.at <= time.time()
    assert FileTopic(page_ids=[1], summary="s", keywords=[], vector=np.ones(DIM), at=T0).at == T0
    assert RecordVisits(segment_ids=[1], at=12).at == 12.0


def test_ops_are_frozen() -> None:
    op = UpdateProfile(text="x")
    with pytest.raises(ValueError):
        op.text = "y"  # type: ignore[misc]
