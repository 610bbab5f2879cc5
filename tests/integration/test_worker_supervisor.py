"""The supervisor of `memoryos worker --processes N` with real spawned children (tests/support/
supervised_children.py): a child failing N times within the window stops every child and fails the run,
however long each of its runs lasted; fewer failures are restarted; /readyz (and /healthz) answers 503
while a child is down or its metrics port is silent and 200 again once it is back, with a line per child
(running, restarts, last exit); /livez answers 200 while the supervising loop goes round, whatever the
children do, and 503 while the loop is held; /metrics on the same port holds every answering worker
child's samples, labelled with its index, each family once."""

import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.health import EngineWatch
from services.worker.health import Verdict, metrics_answer, serving, serving_health
from services.worker.processes import ChildKeepsFailingError, ChildSpec, Supervision, Supervisor
from tests.support.fakes import FAKE_DIM
from tests.support.redis_server import free_port
from tests.support.supervised_children import (
    HeldStartsDir,
    engine_wedged_first,
    exit_after,
    fail_first,
    serve_metrics,
)

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
"""Bound on any one wait here: a supervisor that never gives up fails the test instead of hanging it."""
Answer = TypeVar("Answer")
FAST = Supervision(max_failures=3, failure_window_s=60.0, restart_first_s=0.05, check_every_s=0.05)


def wait_for(condition: object, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def answer_when(ask: Callable[[], Answer], condition: Callable[[Answer], bool]) -> Answer:
    """The first answer of `ask()` that meets `condition`, waited for: the one that saw the state, not a
    later one (a child down is restarted within a second)."""
    answers: list[Answer] = []

    def met() -> bool:
        answers.append(ask())
        return condition(answers[-1])

    wait_for(met)
    return answers[-1]


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


def gave_up(supervisor: Supervisor) -> ChildKeepsFailingError:
    """The error the supervisor gave up with, on its own: a timer stops it (and fails the test) after
    `TIMEOUT_S` otherwise."""
    stop = threading.Event()
    never_needed = threading.Timer(TIMEOUT_S, stop.set)
    never_needed.start()
    try:
        with pytest.raises(ChildKeepsFailingError) as raised:
            supervisor.run(stop)
    finally:
        never_needed.cancel()
    assert not stop.is_set(), "the supervisor gave up only when the test stopped it"
    return raised.value


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
    assert (
        str(gave_up(supervisor))
        == "failing exited 3 times within 60 s (exit codes 1, 1, 1); every process stopped"
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
        time.sleep(0.25)  # five checks of the supervisor's: it keeps the child
        assert len(starts(flaky)) == 3
        assert metrics_answer(port)


def test_exits_after_long_runs_still_count_and_fail_the_supervisor(tmp_path: Path) -> None:
    """The issue's child: out of memory on one user's space, it dies every 61 s, each run past the 60 s
    that used to make an exit a first failure again; restarted forever, the pod never failed. Here the
    runs last 0.4 s against a `stable_after_s` of 0.2 s: every exit still counts, and the third in the
    window fails the supervisor."""
    crashing = slot(tmp_path, "crashing")
    supervision = Supervision(
        max_failures=3, failure_window_s=60.0, restart_first_s=0.05, stable_after_s=0.2, check_every_s=0.05
    )
    supervisor = Supervisor([ChildSpec("crashing", exit_after, (crashing, 0.4))], supervision=supervision)
    assert (
        str(gave_up(supervisor))
        == "crashing exited 3 times within 60 s (exit codes 1, 1, 1); every process stopped"
    )
    assert len(starts(crashing)) == 3


def test_a_long_run_resets_the_restart_delay_not_the_count(tmp_path: Path) -> None:
    """Each run lasts 0.4 s, past a `stable_after_s` of 0.2 s: the second exit waits the first delay again
    (1 s, where two quick exits in a row would wait 2); the count is the window's, as tested above."""
    crashing = slot(tmp_path, "crashing")
    supervision = Supervision(
        max_failures=10, failure_window_s=60.0, restart_first_s=1.0, stable_after_s=0.2, check_every_s=0.05
    )
    supervisor = Supervisor([ChildSpec("crashing", exit_after, (crashing, 0.4))], supervision=supervision)
    with running(supervisor):
        wait_for(lambda: len(starts(crashing)) == 2)
        verdict = answer_when(
            supervisor.readiness, lambda answer: "; 1 restart, " in answer.lines[0] and not answer.ok
        )
        line = verdict.lines[0]
        found = re.fullmatch(
            r"crashing: not running, restarted in (\d+\.\d) s; 1 restart, last exit 1 after \d+ s, \d+ s ago",
            line,
        )
        assert found is not None, line
        assert float(found[1]) <= 1.0  # the remaining delay only shrinks: a doubled one reads above 1 s


def test_exits_spread_wider_than_the_window_are_restarted(tmp_path: Path) -> None:
    """The window, not the runs' length, forgives: each run outlasts a 0.3 s window, so no two exits fall
    in it, and a bound of 2 never gives up (counted over all time, the second exit would end it)."""
    crashing = slot(tmp_path, "crashing")
    supervision = Supervision(
        max_failures=2, failure_window_s=0.3, restart_first_s=0.05, stable_after_s=60.0, check_every_s=0.05
    )
    supervisor = Supervisor([ChildSpec("crashing", exit_after, (crashing, 0.4))], supervision=supervision)
    with running(supervisor):
        wait_for(lambda: len(starts(crashing)) >= 3)  # 2 exits, not within the window of each other


def test_readiness_is_503_while_a_child_is_down_and_200_once_it_is_back(tmp_path: Path) -> None:
    health_port, worker_port = free_port(), free_port()
    worker, engine = slot(tmp_path, "worker"), slot(tmp_path, "engine")
    supervisor = Supervisor(
        [ChildSpec("worker-0", serve_metrics, (worker, worker_port), worker_port)],
        ChildSpec("engine", exit_after, (engine, TIMEOUT_S)),
        # the window in which the test sees the child down; an exit noticed within 0.05 s, not 0.5
        Supervision(restart_first_s=1.0, check_every_s=0.05),
    )
    with serving_health(health_port, supervisor.liveness, supervisor.readiness), running(supervisor):
        wait_for(lambda: get(health_port, "/readyz")[0] == 200)
        wait_for(lambda: len(starts(engine)) == 1)  # running before it records its start
        engine_pid, worker_pid = starts(engine)[0], starts(worker)[0]
        assert get(health_port, "/readyz")[2] == (
            f"engine: running (pid {engine_pid}); 0 restarts\nworker-0: running (pid {worker_pid}); 0 restarts\n"
        )
        assert health(health_port) == (200, get(health_port, "/readyz")[2])  # /healthz: the same answer
        assert get(health_port, "/metrics")[0] == 404  # served only where metrics are given

        os.kill(worker_pid, signal.SIGKILL)
        down = answer_when(lambda: health(health_port), lambda answer: answer[0] == 503)
        worker_down = down[1].splitlines()[1]  # dead: its port silent, then the slot empty
        assert worker_down.startswith(
            (
                f"worker-0: running (pid {worker_pid}), /metrics on port {worker_port} does not answer; ",
                "worker-0: not running",
            )
        ), worker_down
        assert get(health_port, "/livez")[::2] == (200, "supervisor: running\n")  # the loop restarts it
        wait_for(lambda: health(health_port)[0] == 200)  # started again, serving
        assert len(starts(worker)) == 2
        worker_line = health(health_port)[1].splitlines()[1]
        assert re.fullmatch(
            rf"worker-0: running \(pid {starts(worker)[1]}\); 1 restart, last exit SIGKILL after \d+ s, \d+ s ago",
            worker_line,
        ), worker_line

        os.kill(engine_pid, signal.SIGKILL)
        status, body = answer_when(
            lambda: health(health_port), lambda answer: answer[1].startswith("engine: not running")
        )
        assert status == 503
        engine_line = body.splitlines()[0]
        assert re.fullmatch(
            r"engine: not running, restarted in \d+\.\d s; 0 restarts, last exit SIGKILL after \d+ s, \d+ s ago",
            engine_line,
        ), engine_line
        wait_for(lambda: health(health_port)[0] == 200)  # a process in its slot again
        wait_for(lambda: len(starts(engine)) == 2)  # which records its start once spawned


def test_liveness_follows_the_supervising_loop_not_the_children(tmp_path: Path) -> None:
    """A child down leaves /livez at 200 (restarting it is the loop's job); the loop held inside a
    child's start makes /livez 503 until it goes round again."""
    health_port = free_port()
    released = threading.Event()
    released.set()
    held = slot(tmp_path, "held")
    supervisor = Supervisor(
        [ChildSpec("worker-0", exit_after, (HeldStartsDir(held, released), TIMEOUT_S))],
        supervision=Supervision(restart_first_s=0.05, check_every_s=0.05, loop_silent_after_s=0.5),
    )
    with serving_health(health_port, supervisor.liveness, supervisor.readiness), running(supervisor):
        wait_for(lambda: len(starts(held)) == 1)
        assert get(health_port, "/livez")[::2] == (200, "supervisor: running\n")

        released.clear()  # the restart after this kill holds the loop in its start
        os.kill(starts(held)[0], signal.SIGKILL)
        wait_for(lambda: get(health_port, "/livez")[0] == 503)
        assert re.fullmatch(r"supervisor: its loop has not run for \d+ s\n", get(health_port, "/livez")[2])
        assert get(health_port, "/readyz")[0] == 503  # the child is down meanwhile

        released.set()
        wait_for(lambda: get(health_port, "/livez")[::2] == (200, "supervisor: running\n"))
        wait_for(lambda: len(starts(held)) == 2)


def test_a_running_worker_child_whose_metrics_port_is_silent_is_unhealthy(tmp_path: Path) -> None:
    silent_port = free_port()
    stuck = slot(tmp_path, "stuck")
    supervisor = Supervisor([ChildSpec("worker-0", exit_after, (stuck, TIMEOUT_S), silent_port)])
    with running(supervisor):
        wait_for(lambda: len(starts(stuck)) == 1)
        assert supervisor.readiness() == Verdict(
            False,
            [
                f"worker-0: running (pid {starts(stuck)[0]}), /metrics on port {silent_port} does not answer; 0 restarts"
            ],
        )


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
    with (
        serving_health(health_port, supervisor.liveness, supervisor.readiness, supervisor.metrics),
        running(supervisor),
    ):
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


def test_one_process_answers_every_probe_while_it_answers() -> None:
    """`memoryos worker` with one process serves the probes itself once it serves: alive and ready while
    it answers; any other path is a 404 naming those served."""
    port = free_port()
    answering = serving("worker")
    with serving_health(port, answering, answering):
        for path in ("/livez", "/readyz", "/healthz"):
            assert get(port, path)[::2] == (200, "worker: serving\n"), path
        assert get(port, "/metrics")[::2] == (404, "not found: GET /livez, /readyz, /healthz\n")


def test_an_engine_that_stops_answering_is_killed_and_started_again(tmp_path: Path) -> None:
    """An engine that listens and answers nothing (a stopped or wedged process: it never exits) is found
    by the watch, said in readiness, killed and started again by the supervisor; the new one embeds."""
    engine_starts = tmp_path / "engine"
    engine_starts.mkdir()
    socket_path = tmp_path / "engine.sock"
    supervision = Supervision(
        max_failures=3,
        failure_window_s=60.0,
        restart_first_s=0.05,
        check_every_s=0.05,
        engine_check_every_s=0.2,
    )
    supervisor = Supervisor(
        [],
        ChildSpec("memoryos-embedding-engine", engine_wedged_first, (engine_starts, socket_path)),
        supervision,
        EngineWatch(socket_path, stall_after_s=1.0, probe_timeout_s=0.2),
    )
    stop = threading.Event()
    running = threading.Thread(target=supervisor.run, args=(stop,))
    running.start()
    try:
        wait_for(lambda: "embedding unresponsive" in "\n".join(supervisor.readiness().lines))
        wait_for(lambda: len(starts(engine_starts)) == 2)
        first, _ = starts(engine_starts)
        assert not alive(first)
        assert EngineEmbedder(socket_path, timeout_s=TIMEOUT_S).encode(["hello"]).shape == (1, FAKE_DIM)
        wait_for(lambda: supervisor.readiness().ok)
    finally:
        stop.set()
        running.join(TIMEOUT_S)
