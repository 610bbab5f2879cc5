"""The supervisor of `memoryos worker --processes N` with real spawned children (tests/support/
supervised_children.py): a child failing N times within the window stops every child and fails the run;
fewer failures, or failures after a stable stretch, are restarted; /healthz answers 503 while a child
is down or its metrics port is silent, and 200 again once it is back; /metrics on the same port holds every
answering worker child's samples, labelled with its index, each family once."""

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from services.worker.health import metrics_answer, serving_health
from services.worker.processes import ChildKeepsFailingError, ChildSpec, Supervision, Supervisor
from tests.support.redis_server import free_port
from tests.support.supervised_children import exit_after, fail_first, serve_metrics

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
"""Bound on any one wait here: a supervisor that never gives up fails the test instead of hanging it."""
FAST = Supervision(max_failures=3, failure_window_s=60.0, restart_first_s=0.05, check_every_s=0.05)


def wait_for(condition: object, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def starts(directory: Path) -> list[int]:
    """The pids of a child slot's starts, in order."""
    entries = sorted(directory.iterdir(), key=lambda entry: int(entry.name.split("-")[0]))
    return [int(entry.name.split("-")[1]) for entry in entries]


def slot(tmp_path: Path, name: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    return directory


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def running(supervisor: Supervisor) -> Iterator[threading.Event]:
    """`supervisor.run` in a thread; stopped (and waited for) on leaving."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            supervisor.run(stop)
        except BaseException as error:  # handed to the test below
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive()
    assert not errors, errors


def get(port: int, path: str) -> tuple[int, str, str]:
    """Status, content type and body of `GET path` on `port`."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def health(port: int) -> tuple[int, str]:
    status, _, body = get(port, "/healthz")
    return status, body


def test_a_child_failing_n_times_in_the_window_stops_every_child_and_fails(tmp_path: Path) -> None:
    steady_port = free_port()
    steady, failing = slot(tmp_path, "steady"), slot(tmp_path, "failing")
    supervisor = Supervisor(
        [
            ChildSpec("steady", serve_metrics, (steady, steady_port), steady_port),
            ChildSpec("failing", fail_first, (failing, 1_000, 0)),
        ],
        supervision=FAST,
    )
    stop = threading.Event()
    never_needed = threading.Timer(TIMEOUT_S, stop.set)
    never_needed.start()
    try:
        with pytest.raises(ChildKeepsFailingError) as raised:
            supervisor.run(stop)
    finally:
        never_needed.cancel()
    assert not stop.is_set(), "the supervisor gave up only when the test stopped it"
    assert (
        str(raised.value) == "failing exited 3 times within 60 s (exit codes 1, 1, 1); every process stopped"
    )
    assert len(starts(failing)) == 3
    (steady_pid,) = starts(steady)
    assert not alive(steady_pid)  # terminated and reaped, not left running
    assert not metrics_answer(steady_port)


def test_fewer_failures_than_the_bound_are_restarted(tmp_path: Path) -> None:
    port = free_port()
    flaky = slot(tmp_path, "flaky")
    supervisor = Supervisor([ChildSpec("flaky", fail_first, (flaky, 2, port), port)], supervision=FAST)
    with running(supervisor):
        wait_for(lambda: metrics_answer(port))  # its third start works
        time.sleep(0.5)  # several checks of the supervisor's: it keeps the child
        assert len(starts(flaky)) == 3
        assert metrics_answer(port)


def test_a_child_that_ran_a_stable_stretch_counts_from_one_again(tmp_path: Path) -> None:
    crashing = slot(tmp_path, "crashing")
    supervision = Supervision(
        max_failures=2, failure_window_s=60.0, restart_first_s=0.05, stable_after_s=0.3, check_every_s=0.05
    )
    supervisor = Supervisor([ChildSpec("crashing", exit_after, (crashing, 0.4))], supervision=supervision)
    with running(supervisor):
        wait_for(lambda: len(starts(crashing)) >= 4)  # 3 exits, each after a stable run: no give-up


def test_healthz_is_503_while_a_child_is_down_and_200_once_it_is_back(tmp_path: Path) -> None:
    health_port, worker_port = free_port(), free_port()
    worker, engine = slot(tmp_path, "worker"), slot(tmp_path, "engine")
    supervisor = Supervisor(
        [ChildSpec("worker-0", serve_metrics, (worker, worker_port), worker_port)],
        ChildSpec("engine", exit_after, (engine, TIMEOUT_S)),
        Supervision(restart_first_s=1.0),  # the window in which the test sees the child down
    )
    with serving_health(health_port, supervisor.unhealthy), running(supervisor):
        wait_for(lambda: health(health_port)[0] == 200)
        assert health(health_port) == (200, "ok\n")
        assert get(health_port, "/metrics")[0] == 404  # served only where metrics are given

        os.kill(starts(worker)[0], signal.SIGKILL)
        wait_for(lambda: health(health_port)[0] == 503)
        assert "worker-0: " in health(health_port)[1]  # dead: its port silent, then the slot empty
        wait_for(lambda: health(health_port)[0] == 200)  # started again, serving
        assert len(starts(worker)) == 2

        os.kill(starts(engine)[0], signal.SIGKILL)
        wait_for(lambda: health(health_port) == (503, "engine: not running\n"))
        wait_for(lambda: health(health_port)[0] == 200)  # a process in its slot again
        wait_for(lambda: len(starts(engine)) == 2)


def test_a_running_worker_child_whose_metrics_port_is_silent_is_unhealthy(tmp_path: Path) -> None:
    silent_port = free_port()
    stuck = slot(tmp_path, "stuck")
    supervisor = Supervisor([ChildSpec("worker-0", exit_after, (stuck, TIMEOUT_S), silent_port)])
    with running(supervisor):
        wait_for(lambda: len(starts(stuck)) == 1)
        assert supervisor.unhealthy() == [f"worker-0: /metrics on port {silent_port} does not answer"]


def test_the_health_port_serves_every_answering_worker_childs_metrics_as_one(tmp_path: Path) -> None:
    health_port, port_0, port_1, silent_port = (free_port() for _ in range(4))
    supervisor = Supervisor(
        [
            ChildSpec("worker-0", serve_metrics, (slot(tmp_path, "0"), port_0), port_0),
            ChildSpec("worker-1", serve_metrics, (slot(tmp_path, "1"), port_1), port_1),
            ChildSpec("worker-2", exit_after, (slot(tmp_path, "2"), TIMEOUT_S), silent_port),
        ],
        ChildSpec("engine", exit_after, (slot(tmp_path, "engine"), TIMEOUT_S)),  # serves no metrics
    )
    with serving_health(health_port, supervisor.unhealthy, supervisor.metrics), running(supervisor):
        wait_for(lambda: metrics_answer(port_0) and metrics_answer(port_1))
        status, content_type, text = get(health_port, "/metrics")

    assert (status, content_type) == (200, CONTENT_TYPE_LATEST)
    families = list(text_string_to_metric_families(text))
    names = [family.name for family in families]
    assert len(names) == len(set(names)), names
    assert {family.name: family.type for family in families} == {
        "child_port": "gauge",
        "child_requests": "counter",
        "child_requests_created": "gauge",
        "child_seconds": "histogram",
        "child_seconds_created": "gauge",
        "child_info": "gauge",
    }
    by_name = {family.name: family for family in families}
    for family in families:  # worker-2 silent: left out, not a failed scrape
        assert {sample.labels["worker_process"] for sample in family.samples} == {"0", "1"}, family
    assert {s.labels["worker_process"]: s.value for s in by_name["child_port"].samples} == {
        "0": port_0,
        "1": port_1,
    }
    assert sorted(
        (s.name, s.labels.get("le", ""), s.labels["worker_process"], s.value)
        for s in by_name["child_seconds"].samples
    ) == sorted(
        (name, le, index, value)
        for index in ("0", "1")
        for name, le, value in [
            ("child_seconds_bucket", "1.0", 1.0),
            ("child_seconds_bucket", "+Inf", 1.0),
            ("child_seconds_count", "", 1.0),
            ("child_seconds_sum", "", 0.5),
        ]
    )
