"""Workers as separate hosts: nothing of the service may rely on sharing a process, a loopback or a
socket with another part of it (issues 14 and 17).

`redis-server` runs in a hub namespace bound to its bridge address; two real `memoryos worker` processes
run each in a namespace of its own and reach Redis over veth pairs; they share only the data directory,
as a network volume would be shared. The client writes through the queue, and reads through the
owners, from the test process over Redis's unix socket (no address of the root namespace is used).
Mid-run one worker's cable is pulled (its bridge port down, the process left running): its leases
expire, the other worker takes its shards
and the pending entries it left, and once its cable is back the cut-off worker must drop the shards it
lost, rejoin, and drain cleanly on SIGTERM. Every acknowledged write is then stored exactly once, and the
pages of each space are in the order the writes were accepted.
"""

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from bench.serving.faults import worker_env
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys, shard_of
from services.queue.owner_calls import OwnerCallClient
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import WRITE_STATUS
from tests.support import netns
from tests.support.redis_server import redis_command

pytestmark = pytest.mark.integration

NAMESPACE = "hosts"
SHARDS = 4
REDIS_PORT = 6379  # inside the hub's namespace: nothing else listens there
WAIT_S = 60.0
"""Deadline of every wait below: a failure bound on a loaded machine, never a measured figure."""


def spaces_covering(shard_count: int) -> list[SpaceKey]:
    """One space per shard, so whichever shards the cut-off worker held, writes go to them."""
    by_shard: dict[int, SpaceKey] = {}
    i = 0
    while len(by_shard) < shard_count:
        key = SpaceKey("default", f"user{i}", "helper")
        by_shard.setdefault(shard_of(key, shard_count), key)
        i += 1
    return [by_shard[s] for s in range(shard_count)]


SPACES = spaces_covering(SHARDS)


def wait_for(condition: Callable[[], bool], what: str, procs: "Processes | None" = None) -> None:
    """Until `condition`; fails after `WAIT_S`, or at once if one of `procs` exited meanwhile."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        if procs is not None:
            procs.assert_running()
        time.sleep(0.05)


@pytest.fixture
def net() -> Iterator[netns.Network]:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"workers as separate hosts need network namespaces: {reason}")
    with netns.network(["a", "b"]) as network:
        yield network


class Processes:
    """Every process the test starts in a namespace; all stopped (SIGKILL if need be) on exit, before
    the namespaces are deleted."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], **popen: object) -> subprocess.Popen[bytes]:
        process: subprocess.Popen[bytes] = subprocess.Popen(argv, **popen)  # type: ignore[call-overload]
        self.started.append(process)
        return process

    def assert_running(self) -> None:
        exited = [(p.args, p.returncode) for p in self.started if p.poll() is not None]
        assert not exited, f"exited early: {exited}"

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def start_redis(procs: Processes, hub: netns.Host, directory: Path) -> str:
    """Redis on the hub's bridge address (for the workers) and a unix socket (for the test); returns the
    socket's URL once it answers."""
    directory.mkdir(parents=True)
    socket = directory / "redis.sock"
    # No password and not loopback: Redis's protected mode would refuse the workers. The address exists
    # only inside the hub's namespace, reachable from the hosts made for this test and nothing else.
    command = redis_command(directory, REDIS_PORT, hub.address)
    command += ["--unixsocket", str(socket), "--protected-mode", "no"]
    procs.start(hub.command(command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"unix://{socket}?db=0"
    client = redis.Redis.from_url(url)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    wait_for(answers, "redis-server answers", procs)
    return url


def start_worker(
    procs: Processes, host: netns.Host, name: str, data_dir: Path, log: Path
) -> subprocess.Popen[bytes]:
    """A `memoryos worker` inside `host`, reaching Redis at the hub's address; stderr (its warnings) to
    `log`."""
    env = worker_env(f"redis://{netns.HUB_ADDRESS}:{REDIS_PORT}/0", data_dir, NAMESPACE, SHARDS)
    argv = [sys.executable, "-m", "memoryos.cli.main", "worker", "--worker-id", name]
    return procs.start(host.command(argv), env=env, stdout=subprocess.PIPE, stderr=log.open("wb"))


def await_serving(worker: subprocess.Popen[bytes], name: str) -> None:
    assert worker.stdout is not None
    line = worker.stdout.readline()
    assert b"serving shards" in line, f"worker {name} did not start: {line!r}"


class Writer:
    """Writes `write <i>` to space i mod 4 through the queue until stopped; `acknowledged` holds the
    index of each write Redis acknowledged (XADD returned)."""

    def __init__(self, settings: QueueSettings) -> None:
        self.queue = WriteQueue(connect(settings), settings)
        self.acknowledged: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            op = plan_write(
                [{"user_input": f"write {i}", "agent_response": "ok"}],
                max_text_chars=100,
                at=time.time(),
                write_id=f"w{i}",
            )
            self.queue.enqueue(SPACES[i % SHARDS], op)
            self.acknowledged.append(i)
            i += 1
            time.sleep(0.05)  # ~20 writes/s: every page is embedded by MiniLM on the CI's CPU

    def finish(self) -> list[int]:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        return list(self.acknowledged)

    def wait_for_more(self, count: int) -> None:
        target = len(self.acknowledged) + count
        wait_for(lambda: len(self.acknowledged) >= target, f"{count} more writes acknowledged")


def stored_in_order(data_dir: Path) -> dict[str, list[int]]:
    """Per space (its directory), the write numbers of its pages in the order they were stored."""
    spaces: dict[str, list[int]] = {}
    for store in sorted(data_dir.glob("*/*/*/memory.sqlite")):
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT user_input FROM pages ORDER BY page_id").fetchall()
        spaces[str(store.parent.relative_to(data_dir))] = [int(text.split()[1]) for (text,) in rows]
    return spaces


def stored_so_far(data_dir: Path) -> dict[str, list[int]]:
    """`stored_in_order` while workers write: a store being created has no tables yet."""
    try:
        return stored_in_order(data_dir)
    except sqlite3.OperationalError:
        return {}


def owners(client: redis.Redis) -> dict[int, str | None]:
    keys = Keys(NAMESPACE)
    values = [client.get(keys.lease(s)) for s in range(SHARDS)]
    return {s: None if v is None else bytes(v).decode() for s, v in enumerate(values)}


def test_a_worker_cut_off_the_network_loses_its_shards_and_no_write(
    net: netns.Network, tmp_path: Path
) -> None:
    procs = Processes()
    data_dir = tmp_path / "shared-volume"
    try:
        url = start_redis(procs, net.hub, tmp_path / "redis")
        settings = QueueSettings(
            redis_url=url, redis_namespace=NAMESPACE, shard_count=SHARDS, lease_ttl_s=1.0
        )
        client = connect(settings)
        workers = {
            name: start_worker(procs, net.hosts[name], name, data_dir, tmp_path / f"{name}.log")
            for name in ("a", "b")
        }
        for name, worker in workers.items():
            await_serving(worker, name)
        wait_for(lambda: Counter(owners(client).values()) == {"a": 2, "b": 2}, "the shards split 2/2", procs)

        writer = Writer(settings)
        a_shards = {s for s, owner in owners(client).items() if owner == "a"}
        a_spaces = {f"default/{SPACES[s].user_id}/helper" for s in a_shards}
        wait_for(
            lambda: any(stored_so_far(data_dir).get(space) for space in a_spaces),
            "worker a applies writes of its shards",
            procs,
        )

        net.cut("a")
        cut_at = len(writer.acknowledged)
        wait_for(lambda: set(owners(client).values()) == {"b"}, "worker b owns every shard", procs)
        assert workers["a"].poll() is None  # cut off, not dead
        # Writes accepted after the cut, to a's former shards, are applied by b meanwhile.
        wait_for(
            lambda: any(
                n >= cut_at and n % SHARDS in a_shards
                for numbers in stored_so_far(data_dir).values()
                for n in numbers
            ),
            "worker b applies writes to the shards it took",
            procs,
        )

        net.restore("a")
        wait_for(lambda: "a" in owners(client).values(), "worker a rejoins and gets shards back", procs)
        writer.wait_for_more(20)
        acknowledged = writer.finish()
        queue = WriteQueue(client, settings)
        wait_for(lambda: queue.depth() == 0, "every queued write applied", procs)
        reads = OwnerCallClient(client, settings)
        for shard, space in enumerate(SPACES):  # each space's owner, on whichever host, answers
            last = max(n for n in acknowledged if n % SHARDS == shard)
            assert reads.ask(space, WRITE_STATUS, {"write_id": f"w{last}"}) is not None
        for worker in workers.values():
            worker.send_signal(signal.SIGTERM)
        for name, worker in workers.items():
            assert worker.wait(timeout=120) == 0, f"worker {name} did not drain cleanly"
    finally:
        procs.stop_all()

    a_log = (tmp_path / "a.log").read_text()
    assert "lost the lease" in a_log, a_log  # a found out, once back, that its shards were taken
    stored = stored_in_order(data_dir)
    applied = Counter(n for numbers in stored.values() for n in numbers)
    assert [n for n in acknowledged if applied[n] != 1] == []  # none lost, none twice
    assert set(applied) == set(acknowledged)  # nothing stored that was not acknowledged
    for space, numbers in stored.items():
        assert numbers == sorted(numbers), f"{space}: pages out of write order"
