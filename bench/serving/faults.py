"""Fault loops: a process killed at random instants while a client writes; then every acknowledged
write is counted in the stores: lost (0 expected) and applied twice (0).

- `--target worker` (default): the real `memoryos worker` SIGKILLed at random instants while a client
  writes through the Redis queue, with Redis restarted (AOF) along the way; one last worker drains.
- `--target takeover`: two workers serve the shards; each round one of them is SIGKILLed and the other
  takes its shards over (lease TTL), while a new one starts in its place.
- `--target rollout`: two workers; each round one gets SIGTERM (a Kubernetes rollout: it drains and
  releases its leases) and a new one replaces it.
- `--target api`: the embedded `memoryos serve` (no Redis: writes acknowledged by SQLite) SIGKILLed at
  random instants while a client writes over HTTP, retrying a failed write with the same write id;
  restarted each round.

A round lasts `--writes-per-round` acknowledged writes; its fault falls after a random number of them.

`--store postgres` (worker, takeover, rollout) runs the workers on a PostgreSQL started for the run
(`tests/support/postgres_server.py`): every worker gets `MEMORYOS_DATABASE_URL` and a data directory of
its own (no shared volume), and the writes are counted from the database's `pages`. `--database-restarts
N` (`--target worker`) SIGKILLs the PostgreSQL server N times at a random instant of a round, under the
running worker and the writing client, and starts it again (crash recovery from its WAL).

Each write's text carries the client's counter (`write {i}`, space `i % 4`), so besides lost and applied
twice the report counts, per space, the pages stored after a page of a later write (`reordered`: 0
expected).

    python -m bench.serving.faults [--target worker|takeover|rollout|api] [--rounds 50] [--redis-restarts 3]
        [--writes-per-round 500] [--store sqlite|postgres] [--database-restarts 2] [--log-dir DIR]

CI runs a short form (`tests/integration/test_worker_process.py`: 10 worker rounds, one restart).
"""

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import psycopg
import redis

from bench.serving.api import free_port, start_server
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.support.postgres_server import PostgresServer, running_postgres
from tests.support.redis_server import RedisServer, running_redis

NAMESPACE = "faults"
SHARDS = 4
SPACES = [SpaceKey("default", f"user{i}", "helper") for i in range(SHARDS)]
DRAIN_LIMIT_S = 900
"""How long a process told to stop (SIGTERM) may take: it embeds the pages it applied but did not embed
yet before it exits, minutes of work on 2 busy cores after a round of 500 writes."""
EXAMPLES = 5
"""How many of the lost, doubled and reordered writes the report names."""
RECOVERY_LIMIT_S = 60.0
"""How long a worker may take, after the database came back, to store a write again."""

WRITE_TEXT = re.compile(r"write (\d+)")
"""A client write's text: its counter, which gives the order the client wrote in (`Client`)."""

SpacePages = dict[str, list[str]]
"""Each space's page texts (`user_input`), in page id order; a space named `tenant/user/assistant`."""

PAGES_QUERY = """
SELECT s.tenant, s.user_id, s.assistant_id, p.page_id, p.user_input
FROM pages p JOIN spaces s USING (space_id)
"""
"""Every page of every space in the database (`pages_by_space` orders them)."""


@dataclass
class FaultReport:
    rounds: int
    redis_restarts: int
    acknowledged: int
    applied_before_last_worker: int
    lost: int
    applied_twice: int
    unacknowledged_applied: int
    """Writes whose acknowledgement the client never got (Redis restarted mid-call) but that applied:
    allowed, once."""
    workers_alive_after_redis_restarts: int = 0
    """Of the Redis restarts (each under a running worker and writer), how many the worker outlived: it
    was still running when its round's SIGKILL came."""
    reordered: int = 0
    """Pages stored after a page of a later write of the same space (`reordered`): 0 expected."""
    store: str = "sqlite"
    database_restarts: int = 0
    """PostgreSQL SIGKILLed and started again, under the round's running worker and the writing client."""
    workers_alive_after_database_restarts: int = 0
    """Of the database restarts, how many the worker outlived and stored writes again after (within
    `RECOVERY_LIMIT_S`), before its round's SIGKILL."""
    workers_exited_early: list[str] = field(default_factory=list)
    """The workers found exited before their round's fault (`name: exit code`): none expected."""
    dead_letters: int = 0
    """Entries in the queue's dead letters at the end (a write given up after its deliveries)."""
    examples: dict[str, list[str]] = field(default_factory=dict)
    """A few of the lost, doubled and reordered writes, by kind (none when all is well)."""


def worker_env(
    redis_url: str, data_dir: Path, namespace: str = NAMESPACE, shards: int = SHARDS
) -> dict[str, str]:
    """A test worker's environment: small shards and lease, CPU index, metrics and health off, never a real
    LLM."""
    env = {
        **os.environ,
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_REDIS_URL": redis_url,
        "MEMORYOS_REDIS_NAMESPACE": namespace,
        "MEMORYOS_SHARD_COUNT": str(shards),
        "MEMORYOS_LEASE_TTL_S": "1.0",
        "MEMORYOS_FAISS_USE_GPU": "never",
        "MEMORYOS_WORKER_METRICS_PORT": "0",
        "MEMORYOS_WORKER_HEALTH_PORT": "0",
    }
    env.pop("MEMORYOS_OPENAI_API_KEY", None)
    env.pop("MEMORYOS_OPENAI_BASE_URL", None)
    return env


def start_worker(server: RedisServer, data_dir: Path, name: str) -> subprocess.Popen[bytes]:
    """A test `memoryos worker` process (`worker_env`), returned once it serves."""
    return start_worker_process(worker_env(server.url, data_dir), name)


def start_worker_process(env: dict[str, str], name: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """A `memoryos worker` process with `env`, returned once it says it serves (its model loaded); its
    stderr appended to `log` (None: dropped)."""
    with ExitStack() as files:
        stderr = files.enter_context(log.open("ab")) if log is not None else subprocess.DEVNULL
        worker = subprocess.Popen(
            [sys.executable, "-m", "memoryos.cli.main", "worker", "--worker-id", name],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if b"serving shards" not in line:
        raise RuntimeError(f"worker {name} did not start: {line!r}")
    return worker


class Stores:
    """Where the workers keep the spaces: SQLite files in the one data directory `root` every worker
    shares (one host), or with `database` a PostgreSQL database, each worker with a data directory of its
    own under `root` (its snapshot cache; no shared volume). `log_dir`: each worker's stderr, by name."""

    def __init__(self, root: Path, database: PostgresServer | None = None, log_dir: Path | None = None):
        self.root = root
        self.database = database
        self.log_dir = log_dir

    @property
    def kind(self) -> str:
        return "sqlite" if self.database is None else "postgres"

    def data_dir(self, worker: str) -> Path:
        return self.root if self.database is None else self.root / worker

    def start_worker(self, server: RedisServer, name: str) -> subprocess.Popen[bytes]:
        env = worker_env(server.url, self.data_dir(name))
        env.pop("MEMORYOS_DATABASE_URL", None)  # the store counted is the one chosen here
        if self.database is not None:
            env["MEMORYOS_DATABASE_URL"] = self.database.url
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"{name}.log"
        return start_worker_process(env, name, log)

    def pages(self) -> SpacePages:
        if self.database is None:
            return sqlite_pages(self.root)
        return database_pages(self.database.url)


def sqlite_pages(data_dir: Path) -> SpacePages:
    """Every space's pages, read from its SQLite store directly."""
    pages: SpacePages = {}
    for store in data_dir.glob("*/*/*/memory.sqlite"):
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT user_input FROM pages ORDER BY page_id")
            pages["/".join(store.parent.relative_to(data_dir).parts)] = [row[0] for row in rows]
    return pages


def database_pages(url: str) -> SpacePages:
    """Every space's pages, read from the PostgreSQL database at `url` (`PAGES_QUERY`)."""
    with psycopg.connect(url) as connection:
        return pages_by_space(connection.execute(PAGES_QUERY).fetchall())


def pages_by_space(rows: Iterable[tuple[str, str, str, int, str]]) -> SpacePages:
    """`PAGES_QUERY`'s rows (tenant, user, assistant, page id, text), in any order, as each space's texts
    in page id order."""
    by_space: dict[str, list[tuple[int, str]]] = {}
    for tenant, user, assistant, page_id, text in rows:
        by_space.setdefault(f"{tenant}/{user}/{assistant}", []).append((page_id, text))
    return {space: [text for _, text in sorted(pages)] for space, pages in by_space.items()}


def texts_of(pages: SpacePages) -> Counter[str]:
    """How many times each text is stored, over every space (a count above 1: applied twice)."""
    texts: Counter[str] = Counter()
    for space_texts in pages.values():
        texts.update(space_texts)
    return texts


def stored_texts(data_dir: Path) -> Counter[str]:
    """Every page's user_input over the spaces, read from their SQLite stores directly."""
    return texts_of(sqlite_pages(data_dir))


def reordered(pages: SpacePages) -> list[str]:
    """The pages stored (in page id order) after a page of a later write of their space. The client
    writes `write {i}` one at a time in the order of i, each acknowledged before the next, so each
    space's pages must follow i. A text met again in its space is applied twice, counted there, not
    here; a text without a counter is skipped."""
    out = []
    for texts in pages.values():
        latest, seen = -1, set()
        for text in texts:
            match = WRITE_TEXT.fullmatch(text)
            if text in seen or match is None:
                continue
            seen.add(text)
            number = int(match.group(1))
            if number < latest:
                out.append(text)
            latest = max(latest, number)
    return out


class Client:
    """Writes until stopped, each with its own write id; a write is acknowledged when `send` returns. A
    failed call is retried with the same write id (the engine stores it once)."""

    def __init__(self, send: Callable[[int, str], None], retry_on: tuple[type[Exception], ...]) -> None:
        self.send = send
        self.retry_on = retry_on
        self.acknowledged: list[str] = []
        self.attempted: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            text = f"write {i}"
            self.attempted.append(text)
            while not self.stop.is_set():
                try:
                    self.send(i, text)
                    self.acknowledged.append(text)
                    break
                except self.retry_on:
                    time.sleep(0.05)
            i += 1
            time.sleep(0.005)

    def wait_for(self, acknowledged: int, limit_s: float = 600) -> None:
        """Until `acknowledged` writes are acknowledged in all."""
        deadline = time.monotonic() + limit_s
        while len(self.acknowledged) < acknowledged:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.acknowledged)} of {acknowledged} writes acknowledged")
            time.sleep(0.01)


def queue_client(settings: QueueSettings) -> Client:
    """A client writing through the Redis queue, acknowledged once Redis holds the write."""
    queue = WriteQueue(connect(settings), settings)

    def send(i: int, text: str) -> None:
        op = plan_write(
            [{"user_input": text, "agent_response": "ok"}],
            max_text_chars=100,
            at=time.time(),
            write_id=f"w{i}",
        )
        queue.enqueue(SPACES[i % len(SPACES)], op)

    return Client(send, (redis.ConnectionError,))


def http_client(url: str) -> Client:
    """A client writing over HTTP, acknowledged by the API's 201."""
    http = httpx.Client(base_url=url, timeout=10)

    def send(i: int, text: str) -> None:
        key = SPACES[i % len(SPACES)]
        path = f"/v1/users/{key.user_id}/assistants/{key.assistant_id}/memories"
        body = {"user_input": text, "agent_response": "ok", "write_id": f"w{i}"}
        if http.post(path, json=body).status_code != 201:
            raise httpx.TransportError("not stored")

    return Client(send, (httpx.HTTPError,))


def spread(rounds: int, count: int, offset: float = 1.0) -> set[int]:
    """`count` rounds spread evenly over `rounds` (`offset` 0.5: half a step earlier, between the
    rounds that offset 1 picks)."""
    return {int(rounds * (k + offset) / (count + 1)) for k in range(count)}


def run_fault_loop(
    server: RedisServer,
    data_dir: Path,
    rounds: int,
    redis_restarts: int,
    seed: int = 7,
    writes_per_round: int = 0,
    *,
    database: PostgresServer | None = None,
    database_restarts: int = 0,
    log_dir: Path | None = None,
) -> FaultReport:
    """SIGKILL one worker per round (`writes_per_round` 0: after 0.2-1.5 s, else after a random number
    of that round's acknowledged writes), restarting Redis `redis_restarts` times along the way, each
    time under the round's running worker and the writing client (before its SIGKILL). With `database`,
    the workers keep the spaces there, each with its own data directory under `data_dir`, and the server
    is SIGKILLed and started again `database_restarts` times, the same way."""
    stores = Stores(data_dir, database, log_dir)
    if database is None and database_restarts:
        raise ValueError("database restarts need a database")
    settings = QueueSettings(redis_url=server.url, redis_namespace=NAMESPACE, shard_count=SHARDS)
    client = queue_client(settings)
    client.thread.start()
    rng = random.Random(seed)
    restart_at = spread(rounds, redis_restarts)
    database_restart_at = spread(rounds, database_restarts, offset=0.5)
    outlived = outlived_database = 0
    exited: list[str] = []
    try:
        for round_ in range(rounds):
            worker = stores.start_worker(server, f"w-{round_}")
            if round_ in restart_at:
                fault_after(client, rng, writes_per_round)
                server.restart()  # the worker and the client ride it out
            stored_at_restart = None
            if database is not None and round_ in database_restart_at:
                fault_after(client, rng, writes_per_round)
                database.kill()  # SIGKILL: mid-transaction, mid-commit; crash recovery at start
                database.start()
                stored_at_restart = page_count(database.url)
            fault_after(client, rng, writes_per_round)
            outlived += round_ in restart_at and worker.poll() is None
            if database is not None and stored_at_restart is not None:
                # the worker went on: it stored writes after the server came back
                recovered = applies_again(database.url, stored_at_restart, RECOVERY_LIMIT_S)
                outlived_database += recovered and worker.poll() is None
            if worker.poll() is not None:
                exited.append(f"w-{round_}: {worker.returncode}")
            worker.kill()  # SIGKILL: mid-batch, mid-apply, mid-commit
            worker.wait()
            if writes_per_round:
                client.wait_for((round_ + 1) * writes_per_round)
    finally:
        client.stop.set()
        client.thread.join(timeout=10)
    before_last = sum(texts_of(stores.pages()).values())
    drain_with_last_worker(server, stores, settings)
    report = count(client, stores, rounds, len(restart_at), before_last, settings)
    report.workers_alive_after_redis_restarts = outlived
    report.database_restarts = len(database_restart_at) if database is not None else 0
    report.workers_alive_after_database_restarts = outlived_database
    report.workers_exited_early = exited
    return report


def page_count(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM pages").fetchone()
    return int(row[0]) if row is not None else 0


def applies_again(url: str, stored: int, limit_s: float) -> bool:
    """Whether the database holds more than `stored` pages within `limit_s` (the client keeps writing,
    so a worker that serves stores more)."""
    deadline = time.monotonic() + limit_s
    while page_count(url) <= stored:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def fault_after(client: Client, rng: random.Random, writes_per_round: int) -> None:
    """Wait for the fault's random instant: a random number of this round's writes, or 0.2-1.5 s."""
    if writes_per_round:
        round_start = len(client.acknowledged) // writes_per_round * writes_per_round
        client.wait_for(round_start + rng.randint(1, writes_per_round))
    else:
        time.sleep(rng.uniform(0.2, 1.5))


def drain_with_last_worker(server: RedisServer, stores: Stores | Path, settings: QueueSettings) -> None:
    """A last worker serves until the queue is empty, then drains (SIGTERM)."""
    stores = stores if isinstance(stores, Stores) else Stores(stores)
    last = stores.start_worker(server, "w-last")
    try:
        queue = WriteQueue(connect(settings), settings)
        deadline = time.monotonic() + 300
        while queue.depth() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        last.send_signal(signal.SIGTERM)
        last.wait(timeout=DRAIN_LIMIT_S)


def count(
    client: Client,
    stores: Stores | Path,
    rounds: int,
    restarts: int,
    before_last: int,
    settings: QueueSettings | None = None,
) -> FaultReport:
    """The report: every acknowledged write looked for in the stores (and, with `settings`, the queue's
    dead letters counted)."""
    stores = stores if isinstance(stores, Stores) else Stores(stores)
    pages = stores.pages()
    applied = texts_of(pages)
    acknowledged = set(client.acknowledged)
    lost = [text for text in client.acknowledged if applied[text] == 0]
    twice = [text for text, count in applied.items() if count > 1]
    out_of_order = reordered(pages)
    dead = 0
    if settings is not None:
        dead = int(connect(settings).llen(Keys(settings.redis_namespace).dead_letters()))
    examples = {
        "lost": lost[:EXAMPLES],
        "applied_twice": twice[:EXAMPLES],
        "reordered": out_of_order[:EXAMPLES],
    }
    return FaultReport(
        rounds=rounds,
        redis_restarts=restarts,
        acknowledged=len(acknowledged),
        applied_before_last_worker=before_last,
        lost=len(lost),
        applied_twice=len(twice),
        unacknowledged_applied=sum(1 for text in applied if text not in acknowledged),
        reordered=len(out_of_order),
        store=stores.kind,
        dead_letters=dead,
        examples={kind: texts for kind, texts in examples.items() if texts},
    )


def name_of(worker: subprocess.Popen[bytes]) -> str:
    """The `--worker-id` a worker was started with (`start_worker_process`)."""
    return str(list(worker.args)[-1])  # type: ignore[arg-type]


def run_pair_loop(
    server: RedisServer,
    data_dir: Path,
    rounds: int,
    writes_per_round: int,
    stop_signal: int,
    seed: int = 7,
    *,
    database: PostgresServer | None = None,
    log_dir: Path | None = None,
) -> FaultReport:
    """Two workers serve the shards; each round one of them gets `stop_signal` (SIGKILL: the other takes
    its shards when its leases expire; SIGTERM: it drains and hands them over) and a new one replaces it.
    With `database`, the workers keep the spaces there, each with its own data directory."""
    stores = Stores(data_dir, database, log_dir)
    settings = QueueSettings(redis_url=server.url, redis_namespace=NAMESPACE, shard_count=SHARDS)
    client = queue_client(settings)
    client.thread.start()
    rng = random.Random(seed)
    workers = [stores.start_worker(server, "w-a"), stores.start_worker(server, "w-b")]
    exited: list[str] = []
    try:
        for round_ in range(rounds):
            fault_after(client, rng, writes_per_round)
            stopped = workers.pop(rng.randrange(2))
            if stopped.poll() is not None:  # it exited of itself before its fault
                exited.append(f"{name_of(stopped)}: {stopped.returncode}")
            stopped.send_signal(stop_signal)
            stopped.wait(timeout=DRAIN_LIMIT_S)
            workers.append(stores.start_worker(server, f"w-{round_}"))
            client.wait_for((round_ + 1) * writes_per_round)
    finally:
        client.stop.set()
        client.thread.join(timeout=10)
        for worker in workers:
            if worker.poll() is not None:
                exited.append(f"{name_of(worker)}: {worker.returncode}")
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=DRAIN_LIMIT_S)
    before_last = sum(texts_of(stores.pages()).values())
    drain_with_last_worker(server, stores, settings)
    report = count(client, stores, rounds, 0, before_last, settings)
    report.workers_exited_early = exited
    return report


def run_api_loop(data_dir: Path, rounds: int, writes_per_round: int, seed: int = 7) -> FaultReport:
    """The embedded API SIGKILLed at a random instant of each round while a client writes over HTTP."""
    port = free_port()
    client = http_client(f"http://127.0.0.1:{port}")
    rng = random.Random(seed)
    api = start_server(data_dir, port, unbounded=False)
    client.thread.start()
    try:
        for round_ in range(rounds):
            fault_after(client, rng, writes_per_round)
            api.kill()  # SIGKILL: mid-request, mid-commit, mid-embedding
            api.wait()
            api = start_server(data_dir, port, unbounded=False)
            client.wait_for((round_ + 1) * writes_per_round)
    finally:
        client.stop.set()
        client.thread.join(timeout=20)
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=DRAIN_LIMIT_S)
    return count(client, data_dir, rounds, 0, sum(stored_texts(data_dir).values()))


@contextmanager
def database_for(store: str) -> Iterator[PostgresServer | None]:
    """A PostgreSQL started for the run (`--store postgres`), stopped and removed after; else None."""
    if store != "postgres":
        yield None
        return
    with running_postgres() as database:
        yield database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["worker", "takeover", "rollout", "api"], default="worker")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--redis-restarts", type=int, default=3, help="--target worker only")
    parser.add_argument("--writes-per-round", type=int, default=0, help="0: a fault every 0.2-1.5 s")
    parser.add_argument(
        "--store",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="postgres: the workers keep the spaces in a PostgreSQL started for the run, each with a data "
        "directory of its own (not with --target api)",
    )
    parser.add_argument(
        "--database-restarts", type=int, default=0, help="--store postgres --target worker only"
    )
    parser.add_argument("--log-dir", type=Path, help="keep each worker's stderr there, as NAME.log")
    args = parser.parse_args()
    if args.store == "postgres" and args.target == "api":
        parser.error("--store postgres runs the workers on the database; --target api has none")
    if args.database_restarts and (args.store != "postgres" or args.target != "worker"):
        parser.error("--database-restarts needs --store postgres and --target worker")
    with (
        tempfile.TemporaryDirectory() as workdir,
        running_redis(Path(workdir) / "redis") as server,
        database_for(args.store) as database,
    ):
        started = time.perf_counter()
        data_dir = Path(workdir) / "data"
        if args.target == "api":
            report = run_api_loop(data_dir, args.rounds, args.writes_per_round or 500)
        elif args.target == "worker":
            report = run_fault_loop(
                server,
                data_dir,
                args.rounds,
                args.redis_restarts,
                writes_per_round=args.writes_per_round,
                database=database,
                database_restarts=args.database_restarts,
                log_dir=args.log_dir,
            )
        else:
            stop_signal = signal.SIGKILL if args.target == "takeover" else signal.SIGTERM
            report = run_pair_loop(
                server,
                data_dir,
                args.rounds,
                args.writes_per_round or 500,
                stop_signal,
                database=database,
                log_dir=args.log_dir,
            )
    summary = {"target": args.target, **asdict(report), "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
