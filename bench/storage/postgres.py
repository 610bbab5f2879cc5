"""The PostgreSQL record store beside the SQLite store, in the same run (issue 56's targets).

Every sub-benchmark starts its own PostgreSQL (tests/support/postgres_server.py: initdb in a temporary
directory, `fsync`, `synchronous_commit` and `full_page_writes` on) and runs the SQLite store
(`journal_mode=WAL`, `synchronous=FULL`) on the same work; both stores' durability settings, as each
reports them, head the output.

- `apply`: applying alone, as deployed. `bench.serving.ingest`'s `run_ingest` (the real worker with the
  tests' hash embedder, `bench.serving.instant_worker`; a queue that never runs dry for `--seconds`; the
  clock stops when every write is applied and the last ones are searchable), once per store per run,
  the stores interleaved (sqlite, postgres, sqlite, postgres, ...; a fresh Redis, data directory and
  database for each); the median of `--runs` per store. PostgreSQL's own CPU (the postmaster and its
  backends, from /proc) is counted apart from the workers', over the whole run (settling included).
  Where the server has `pg_stat_statements` (Debian's `postgresql` package does), each PostgreSQL run
  also counts the statements the worker sent and the server's time executing them, per turn, with the
  five costliest: figures that move with the code and much less with the machine's load than turns/s,
  which swing by a fifth between runs on a shared 2-core machine. Only the apply databases are tracked
  (`pg_stat_statements.track` is `none` for the others). Target: postgres turns/s ≥ 60% of sqlite's.
- `retrieve`: `Memoryos.retrieve` on an open space of `--pages` LoCoMo exchanges (the dev conversations)
  with the hash embedder, consolidated with the offline LLM and flushed on SQLite, then copied into the
  database (`move_to_database`: the same ids and rows, so the same content on both), `--queries` of the conversations' questions, each asked of both spaces in turn (the order
  alternating), after a few untimed warm-up reads; p50 and p95. The hash embedder keeps the model out of
  both sides, so the ratio is the stores' (a model's encode adds the same milliseconds to both). Then
  the same questions again on PostgreSQL, untimed, counting the statements sent to the database per
  retrieve (psycopg's `Cursor.execute`/`executemany`: one round trip each) on the reading thread, by
  the store method that sent them. Target: postgres p50 ≤ 1.3× sqlite's.
- `cold-open`: a space of `--cold-pages` pages with `--cold-dim`-d random unit vectors (float16 in the
  store; built with `MemorySpace.apply(AddTurns(...))` in batches of 1000, then closed: the index
  snapshot written), the same on both stores; then the database vacuumed and analyzed, as autovacuum
  leaves it after a load (`vacuumed`), and the `memoryos` package byte-compiled, as pip leaves an
  installed wheel (`compiled_package`). Per run, per store, with and without the snapshot in the
  space's directory: PostgreSQL restarted first (`PostgresServer.restart()`: its buffers cold; the OS
  page cache is not dropped, for either store), then a new process (`bench.storage.cold_child`) opens
  the space and answers one retrieve (a random query vector, a question's words). Timed from just
  before the process is started to its answer line (`start_to_answer_s`: nothing subtracted), and inside
  it from opening to answer (`open_to_answer_s`); medians of `--cold-runs`. Targets (postgres):
  ≤ 0.5 s with the snapshot, ≤ 3 s without.
- `recall`: LoCoMo evidence recall@k (`memoryos.eval.harness.evaluate_conversation`, what
  `bench/quality/recall.py` runs, with its config and the real model) on `--recall-conversations`, once
  per store; equal on both (the PostgreSQL store computes FTS5's BM25). The model is loaded once
  (`shared_embedder`).

    python -m bench.storage.postgres [--only apply|retrieve|cold-open|recall|all] [--out FILE]
        [--runs 3] [--seconds 30] [--processes 1] [--users 100] [--turns 20]
        [--pages 400] [--queries 200] [--cold-pages 10000] [--cold-dim 1024] [--cold-runs 3]
        [--recall-conversations conv-26,...]
"""

import argparse
import contextlib
import json
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from bench.output import emit

STORES = ("sqlite", "postgres")

APPLY_TARGET = 0.6
"""postgres turns/s at least this share of sqlite's."""
RETRIEVE_TARGET = 1.3
"""postgres retrieve p50 at most this multiple of sqlite's."""
COLD_TARGETS_S = {"snapshot": 0.5, "no_snapshot": 3.0}
"""postgres process start to first answer, at most (seconds)."""

RETRIEVE_WARMUP = 10
"""Untimed reads of each space before the timed ones."""
FILL_BATCH = 100
"""Exchanges per `add_memories` when filling the retrieve bench's space."""
SPACE_USER = "bench-retrieve"
COLD_BATCH = 1000
"""Pages per `AddTurns` when building the cold-open space."""
COLD_MODEL = "bench-random-vectors"
"""The embedding model name the cold-open space records (no model is ever loaded)."""
COLD_USER = "cold-user"
CHILD_TIMEOUT_S = 300.0

SQLITE_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


# --- the pure pieces (tests/unit/test_bench_store.py) -------------------------------------------------
def interleaved(runs: int, stores: Sequence[str] = STORES) -> list[tuple[int, str]]:
    """(run, store) in the order they run: every store once per run, in the same order each run."""
    return [(run, store) for run in range(runs) for store in stores]


def medians(rows: Sequence[dict[str, Any]], key: str, stores: Sequence[str] = STORES) -> dict[str, float]:
    """Per store, the median of `key` over its rows (rows carry "store"); stores without rows are left out."""
    found = {}
    for store in stores:
        values = [row[key] for row in rows if row["store"] == store and row.get(key) is not None]
        if values:
            found[store] = statistics.median(values)
    return found


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 (the median) and p95 (the sample at rank ⌊0.95 n⌋, as bench/engine/latency.py) in ms."""
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
    }


def ratio(postgres: float, sqlite: float) -> float | None:
    """postgres / sqlite, None when sqlite's figure is 0."""
    return round(postgres / sqlite, 3) if sqlite else None


def verdict(value: float | None, target: float, higher_is_better: bool) -> str:
    """`met` or `missed` against the target; `unmeasured` without a value."""
    if value is None:
        return "unmeasured"
    return "met" if (value >= target if higher_is_better else value <= target) else "missed"


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The printed summary: one line per figure with its target and verdict, from the JSON report."""
    lines = []
    durability = report.get("durability", {})
    if durability:
        lines.append(
            "durability: "
            + "; ".join(
                f"{store} " + ", ".join(f"{k}={v}" for k, v in s.items()) for store, s in durability.items()
            )
        )
    if apply := report.get("apply"):
        m = apply["median_turns_per_s"]
        lines.append(
            f"apply (turns/s, median of {apply['runs']}): sqlite {m.get('sqlite')}, postgres {m.get('postgres')}"
            f" -> postgres/sqlite {apply['ratio']} (target >= {APPLY_TARGET}: {apply['verdict']})"
        )
        if apply.get("median_statements_per_turn") is not None:
            lines.append(
                f"apply on postgres: {apply['median_statements_per_turn']} statements and "
                f"{apply['median_exec_ms_per_turn']} ms of the server executing them and "
                f"{apply['median_plan_ms_per_turn']} ms planning them per turn (median)"
            )
    if retrieve := report.get("retrieve"):
        s, p = retrieve["sqlite"], retrieve["postgres"]
        lines.append(
            f"retrieve ({retrieve['pages']} pages, {retrieve['queries']} queries): p50 sqlite {s['p50_ms']} ms, "
            f"postgres {p['p50_ms']} ms; p95 sqlite {s['p95_ms']} ms, postgres {p['p95_ms']} ms -> p50 "
            f"postgres/sqlite {retrieve['p50_ratio']} (target <= {RETRIEVE_TARGET}: {retrieve['verdict']})"
        )
        trips = retrieve.get("round_trips")
        if trips:
            lines.append(
                f"retrieve round trips on postgres: {trips['mean_per_retrieve']} per retrieve "
                f"(min {trips['min']}, max {trips['max']}), {trips['ms_in_statements_per_retrieve']} ms in them of "
                f"{trips['ms_per_retrieve_while_counting']} ms"
            )
    if cold := report.get("cold_open"):
        for case in ("snapshot", "no_snapshot"):
            figures = cold["medians"][case]
            lines.append(
                f"cold open {case.replace('_', ' ')} ({cold['pages']} pages, {cold['dim']}-d, median of "
                f"{cold['runs']}): start to answer sqlite {figures['sqlite']['start_to_answer_s']} s, postgres "
                f"{figures['postgres']['start_to_answer_s']} s; open to answer sqlite "
                f"{figures['sqlite']['open_to_answer_s']} s, postgres {figures['postgres']['open_to_answer_s']} s"
                f" (target postgres <= {COLD_TARGETS_S[case]} s: {cold['verdicts'][case]})"
            )
    if recall := report.get("recall"):
        for row in recall["conversations"]:
            lines.append(
                f"recall {row['sample_id']}: sqlite {row['sqlite']}, postgres {row['postgres']} "
                f"(equal: {row['equal']})"
            )
    return lines


def recall_equal(first: dict[Any, float], second: dict[Any, float], tolerance: float = 1e-12) -> bool:
    """The same ks and the same recall at each (within float noise)."""
    return first.keys() == second.keys() and all(abs(first[k] - second[k]) <= tolerance for k in first)


# --- durability ---------------------------------------------------------------------------------------
def postgres_durability(url: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(url) as connection:
        return {
            name: str(connection.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in ("fsync", "synchronous_commit", "full_page_writes")
        }


def sqlite_durability(directory: Path) -> dict[str, str]:
    """What an open `SqliteStore`'s own connection reports (the store sets both at open)."""
    from memoryos.storage.records.sqlite.store import SqliteStore

    store = SqliteStore(directory / "durability.sqlite")
    try:
        journal = store._db.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = store._db.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        store.close()
    return {
        "journal_mode": str(journal).upper(),
        "synchronous": SQLITE_SYNCHRONOUS.get(synchronous, str(synchronous)),
    }


# --- 1. applying alone --------------------------------------------------------------------------------
def postgres_cpu_seconds(server: Any) -> float:
    """CPU seconds the PostgreSQL server has used: the postmaster's own and its exited backends' (reaped:
    /proc/PID/stat's cutime and cstime), and its live processes'."""
    import os

    from bench.serving.ingest import cpu_seconds, descendants

    pid = server.process.pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return reaped + cpu_seconds([pid, *descendants(pid)])


STATEMENT_STATS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "none",
    "pg_stat_statements.track_planning": "on",
}
"""The server settings that load `pg_stat_statements` without tracking anything until a database asks."""


def statement_stats_available(bin_dir: Path) -> bool:
    """Whether the server's installation has `pg_stat_statements` (its library beside the binaries)."""
    return (bin_dir.parent / "lib" / "pg_stat_statements.so").exists()


def track_statements(url: str, database: str) -> None:
    """Count the top-level statements sent to `database` from its next connection on."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        connection.execute(
            sql.SQL("ALTER DATABASE {} SET pg_stat_statements.track = 'top'").format(sql.Identifier(database))
        )


def statement_figures(url: str, turns: int, top: int = 5) -> dict[str, Any]:
    """The statements the worker sent to the database at `url` (`track_statements`), per turn: how many,
    the server's milliseconds executing them, and the `top` costliest by that time (their text cut)."""
    import psycopg

    # Not tracked from the connection's start: a SET inside it would itself be counted.
    with psycopg.connect(url, autocommit=True, options="-c pg_stat_statements.track=none") as connection:
        rows = connection.execute(
            "SELECT calls, total_exec_time, total_plan_time, rows, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "ORDER BY total_exec_time DESC"
        ).fetchall()
    per_turn = max(turns, 1)
    return {
        "statements_per_turn": round(sum(row[0] for row in rows) / per_turn, 2),
        "exec_ms_per_turn": round(sum(row[1] for row in rows) / per_turn, 3),
        "plan_ms_per_turn": round(sum(row[2] for row in rows) / per_turn, 3),
        "costliest": [
            {
                "statement": text[:120],
                "calls_per_turn": round(calls / per_turn, 3),
                "exec_ms_per_turn": round(spent / per_turn, 3),
                "rows_per_call": round(returned / max(calls, 1), 1),
            }
            for calls, spent, _planning, returned, text in rows[:top]
        ],
    }


APPLY_FIGURES = (
    "turns",
    "searchable_s",
    "turns_per_s",
    "worker_cpu_ms_per_turn",
    "settled_s",
    "turns_per_s_settled",
    "worker_cpu_ms_per_turn_settled",
    "short_term_backlog_settled",
)


def apply_bench(server: Any, args: argparse.Namespace) -> dict[str, Any]:
    from bench.serving.ingest import free_ports, run_ingest, worker_environment
    from services.queue.settings import QueueSettings
    from tests.support.redis_server import running_redis

    rows = []
    for run, store in interleaved(args.runs):
        with tempfile.TemporaryDirectory() as workdir, running_redis(Path(workdir) / "redis") as redis:
            settings = QueueSettings(
                redis_url=redis.url,
                shard_count=args.shards,
                write_run=args.write_run,
                queue_max_entries=10**9,
            )
            env = worker_environment(
                settings, Path(workdir) / "data", "all-MiniLM-L6-v2", "cpu", False, free_ports(args.processes)
            )
            counting = store == "postgres" and statement_stats_available(server.bin_dir)
            if store == "postgres":
                env["MEMORYOS_DATABASE_URL"] = server.create_database(f"apply_{run}")
                if counting:
                    track_statements(env["MEMORYOS_DATABASE_URL"], f"apply_{run}")
            log = Path(workdir) / "worker.log"
            database_cpu = postgres_cpu_seconds(server)
            try:
                figures = run_ingest(
                    settings, env, args.users, args.turns, args.processes, args.seconds, True, log
                )
            except BaseException:
                if log.exists():
                    sys.stderr.write("".join(log.read_text(errors="replace").splitlines(True)[-20:]))
                raise
            database_cpu = postgres_cpu_seconds(server) - database_cpu
        row = {"run": run, "store": store, **{key: figures[key] for key in APPLY_FIGURES}}
        if store == "postgres":
            row["database_cpu_ms_per_turn_settled"] = round(1000 * database_cpu / figures["turns"], 3)
            if counting:
                row["statements"] = statement_figures(env["MEMORYOS_DATABASE_URL"], figures["turns"])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    searchable = medians(rows, "turns_per_s")
    settled = medians(rows, "turns_per_s_settled")
    share = ratio(searchable["postgres"], searchable["sqlite"])
    return {
        "runs": args.runs,
        "seconds": args.seconds,
        "processes": args.processes,
        "users_per_round": args.users,
        "turns_per_user": args.turns,
        "embedder": "hash (instant)",
        "rows": rows,
        "median_turns_per_s": searchable,
        "median_turns_per_s_settled": settled,
        "ratio": share,
        "ratio_settled": ratio(settled["postgres"], settled["sqlite"]),
        "median_worker_cpu_ms_per_turn": medians(rows, "worker_cpu_ms_per_turn"),
        "median_database_cpu_ms_per_turn_settled": medians(
            rows, "database_cpu_ms_per_turn_settled", ["postgres"]
        ),
        "median_statements_per_turn": _statement_median(rows, "statements_per_turn"),
        "median_exec_ms_per_turn": _statement_median(rows, "exec_ms_per_turn"),
        "median_plan_ms_per_turn": _statement_median(rows, "plan_ms_per_turn"),
        "target": f"postgres >= {APPLY_TARGET} x sqlite turns/s",
        "verdict": verdict(share, APPLY_TARGET, higher_is_better=True),
    }


def _statement_median(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    """The median of a `statement_figures` figure over the PostgreSQL runs that counted (None: none did)."""
    values = [row["statements"][key] for row in rows if "statements" in row]
    return statistics.median(values) if values else None


# --- 2. retrieve --------------------------------------------------------------------------------------
POSTGRES_STORE_DIR = "memoryos/storage/records/postgres/"
HELPERS = {
    "_all",
    "_dicts",
    "_one",
    "_write",
    "_write_many",
    "_connection",
    "_vectors_by_id",
    "__exit__",
    "__enter__",
}


def _call_site() -> str:
    """The PostgreSQL store's method that sent the statement being executed (past the shared helpers)."""
    frame: FrameType | None = sys._getframe(2)
    first = None
    while frame is not None:
        filename = frame.f_code.co_filename.replace("\\", "/")
        if POSTGRES_STORE_DIR in filename:
            name = f"{Path(filename).stem}.{frame.f_code.co_name}"
            first = first or name
            if frame.f_code.co_name not in HELPERS:
                return name
        frame = frame.f_back
    return first or "outside the store"


@contextlib.contextmanager
def counting_statements() -> Iterator[tuple[Counter[str], defaultdict[str, float]]]:
    """Counts every statement psycopg sends on this thread (`Cursor.execute`, `executemany`), by the
    store method that sent it, and the milliseconds each method's statements took (sent to answered)."""
    import psycopg

    counts: Counter[str] = Counter()
    spent_ms: defaultdict[str, float] = defaultdict(float)
    thread = threading.get_ident()
    originals = {name: getattr(psycopg.Cursor, name) for name in ("execute", "executemany")}

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            site = _call_site() if threading.get_ident() == thread else "(other threads)"
            counts[site] += 1
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                spent_ms[site] += (time.perf_counter() - started) * 1000

        return call

    for name, original in originals.items():
        setattr(psycopg.Cursor, name, counted(original))
    try:
        yield counts, spent_ms
    finally:
        for name, original in originals.items():
            setattr(psycopg.Cursor, name, original)


def retrieve_bench(server: Any, args: argparse.Namespace) -> dict[str, Any]:
    from bench.corpus import dev_conversations, exchanges
    from memoryos.config import MemoryConfig
    from memoryos.facade.memoryos import Memoryos
    from memoryos.portability.database_move import move_to_database
    from tests.support.fakes import HashEmbedder

    conversations = dev_conversations()
    turns = exchanges(args.pages, conversations)
    questions = [q.question for c in conversations for q in c.qa][: args.queries]
    url = server.create_database("retrieve")
    spaces: dict[str, Memoryos] = {}
    built: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        configs = {
            "sqlite": MemoryConfig(data_dir=Path(scratch) / "sqlite", faiss_use_gpu="never"),
            "postgres": MemoryConfig(
                data_dir=Path(scratch) / "postgres", database_url=url, faiss_use_gpu="never"
            ),
        }
        try:
            # Filled once, on SQLite; the same rows (ids, op log) then copied into the database: both
            # spaces hold exactly the same content (consolidation's grouping depends on timing).
            memory = Memoryos.from_config(SPACE_USER, configs["sqlite"], embedder=HashEmbedder())
            started = time.perf_counter()
            for start in range(0, len(turns), FILL_BATCH):
                memory.add_memories(turns[start : start + FILL_BATCH])
            memory.flush()
            memory.close()
            built["fill_s_sqlite"] = round(time.perf_counter() - started, 2)
            started = time.perf_counter()
            shutil.copytree(configs["sqlite"].data_dir, configs["postgres"].data_dir)
            move_to_database(configs["postgres"], remove_files=True)
            built["copy_into_postgres_s"] = round(time.perf_counter() - started, 2)
            for store in STORES:
                memory = Memoryos.from_config(SPACE_USER, configs[store], embedder=HashEmbedder())
                spaces[store] = memory
                stats = memory.stats()
                built[store] = {
                    "pages": stats.short_term_pages + stats.mid_term_pages + stats.archived_pages,
                    "mid_term_pages": stats.mid_term_pages,
                    "segments": len(stats.segments),
                }
            for question in questions[:RETRIEVE_WARMUP]:
                for memory in spaces.values():
                    memory.retrieve(question)
            samples: dict[str, list[float]] = {store: [] for store in STORES}
            for i, question in enumerate(questions):
                for store in STORES if i % 2 == 0 else STORES[::-1]:
                    started = time.perf_counter()
                    spaces[store].retrieve(question)
                    samples[store].append((time.perf_counter() - started) * 1000)
            per_retrieve, sites, whole_ms = [], Counter[str](), []
            site_ms: defaultdict[str, float] = defaultdict(float)
            for question in questions:
                with counting_statements() as (counts, spent):
                    started = time.perf_counter()
                    spaces["postgres"].retrieve(question)
                    whole_ms.append((time.perf_counter() - started) * 1000)
                background = counts.pop("(other threads)", 0)
                spent.pop("(other threads)", 0)
                per_retrieve.append(sum(counts.values()))
                sites.update(counts)
                for site, ms in spent.items():
                    site_ms[site] += ms
                sites["(other threads, not counted above)"] += background
        finally:
            for memory in spaces.values():
                memory.close()
    figures = {store: percentiles(samples[store]) for store in STORES}
    p50 = ratio(figures["postgres"]["p50_ms"], figures["sqlite"]["p50_ms"])
    return {
        "pages": args.pages,
        "queries": len(questions),
        "embedder": "hash (instant), the same on both stores",
        "spaces": built,
        **figures,
        "p50_ratio": p50,
        "p95_ratio": ratio(figures["postgres"]["p95_ms"], figures["sqlite"]["p95_ms"]),
        "target": f"postgres p50 <= {RETRIEVE_TARGET} x sqlite p50",
        "verdict": verdict(p50, RETRIEVE_TARGET, higher_is_better=False),
        "round_trips": {
            "mean_per_retrieve": round(statistics.mean(per_retrieve), 2),
            "min": min(per_retrieve),
            "max": max(per_retrieve),
            "by_store_method_per_retrieve": {
                site: round(count / len(questions), 2) for site, count in sites.most_common()
            },
            "ms_in_statements_per_retrieve": round(sum(site_ms.values()) / len(questions), 3),
            "ms_per_retrieve_while_counting": round(statistics.mean(whole_ms), 3),
            "ms_by_store_method_per_retrieve": {
                site: round(ms / len(questions), 3)
                for site, ms in sorted(site_ms.items(), key=lambda item: -item[1])
            },
        },
    }


# --- 3. cold open -------------------------------------------------------------------------------------
def build_cold_space(directory: Path, config: Any, pages: int, dim: int) -> None:
    """`pages` LoCoMo exchanges with random unit vectors (the same seed for every store), applied in
    batches of `COLD_BATCH`, then closed: the index snapshot written."""
    from bench.corpus import dev_conversations, exchanges
    from memoryos.space.memory_space import MemorySpace
    from memoryos.space.ops import AddTurns
    from memoryos.types import Turn

    turns = exchanges(pages, dev_conversations())
    rng = np.random.default_rng(56)
    space = MemorySpace(directory, config, COLD_MODEL, lambda: dim)
    try:
        for start in range(0, pages, COLD_BATCH):
            batch = turns[start : start + COLD_BATCH]
            vectors = rng.standard_normal((len(batch), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            space.apply(AddTurns(turns=[Turn(**turn) for turn in batch], vectors=vectors))
    finally:
        space.close()


def snapshot_files(directory: Path) -> list[Path]:
    """The space directory's files other than the SQLite store's (memory.sqlite, -wal, -shm) and locks:
    the index snapshot."""
    return [
        path
        for path in directory.iterdir()
        if path.is_file() and not path.name.startswith("memory.sqlite") and not path.name.endswith(".lock")
    ]


def vacuumed(url: str) -> float:
    """`VACUUM (ANALYZE)` of the database after the space is built, timed: the state autovacuum keeps a
    space's tables in once it has run after their inserts (within a minute of them, by default). Without
    it the visibility map of a just-filled `page_terms` is empty and the first retrieve's index-only
    scans read the heap of every entry they count (0.11 s instead of 0.05 s measured on a cold server):
    the figure of a space filled in the last minute, not of a space a worker takes over."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM (ANALYZE)")
    return round(time.perf_counter() - started, 2)


def compiled_package() -> str:
    """Byte-compile the `memoryos` package the new processes import, as pip does when it installs the
    wheel into an image; the path compiled. Without it, where PYTHONDONTWRITEBYTECODE is set (our images
    and this machine set it), every process compiles each module from source again (about 0.15 s on a
    2-core machine), which no deployed worker does."""
    import compileall

    import memoryos

    package = Path(memoryos.__file__).parent
    compileall.compile_dir(package, quiet=1)
    return str(package)


def cold_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Start `bench.storage.cold_child`; its answer with `start_to_answer_s`, from just before the start
    to its answer line."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.storage.cold_child", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    answered = time.perf_counter()
    _, err = process.communicate(timeout=CHILD_TIMEOUT_S)
    if not line:
        raise RuntimeError(f"the cold-open process answered nothing:\n{err.decode(errors='replace')[-3000:]}")
    return {"start_to_answer_s": round(answered - started, 4), **json.loads(line)}


def cold_open_bench(server: Any, args: argparse.Namespace) -> dict[str, Any]:
    from bench.corpus import dev_conversations
    from memoryos.config import MemoryConfig

    url = server.create_database("cold_open")
    query = dev_conversations()[0].qa[0].question
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        specs, saved, built = {}, {}, {}
        for store in STORES:
            data_dir = Path(scratch) / store
            config = MemoryConfig(
                data_dir=data_dir, database_url=url if store == "postgres" else None, faiss_use_gpu="never"
            )
            directory = config.space_dir(COLD_USER, "default_assistant_profile")
            started = time.perf_counter()
            build_cold_space(directory, config, args.cold_pages, args.cold_dim)
            built[store] = round(time.perf_counter() - started, 1)
            saved[store] = Path(scratch) / f"{store}-snapshot"
            saved[store].mkdir()
            for path in snapshot_files(directory):
                shutil.copy2(path, saved[store] / path.name)
            specs[store] = {
                "directory": str(directory),
                "data_dir": str(data_dir),
                "database_url": url if store == "postgres" else None,
                "model": COLD_MODEL,
                "dim": args.cold_dim,
                "query": query,
            }
        vacuum_s = vacuumed(url)
        compiled = compiled_package()
        names = {store: sorted(path.name for path in saved[store].iterdir()) for store in STORES}
        for run, store in interleaved(args.cold_runs):
            directory = Path(specs[store]["directory"])
            for case in ("snapshot", "no_snapshot"):
                for path in snapshot_files(directory):
                    path.unlink()
                if case == "snapshot":
                    for path in saved[store].iterdir():
                        shutil.copy2(path, directory / path.name)
                if store == "postgres":
                    server.restart()
                row = {"run": run, "store": store, "case": case, **cold_child(specs[store])}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    medians_by_case = {
        case: {
            store: {
                key: round(
                    statistics.median(r[key] for r in rows if r["store"] == store and r["case"] == case), 4
                )
                for key in (
                    "start_to_answer_s",
                    "open_to_answer_s",
                    "imports_s",
                    "open_s",
                    "first_retrieve_s",
                )
            }
            for store in STORES
        }
        for case in ("snapshot", "no_snapshot")
    }
    return {
        "pages": args.cold_pages,
        "dim": args.cold_dim,
        "runs": args.cold_runs,
        "build_s": built,
        "vacuum_analyze_s": vacuum_s,
        "bytecode_compiled": compiled,
        "snapshot_files": names,
        "rows": rows,
        "medians": medians_by_case,
        "targets_s": COLD_TARGETS_S,
        "verdicts": {
            case: verdict(
                medians_by_case[case]["postgres"]["start_to_answer_s"], target, higher_is_better=False
            )
            for case, target in COLD_TARGETS_S.items()
        },
    }


# --- 4. recall ----------------------------------------------------------------------------------------
def recall_bench(server: Any, args: argparse.Namespace) -> dict[str, Any]:
    from pydantic import SecretStr

    from bench.corpus import dev_conversations
    from memoryos.config import MemoryConfig
    from memoryos.embedding.shared import shared_embedder
    from memoryos.eval.harness import evaluate_conversation

    config = MemoryConfig(torch_threads=1)  # as bench/__main__.py runs bench/quality/recall.py
    model = shared_embedder(config)
    model.encode(["warm up the query encoder"], is_query=True)
    wanted = args.recall_conversations.split(",")
    conversations = [c for c in dev_conversations() if c.sample_id in wanted]
    rows = []
    for conversation in conversations:
        row: dict[str, Any] = {"sample_id": conversation.sample_id}
        for store in STORES:
            database = (
                SecretStr(server.create_database(f"recall_{conversation.sample_id.replace('-', '_')}"))
                if store == "postgres"
                else None
            )  # model_copy does not validate: the URL goes in as the config keeps it
            with tempfile.TemporaryDirectory() as scratch:
                started = time.perf_counter()
                result = evaluate_conversation(
                    conversation,
                    Path(scratch),
                    config.model_copy(update={"database_url": database}),
                    embedder=model,
                )
            row[store] = {k: round(v, 4) for k, v in result.recall.overall.items()}
            row[f"{store}_exact"] = result.recall.overall
            row[f"{store}_s"] = round(time.perf_counter() - started, 1)
            row["questions"] = result.recall.question_count
        row["equal"] = recall_equal(row.pop("sqlite_exact"), row.pop("postgres_exact"))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"model": model.name, "conversations": rows, "all_equal": all(r["equal"] for r in rows)}


# --- the command --------------------------------------------------------------------------------------
BENCHES: dict[str, Callable[[Any, argparse.Namespace], dict[str, Any]]] = {
    "apply": apply_bench,
    "retrieve": retrieve_bench,
    "cold-open": cold_open_bench,
    "recall": recall_bench,
}
REPORT_KEYS = {"apply": "apply", "retrieve": "retrieve", "cold-open": "cold_open", "recall": "recall"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=[*BENCHES, "all"], default="all")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", type=int, default=3, help="apply: interleaved runs per store")
    parser.add_argument("--seconds", type=float, default=30.0, help="apply: how long the queue is kept full")
    parser.add_argument("--processes", type=int, default=1, help="apply: worker processes")
    parser.add_argument("--users", type=int, default=100, help="apply: new users per round")
    parser.add_argument("--turns", type=int, default=20, help="apply: exchanges per user")
    parser.add_argument("--shards", type=int, default=64, help="apply: MEMORYOS_SHARD_COUNT")
    parser.add_argument(
        "--write-run", type=int, default=64, help="apply: writes of a space in one transaction"
    )
    parser.add_argument("--pages", type=int, default=400, help="retrieve: pages in the space")
    parser.add_argument("--queries", type=int, default=200, help="retrieve: timed questions per store")
    parser.add_argument("--cold-pages", type=int, default=10_000, help="cold-open: pages in the space")
    parser.add_argument("--cold-dim", type=int, default=1024, help="cold-open: vector dimension")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold-open: runs per store and case")
    parser.add_argument(
        "--recall-conversations", default="conv-30", help="recall: comma-separated LoCoMo sample ids (dev)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    from tests.support.postgres_server import running_postgres

    chosen = list(BENCHES) if args.only == "all" else [args.only]
    report: dict[str, Any] = {}
    from tests.support.postgres_server import postgres_bin_dir

    bin_dir = postgres_bin_dir()
    settings = STATEMENT_STATS if bin_dir is not None and statement_stats_available(bin_dir) else None
    with running_postgres(settings=settings) as server, tempfile.TemporaryDirectory() as scratch:
        report["durability"] = {
            "postgres": postgres_durability(server.url),
            "sqlite": sqlite_durability(Path(scratch)),
        }
        print("durability: " + json.dumps(report["durability"]), file=sys.stderr, flush=True)
        for name in chosen:
            report[REPORT_KEYS[name]] = BENCHES[name](server, args)
    emit({"storage": report}, args.out)
    print("\n".join(summary_lines(report)))


if __name__ == "__main__":
    main()
