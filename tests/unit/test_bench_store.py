"""The pure pieces of `bench.storage.postgres`: the interleaved order, medians per store, the ratio and
the verdict against a target, recall equality and the printed summary. No timing is asserted."""

from pathlib import Path

import pytest

from bench.storage.postgres import (
    APPLY_TARGET,
    RETRIEVE_TARGET,
    interleaved,
    medians,
    percentiles,
    ratio,
    recall_equal,
    snapshot_files,
    summary_lines,
    verdict,
)


def test_runs_alternate_the_stores() -> None:
    assert interleaved(3) == [
        (0, "sqlite"),
        (0, "postgres"),
        (1, "sqlite"),
        (1, "postgres"),
        (2, "sqlite"),
        (2, "postgres"),
    ]
    assert interleaved(0) == []


def test_the_median_is_taken_per_store() -> None:
    rows = [
        {"store": "sqlite", "turns_per_s": 100.0},
        {"store": "postgres", "turns_per_s": 10.0},
        {"store": "sqlite", "turns_per_s": 300.0},
        {"store": "postgres", "turns_per_s": 90.0},
        {"store": "sqlite", "turns_per_s": 200.0},
        {"store": "postgres", "turns_per_s": 50.0},
    ]
    assert medians(rows, "turns_per_s") == {"sqlite": 200.0, "postgres": 50.0}
    assert medians(rows, "absent") == {}
    assert medians(rows[:1], "turns_per_s") == {"sqlite": 100.0}


def test_percentiles_take_the_median_and_the_95th_ranked_sample() -> None:
    figures = percentiles([float(i) for i in range(1, 101)])
    assert figures == {"p50_ms": 50.5, "p95_ms": 96.0}
    assert percentiles([3.0]) == {"p50_ms": 3.0, "p95_ms": 3.0}


@pytest.mark.parametrize(
    ("value", "target", "higher", "expected"),
    [
        (0.6, APPLY_TARGET, True, "met"),
        (0.59, APPLY_TARGET, True, "missed"),
        (1.3, RETRIEVE_TARGET, False, "met"),
        (1.31, RETRIEVE_TARGET, False, "missed"),
        (None, RETRIEVE_TARGET, False, "unmeasured"),
    ],
)
def test_the_verdict_compares_with_the_target_in_its_direction(
    value: float | None, target: float, higher: bool, expected: str
) -> None:
    assert verdict(value, target, higher_is_better=higher) == expected


def test_the_ratio_is_postgres_over_sqlite() -> None:
    assert ratio(60.0, 100.0) == 0.6
    assert ratio(1.0, 3.0) == 0.333
    assert ratio(5.0, 0.0) is None


def test_recall_is_equal_only_with_the_same_ks_and_values() -> None:
    assert recall_equal({1: 0.5, 7: 0.75}, {1: 0.5, 7: 0.75})
    assert not recall_equal({1: 0.5, 7: 0.75}, {1: 0.5, 7: 0.76})
    assert not recall_equal({1: 0.5}, {1: 0.5, 7: 0.75})


def test_the_snapshot_files_leave_out_the_sqlite_store(tmp_path: Path) -> None:
    for name in ("memory.sqlite", "memory.sqlite-wal", "memory.sqlite-shm", "space.lock", "pages.faiss"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    assert [path.name for path in snapshot_files(tmp_path)] == ["pages.faiss"]


def test_the_summary_names_each_figure_its_target_and_verdict() -> None:
    both = {"sqlite": {"start_to_answer_s": 0.4, "open_to_answer_s": 0.1},
            "postgres": {"start_to_answer_s": 0.6, "open_to_answer_s": 0.3}}  # fmt: skip
    report = {
        "durability": {
            "postgres": {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"},
            "sqlite": {"journal_mode": "WAL", "synchronous": "FULL"},
        },
        "apply": {
            "runs": 3,
            "median_turns_per_s": {"sqlite": 1000.0, "postgres": 700.0},
            "ratio": 0.7,
            "verdict": "met",
            "median_statements_per_turn": 9.5,
            "median_exec_ms_per_turn": 0.91,
            "median_plan_ms_per_turn": 0.08,
        },
        "retrieve": {
            "pages": 400,
            "queries": 200,
            "sqlite": {"p50_ms": 3.0, "p95_ms": 6.0},
            "postgres": {"p50_ms": 6.0, "p95_ms": 9.0},
            "p50_ratio": 2.0,
            "verdict": "missed",
            "round_trips": {
                "mean_per_retrieve": 21.5,
                "min": 19,
                "max": 27,
                "ms_in_statements_per_retrieve": 4.0,
                "ms_per_retrieve_while_counting": 7.0,
            },
        },
        "cold_open": {
            "pages": 10000,
            "dim": 1024,
            "runs": 3,
            "medians": {"snapshot": both, "no_snapshot": both},
            "verdicts": {"snapshot": "missed", "no_snapshot": "met"},
        },
        "recall": {
            "conversations": [
                {"sample_id": "conv-30", "sqlite": {7: 0.5}, "postgres": {7: 0.5}, "equal": True}
            ]
        },
    }
    lines = summary_lines(report)
    assert lines[0] == (
        "durability: postgres fsync=on, synchronous_commit=on, full_page_writes=on; "
        "sqlite journal_mode=WAL, synchronous=FULL"
    )
    assert "postgres/sqlite 0.7 (target >= 0.6: met)" in lines[1]
    assert lines[2] == (
        "apply on postgres: 9.5 statements and 0.91 ms of the server executing them and 0.08 ms planning "
        "them per turn (median)"
    )
    assert "p50 postgres/sqlite 2.0 (target <= 1.3: missed)" in lines[3]
    assert lines[4].startswith("retrieve round trips on postgres: 21.5 per retrieve (min 19, max 27)")
    assert "cold open snapshot" in lines[5] and "(target postgres <= 0.5 s: missed)" in lines[5]
    assert "cold open no snapshot" in lines[6] and "(target postgres <= 3.0 s: met)" in lines[6]
    assert lines[7] == "recall conv-30: sqlite {7: 0.5}, postgres {7: 0.5} (equal: True)"
    assert summary_lines({}) == []
