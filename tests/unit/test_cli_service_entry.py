"""Service commands reach their deployable through the package's entry points, import it only when they
run, and say which extra is missing when it is."""

from importlib.metadata import entry_points

import pytest

from memoryos.cli.service_entry import GROUP, service_entry
from memoryos.errors import MemoryOSError, MissingExtraError

DEPLOYABLES = ("serve", "worker", "mcp", "remote", "export-job", "import-job", "reindex-job")


@pytest.mark.parametrize("name", DEPLOYABLES)
def test_every_command_s_deployable_is_an_installed_entry_point(name: str) -> None:
    assert callable(service_entry(name))


def test_the_entry_points_are_the_commands_deployables_and_no_more() -> None:
    assert sorted(point.name for point in entry_points(group=GROUP)) == sorted(DEPLOYABLES)


def test_an_unknown_deployable_is_refused_with_a_line_that_says_how_to_install() -> None:
    with pytest.raises(
        MemoryOSError, match=r"no memoryos\.services entry point 'no-such'.*pip install -e \."
    ):
        service_entry("no-such")


def test_a_missing_service_package_names_the_extra_and_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployable whose module cannot import (the `service` extra not installed) names the extra."""
    import sys

    monkeypatch.setitem(sys.modules, "services.serve", None)  # import of it raises ModuleNotFoundError
    with pytest.raises(MissingExtraError, match=r"pip install -e '[^']*\[service\].*services\.serve"):
        service_entry("serve")
