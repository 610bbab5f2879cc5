"""Service commands import their code only when they run, and say which extra is missing when it is."""

import pytest

from memoryos.cli.service_entry import service_entry
from memoryos.errors import MissingExtraError


def test_a_missing_service_package_names_the_extra_and_the_module() -> None:
    with pytest.raises(MissingExtraError, match=r"memoryos\[service\].*no_such_service_module"):
        service_entry("no_such_service_module", "run")


def test_an_installed_entry_is_returned() -> None:
    assert service_entry("services.worker.process", "run_worker_process").__name__ == "run_worker_process"
