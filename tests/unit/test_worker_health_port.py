"""The worker's /healthz port must stay apart from its processes' metrics ports (port + i): a clash is
refused when the settings are read, naming the field, not found when a child cannot bind."""

import pytest
from pydantic import ValidationError

from services.queue.settings import QueueSettings


@pytest.mark.parametrize("health_port", [9400, 9403])
def test_a_health_port_among_the_metrics_ports_is_refused(health_port: int) -> None:
    with pytest.raises(ValidationError, match=f"worker_health_port: {health_port} is a metrics port"):
        QueueSettings(worker_metrics_port=9400, worker_processes=4, worker_health_port=health_port)


@pytest.mark.parametrize(("metrics_port", "health_port"), [(9400, 9399), (9400, 9404), (0, 9400), (9400, 0)])
def test_a_health_port_apart_or_either_port_off_is_accepted(metrics_port: int, health_port: int) -> None:
    settings = QueueSettings(
        worker_metrics_port=metrics_port, worker_processes=4, worker_health_port=health_port
    )
    assert settings.worker_health_port == health_port
