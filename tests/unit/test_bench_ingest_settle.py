"""The ingest bench counts the consolidation that trails the searchable pages: it waits for the workers to
go idle, and reads from the stores how many pages short-term memory still holds beyond its capacity. With
one store thread, a run's turns were all searchable 13 s before consolidation had caught up, and the
figure without the wait overstated what the worker sustains by 40%."""

from pathlib import Path

import pytest

from bench.serving import ingest
from tests.unit.test_consolidation_commits import UNRELATED_TURNS
from tests.unit.test_facade import make


def test_the_short_term_backlog_is_read_from_every_store_under_the_data_directory(tmp_path: Path) -> None:
    for user in ("ann", "bob"):
        with make(tmp_path / "data", user_id=user, short_term_capacity=3) as memory:
            memory.add_memories(UNRELATED_TURNS)
            memory.flush()
    assert ingest.short_term_backlog(tmp_path / "data", 3) == 0  # consolidation kept each at three
    assert ingest.short_term_backlog(tmp_path / "data", 1) == 2 * 2


def test_the_capacity_is_the_workers_setting_else_the_engines_default() -> None:
    assert ingest.short_term_capacity({"MEMORYOS_SHORT_TERM_CAPACITY": "4"}) == 4
    assert ingest.short_term_capacity({}) == 10


class BusyThenIdle:
    """Workers whose CPU seconds rise by a second per look for `busy_looks` looks, then stop."""

    def __init__(self, busy_looks: int) -> None:
        self.looks, self.busy_looks = 0, busy_looks

    def cpu_seconds(self) -> float:
        self.looks += 1
        return float(min(self.looks, self.busy_looks))


def test_settling_waits_while_the_workers_use_cpu_and_returns_their_cpu_once_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ingest, "SETTLE_WINDOW_S", 0.01)
    workers = BusyThenIdle(busy_looks=5)
    _, cpu = ingest.settle(workers.cpu_seconds)
    assert workers.looks == 6 and cpu == 5.0  # five busy windows, then one idle


def test_several_workers_settle_when_each_is_about_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixteen idle workers renewing leases use more than one idle worker: the bound is per process."""
    monkeypatch.setattr(ingest, "SETTLE_WINDOW_S", 0.01)
    looks = iter(float(n) * 0.01 * 0.5 for n in range(1000))  # half a core in all, every window
    _, cpu = ingest.settle(lambda: next(looks), processes=16)
    assert cpu == 0.01 * 0.5  # idle at the first window: under 16 x 5% of a core
