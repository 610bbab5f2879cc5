"""The LoCoMo conversations the benchmark tests need, or why they skip; and the guard that keeps the `locomo`
marker complete.

LoCoMo (CC BY-NC 4.0) is not in this repository: `memoryos.eval.locomo.find_locomo_raw` looks at
`$MEMORYOS_LOCOMO` alone when it is set (a raw file or a folder holding one; anything else means no data),
else the workplace's `../shared/data/locomo` and `data/locomo10.json` (which `LOCOMO_FETCH`, one curl line,
downloads). Without any, those tests skip and `pytest -rs` prints the line.
`tests/data/own_conversation.json`, a conversation of our own, runs the same pipeline everywhere.

Every test that reads LoCoMo carries `@pytest.mark.locomo`, so CI can run exactly those once more as a
fresh clone sees them (`MEMORYOS_LOCOMO=<an empty folder> pytest -m locomo`, docs/ci.md). A marker nobody
checks drifts: this module is also a pytest plugin (tests/conftest.py loads it) that fails any test that
opens a LoCoMo file in the test process without the marker. It can only see reads where the data is
present (a developer's checkout, the workplace); a clone without data has nothing to read.
"""

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memoryos.eval.locomo import LOCOMO_FETCH, find_locomo_raw

MARKER = "locomo"
"""The marker of a test that reads LoCoMo data (pyproject.toml registers it)."""


def locomo_source() -> Path | None:
    """The raw LoCoMo file found, else None."""
    return find_locomo_raw()


SKIP_REASON = (
    "needs LoCoMo's conversations: set MEMORYOS_LOCOMO to its raw JSON file, or fetch it into "
    f"data/locomo10.json with: {LOCOMO_FETCH}"
)


def guarded_locations() -> tuple[str, ...]:
    """Every place LoCoMo data may be read from that holds something, whatever `$MEMORYOS_LOCOMO` says now:
    its target, the workplace's folder beside the checkout (raw file and `pairs/`), `data/locomo10.json`.
    A test can name any of them by path without the lookup, so all are watched."""
    places = [
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo",
        Path("data") / "locomo10.json",
    ]
    configured = os.environ.get("MEMORYOS_LOCOMO")
    if configured:
        places.append(Path(configured))
    return tuple(os.path.realpath(place) for place in places if place.exists())


class UnmarkedReadGuard:
    """Records the LoCoMo files an unmarked test opens (an audit hook sees every `open`, the engine's and
    bench code's included); the test then fails naming the marker to add."""

    def __init__(self, locations: tuple[str, ...]) -> None:
        self.locations = locations
        self.watching = False
        self.opened: list[str] = []

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        if not self.watching or event != "open" or not args:
            return
        target = args[0]
        if not isinstance(target, str | bytes | os.PathLike):
            return  # a file descriptor
        path = os.path.realpath(os.fsdecode(target))
        if any(path == place or path.startswith(place + os.sep) for place in self.locations):
            self.opened.append(path)

    @contextmanager
    def phase(self, item: pytest.Item) -> Iterator[None]:
        """One phase (setup, call, teardown) of `item`, watched unless the item is marked."""
        self.watching = item.get_closest_marker(MARKER) is None
        self.opened.clear()
        try:
            yield
        finally:
            self.watching = False
        if self.opened:
            pytest.fail(
                f"{item.nodeid} reads LoCoMo data ({self.opened[0]}) but is not marked "
                f"@pytest.mark.{MARKER}: mark it, and make it skip (SKIP_REASON) when locomo_source() is None",
                pytrace=False,
            )


_guard = UnmarkedReadGuard(())
_hooked: list[bool] = []
"""Whether this process added the audit hook: one cannot be removed, so it is added once and idles
outside a test."""


def pytest_configure(config: pytest.Config) -> None:
    _guard.locations = guarded_locations()
    if _guard.locations and not _hooked:
        sys.addaudithook(_guard.audit)
        _hooked.append(True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guard.phase(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guard.phase(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _guard.phase(item):
        return (yield)
