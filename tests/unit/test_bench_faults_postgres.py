"""The fault loop's counting on the PostgreSQL store (`bench/serving/faults.py`): the database's page rows
turned into each space's texts in page id order and counted per text, and the order check on the
client's counters."""

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from bench.serving.faults import (
    Client,
    Stores,
    count,
    pages_by_space,
    reordered,
    spread,
    texts_of,
)
from tests.support.postgres_server import PostgresServer


def client_with(acknowledged: list[str]) -> Client:
    client = Client(lambda i, text: None, ())
    client.acknowledged = list(acknowledged)
    return client


class FixedStores(Stores):
    def __init__(self, pages: dict[str, list[str]]) -> None:
        super().__init__(Path("/nonexistent"))
        self.fixed = pages

    def pages(self) -> dict[str, list[str]]:
        return self.fixed


def test_rows_in_any_order_become_each_spaces_texts_in_page_id_order() -> None:
    rows = [
        ("default", "user1", "helper", 2, "write 5"),
        ("default", "user0", "helper", 10, "write 4"),
        ("default", "user1", "helper", 1, "write 1"),
        ("default", "user0", "helper", 9, "write 0"),
    ]
    assert pages_by_space(rows) == {
        "default/user0/helper": ["write 0", "write 4"],
        "default/user1/helper": ["write 1", "write 5"],
    }
    assert pages_by_space([]) == {}


def test_texts_are_counted_per_text_over_every_space_so_duplicates_show() -> None:
    rows = [
        ("default", "user0", "helper", 1, "write 0"),
        ("default", "user0", "helper", 2, "write 4"),
        ("default", "user0", "helper", 3, "write 4"),
        ("other", "user0", "helper", 1, "write 0"),
    ]
    assert texts_of(pages_by_space(rows)) == Counter({"write 0": 2, "write 4": 2})


def test_pages_that_follow_each_spaces_counter_are_in_order() -> None:
    pages = {"a": ["write 0", "write 4", "write 8"], "b": ["write 1", "write 5"], "c": []}
    assert reordered(pages) == []


def test_a_page_stored_after_a_later_write_of_its_space_is_reordered() -> None:
    pages = {"a": ["write 0", "write 8", "write 4", "write 12"], "b": ["write 5", "write 1", "write 9"]}
    assert sorted(reordered(pages)) == ["write 1", "write 4"]


def test_every_page_behind_a_write_that_jumped_ahead_counts() -> None:
    assert reordered({"a": ["write 12", "write 0", "write 4", "write 8", "write 16"]}) == [
        "write 0",
        "write 4",
        "write 8",
    ]


def test_a_page_applied_twice_is_not_also_reordered_and_texts_without_a_counter_are_skipped() -> None:
    pages = {"a": ["write 0", "write 4", "write 0", "a note", "write 8"]}
    assert reordered(pages) == []


def test_the_report_counts_lost_doubled_reordered_and_unacknowledged_writes() -> None:
    client = client_with(["write 0", "write 1", "write 2", "write 3", "write 4"])
    stores = FixedStores(
        {
            "default/user0/helper": ["write 4", "write 0"],  # write 0 after write 4: reordered
            "default/user1/helper": ["write 1", "write 1"],  # applied twice
            "default/user2/helper": [],  # write 2 lost
            "default/user3/helper": ["write 3", "write 7"],  # write 7 never acknowledged
        }
    )
    report = count(client, stores, rounds=3, restarts=1, before_last=4)
    assert (report.acknowledged, report.lost, report.applied_twice, report.reordered) == (5, 1, 1, 1)
    assert report.unacknowledged_applied == 1
    assert report.examples == {"lost": ["write 2"], "applied_twice": ["write 1"], "reordered": ["write 0"]}
    assert (report.rounds, report.redis_restarts, report.applied_before_last_worker) == (3, 1, 4)


def test_a_clean_run_reports_nothing_wrong() -> None:
    client = client_with([f"write {i}" for i in range(8)])
    stores = FixedStores(
        {f"default/user{s}/helper": [f"write {i}" for i in range(s, 8, 4)] for s in range(4)}
    )
    report = count(client, stores, rounds=1, restarts=0, before_last=8)
    assert (report.lost, report.applied_twice, report.reordered, report.unacknowledged_applied) == (
        0,
        0,
        0,
        0,
    )
    assert report.examples == {}


def test_each_worker_has_a_data_directory_of_its_own_only_with_a_database(tmp_path: Path) -> None:
    shared = Stores(tmp_path)
    assert shared.data_dir("w-1") == shared.data_dir("w-2") == tmp_path and shared.kind == "sqlite"
    database = cast(PostgresServer, SimpleNamespace(url="postgresql://postgres@127.0.0.1:1/memoryos"))
    own = Stores(tmp_path, database)
    assert own.data_dir("w-1") == tmp_path / "w-1" != own.data_dir("w-2") and own.kind == "postgres"


def test_restarts_are_spread_over_the_rounds_and_apart_from_each_other() -> None:
    assert spread(20, 2) == {6, 13}
    assert spread(20, 2, offset=0.5) == {3, 10}
    assert spread(20, 0) == set()
    assert len(spread(3, 1, offset=0.5) | spread(3, 1)) == 2
