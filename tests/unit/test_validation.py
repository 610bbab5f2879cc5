"""Input checks: every rejection is a `ValueError` whose message starts with the field's name."""

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError
from memoryos.validation import (
    MAX_ID_CHARS,
    format_timestamp,
    format_unix_timestamp,
    parse_timestamp,
    validate_id,
    validate_text,
)


# --- ids ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value", ["alice", "a", "user_42", "Bob.Smith", "x@example.com", "a+b-c", "9lives", "a" * MAX_ID_CHARS]
)
def test_valid_ids_are_returned_unchanged(value: str) -> None:
    assert validate_id("user_id", value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "..",
        ".",
        "a..b",
        "../etc",
        "a/b",
        "/abs",
        "a\\b",
        "a\x00b",
        "a" * (MAX_ID_CHARS + 1),
        ".hidden",
        "-flag",
        "with space",
        "abc\n",
        "\nabc",
        "tab\tid",
        "caf\u00e9",
        "名前",
    ],
)
def test_unsafe_ids_are_rejected_naming_the_field(value: str) -> None:
    with pytest.raises(ValueError, match=r"^assistant_id: ") as raised:
        validate_id("assistant_id", value)
    assert isinstance(raised.value, InvalidInputError)
    assert raised.value.field == "assistant_id"


@pytest.mark.parametrize("value", [None, 42, b"alice", ["alice"]])
def test_non_string_ids_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match=r"^user_id: must be a string"):
        validate_id("user_id", value)


def test_over_long_id_message_gives_the_limit_and_the_length() -> None:
    with pytest.raises(ValueError, match=f"at most {MAX_ID_CHARS} characters, got {MAX_ID_CHARS + 5}"):
        validate_id("user_id", "u" * (MAX_ID_CHARS + 5))


# --- texts --------------------------------------------------------------------------------------------
def test_text_is_stripped_and_kept_whole_up_to_the_limit() -> None:
    assert validate_text("user_input", "  hello there \n", 100) == "hello there"
    assert validate_text("user_input", "x" * 100, 100) == "x" * 100
    assert validate_text("user_input", "  " + "x" * 100 + "  ", 100) == "x" * 100
    assert validate_text("user_input", "日本語のテキスト", 100) == "日本語のテキスト"


@pytest.mark.parametrize("value", ["", " ", "\n\t  \r\n", "\u3000\u00a0"])
def test_empty_or_whitespace_text_is_rejected(value: str) -> None:
    with pytest.raises(ValueError, match=r"^agent_response: must not be empty"):
        validate_text("agent_response", value, 100)


def test_over_long_text_is_rejected_not_cut() -> None:
    with pytest.raises(ValueError, match=r"^user_input: is 101 characters; the limit is 100"):
        validate_text("user_input", "x" * 101, 100)


def test_text_with_nul_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^query: must not contain NUL"):
        validate_text("query", "abc\x00def", 100)


@pytest.mark.parametrize("value", [None, 3, b"bytes", {"text": "x"}])
def test_non_string_text_is_rejected(value: object) -> None:
    with pytest.raises(ValueError, match=r"^user_input: must be a string"):
        validate_text("user_input", value, 100)


# --- timestamps ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01 10:00:00", datetime(2024, 5, 1, 10, 0, 0)),
        ("  2024-05-01 10:00:00 ", datetime(2024, 5, 1, 10, 0, 0)),
        ("2024-05-01T10:00:00", datetime(2024, 5, 1, 10, 0, 0)),
        ("2024-05-01T10:00", datetime(2024, 5, 1, 10, 0, 0)),
        ("2024-05-01", datetime(2024, 5, 1, 0, 0, 0)),
        ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, 0, 0)),
        ("2024-05-01T10:00:00+02:00", datetime(2024, 5, 1, 8, 0, 0)),
        ("2024-05-01T01:00:00-03:30", datetime(2024, 5, 1, 4, 30, 0)),
        ("2024-05-01 10:00:00.250", datetime(2024, 5, 1, 10, 0, 0, 250000)),
    ],
)
def test_iso_8601_and_reference_format_parse_to_naive_utc(value: str, expected: datetime) -> None:
    parsed = parse_timestamp("timestamp", value)
    assert parsed == expected
    assert parsed.tzinfo is None


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2024-13-01 10:00:00",
        "2024-02-30 10:00:00",
        "2024-05-01 25:00:00",
        "01/05/2024",
        "   ",
        "",
        "2024-05-01 10:00:00 UTC+99",
    ],
)
def test_unparseable_timestamps_are_rejected_naming_the_field(value: str) -> None:
    with pytest.raises(ValueError, match=r"^timestamp: "):
        parse_timestamp("timestamp", value)


@pytest.mark.parametrize("value", [1714557600, 1714557600.0, b"2024-05-01", True])
def test_non_string_timestamps_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match=r"^turns\[0\]\.timestamp: "):
        parse_timestamp("turns[0].timestamp", value)


def test_none_means_now_to_the_second_in_utc() -> None:
    now = datetime(2024, 5, 1, 12, 30, 15, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert parse_timestamp("timestamp", None, now) == datetime(2024, 5, 1, 10, 30, 15)
    before = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    assert parse_timestamp("timestamp", None) >= before


def test_datetime_values_are_accepted_and_aware_ones_converted() -> None:
    assert parse_timestamp("t", datetime(2024, 5, 1, 10)) == datetime(2024, 5, 1, 10)
    aware = datetime(2024, 5, 1, 10, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_timestamp("t", aware) == datetime(2024, 5, 1, 15)


def test_stored_format_round_trips() -> None:
    moment = datetime(2024, 5, 1, 10, 0, 7)
    assert format_timestamp(moment) == "2024-05-01 10:00:07"
    assert parse_timestamp("t", format_timestamp(moment)) == moment
    assert format_unix_timestamp(1714557600.0) == "2024-05-01 10:00:00"


def test_early_years_are_stored_zero_padded_so_they_read_back() -> None:
    moment = parse_timestamp("timestamp", "0999-05-01T10:00:00")
    assert format_timestamp(moment) == "0999-05-01 10:00:00"
    assert datetime.strptime(format_timestamp(moment), "%Y-%m-%d %H:%M:%S") == moment


# --- configuration values that become paths or sizes ----------------------------------------------------
UNSAFE_TENANTS = ["..", "../../escape", "a/b", "/abs", "a\x00b", "t" * (MAX_ID_CHARS + 1)]


@pytest.mark.parametrize("tenant", UNSAFE_TENANTS)
def test_a_tenant_that_is_not_one_path_component_is_rejected(tmp_path: Path, tenant: str) -> None:
    with pytest.raises(ValueError, match=r"tenant: "):
        MemoryConfig(data_dir=tmp_path, tenant=tenant)
    config = MemoryConfig(data_dir=tmp_path, tenant="acme")
    with pytest.raises(ValueError, match=r"tenant: "):
        config.tenant = tenant
    assert config.space_dir("alice", "helper") == tmp_path / "acme" / "alice" / "helper"


@pytest.mark.parametrize("tenant", [t for t in UNSAFE_TENANTS if "\x00" not in t])  # env cannot hold NUL
def test_a_tenant_from_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch, tenant: str) -> None:
    monkeypatch.setenv("MEMORYOS_TENANT", tenant)
    with pytest.raises(ValueError, match=r"tenant: "):
        MemoryConfig()


@pytest.mark.parametrize(
    ("tenant", "user_id", "assistant_id", "field"),
    [
        ("..", "alice", "helper", "tenant"),
        ("t", "../x", "helper", "user_id"),
        ("t", "a", "a/b", "assistant_id"),
    ],
)
def test_space_dir_checks_every_component_even_of_an_unvalidated_config(
    tmp_path: Path, tenant: str, user_id: str, assistant_id: str, field: str
) -> None:
    config = MemoryConfig.model_construct(data_dir=tmp_path, tenant=tenant)  # skips validation
    with pytest.raises(ValueError, match=rf"^{field}: "):
        config.space_dir(user_id, assistant_id)


@pytest.mark.parametrize(
    "field",
    [
        "short_term_capacity",
        "mid_term_capacity",
        "long_term_knowledge_capacity",
        "retrieval_queue_capacity",
        "knowledge_top_k",
        "max_text_chars",
        "embedding_batch_size",
        "embedding_cpu_run_size",
        "torch_threads",
        "mid_term_heat_threshold",
    ],
)
@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_is_not_taken_for_a_number(field: str, flag: bool) -> None:
    with pytest.raises(ValueError, match=rf"{field}: must be a number, not a bool"):
        MemoryConfig(**{field: flag})


@pytest.mark.parametrize("value", [0, -8])
def test_a_cpu_run_size_below_one_is_refused_naming_the_field(value: int) -> None:
    with pytest.raises(ValueError, match="embedding_cpu_run_size"):
        MemoryConfig(embedding_cpu_run_size=value)


def test_numbers_from_the_environment_are_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYOS_SHORT_TERM_CAPACITY", "3")
    monkeypatch.setenv("MEMORYOS_MID_TERM_HEAT_THRESHOLD", "2.5")
    config = MemoryConfig()
    assert (config.short_term_capacity, config.mid_term_heat_threshold) == (3, 2.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"local_files_only": False}, "set by MemoryOS itself"),
        ({"model_name_or_path": "other"}, "set by MemoryOS itself"),
        ({"device": 0}, "device must be a string"),
    ],
)
def test_embedding_model_kwargs_cannot_override_what_the_engine_sets(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=rf"embedding_model_kwargs: .*{message}"):
        MemoryConfig(embedding_model_kwargs=kwargs)
