"""Ingest as deployed: `memoryos worker` processes applying a queue that never runs dry, for `--seconds`.

Earlier service benches timed one burst (100 users × 20 turns) through a worker in a thread of the bench,
which shared one interpreter lock with the bench's 100 writer threads and its searchability poller; at
the target rates such a burst ends inside one poll. Here, as deployed:

- the worker is the real `memoryos worker` (`--processes N`: the real supervisor and N children), or
  `bench.serving.instant_worker` — the same code with the tests' hash embedder in place of the model, which leaves
  the worker's applying alone (Redis, the engine's transactions, the scheduler); with `--engine on` (the
  worker's default for `--processes` > 1) the model, or the hash embedder, runs in one embedding engine
  process beside them (memoryos/embedding/engine/), whose CPU counts with theirs;
- the writes are queued before the clock starts: the workers, once they own every shard, are stopped
  (SIGSTOP), a round is queued, and the clock starts as they are let go (SIGCONT);
- a round is `--users` new users writing `--turns` exchanges each (distinct LoCoMo texts: the embedding
  cache never answers), queued a turn of every user at a time; a feeder keeps about two seconds of work
  (at the rate so far) waiting for its vectors, until `--seconds` have passed; the clock stops when every write has applied and the last write of each
  user of the last round, and of the last user of every round, is searchable;
- the workers' CPU seconds (every process of the tree, from /proc) are divided by the turns applied;
- then the bench waits for the workers to go idle (the consolidation trailing the searchable pages) and
  reports that too: `settled_s`, `turns_per_s_settled`, `worker_cpu_ms_per_turn_settled`, and the pages
  short-term memory still held beyond its capacity (`short_term_backlog_settled`, read from the stores) —
  a setting that defers consolidation looks faster until it is counted;
- `--profile FILE` records the worker processes with py-spy (raw collapsed stacks, one line per thread
  and stack) for the length of the run;
- with the embedding engine, its counters over the run (asked on the socket its start line names on the
  worker's stdout, before the clock and once the last write is searchable): `engine_texts_per_s` and
  `engine_tokens_per_s` per second inside the model's `encode` (tokens as the engine estimates them,
  characters / 4 + 2), `engine_batches`, `engine_mean_batch`, and `engine_encode_share`, the share of the
  run the engine spent encoding;
- where `nvidia-smi` exists, the first GPU's busy share sampled every 200 ms from the clock's start to
  the last write searchable (`gpu_busy_percent_mean`: nvidia-smi's utilization, the share of each sample
  period in which a kernel ran).

With a model, the same model's raw sentence-transformers `encode` on the same page texts is measured after
the ingest in this process (`bench.serving.service.raw_model_rows`: per batch of the engine's size, and all in one
call at its best batch size), and the ingest is given as a share of each; with the engine, the tokenizer's
count over the engine's estimate on those texts (`real_over_estimated_tokens`) and the engine's rate in
real tokens (`engine_real_tokens_per_s`), comparable with `python -m bench.gpu.forward`'s ceiling.

    python -m bench.serving.ingest [--users 100 --turns 20] [--processes 1] [--seconds 30] [--instant-embedder]
        [--engine auto|on|off]
        [--model NAME|PATH] [--device auto|cpu|cuda] [--speed-only] [--write-run 64] [--shards 64]
        [--raw-texts 2000] [--worker-env MEMORYOS_NAME=VALUE ...] [--profile FILE] [--store sqlite|postgres]
        [--out FILE]

`--store postgres` starts a PostgreSQL (tests/support/postgres_server.py, fsync on) and gives the workers
MEMORYOS_DATABASE_URL; `python -m bench.storage.postgres --only apply` runs both stores interleaved.

`--speed-only` lets the workers load a model directory marked as random weights (`python -m
bench.gpu.models save`): the bge-m3-sized and Qwen3-0.6B-sized stand-ins, whose vectors mean nothing and
which the engine otherwise refuses to store with.
"""

import argparse
import logging
import os
import re
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from bench.corpus import dev_conversations, exchanges, page_texts
from bench.gpu.embedding import count_tokens
from bench.gpu.forward import real_over_estimated
from bench.gpu.models import load_named_model, parse_model_spec
from bench.output import emit
from memoryos.config import MemoryConfig
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.eval.locomo import LocomoConversation
from memoryos.space.layout import STORE_FILE
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import plan_write
from services.queue.connection import connect
from services.queue.keys import Keys
from services.queue.owner_calls import OwnerCallClient, OwnerUnavailableError
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import WRITE_STATUS
from tests.support.postgres_server import running_postgres
from tests.support.redis_server import running_redis

SEARCHABLE_POLL_S = 0.2
"""How often the bench asks whether a user's last write is searchable. Each answer is a read a worker
serves: asked every 20 ms, as before 2026-11-27, the polling took about a tenth of a core from the worker
it measures."""
FEED_CHECK_S = 0.1
"""How often the feeder looks at the backlog."""
BACKLOG_S = 2.0
"""Seconds of work (at the rate so far) the feeder keeps waiting for the workers."""
PIPELINE_WRITES = 500
"""Writes the feeder sends to Redis in one round trip."""
READY_TIMEOUT_S = 300.0
"""Longest wait for the workers to load their model and divide the shards."""
SETTLE_IDLE_CORES = 0.05
"""The workers count as settled once each uses less than this share of a core (on average) over
`SETTLE_WINDOW_S`: the consolidation that trails the searchable pages (chains, topics, promotion) is done."""
SETTLE_WINDOW_S = 1.0
SETTLE_TIMEOUT_S = 120.0
"""Longest wait for the workers to settle after the last write is searchable."""
ENGINE_LINE = re.compile(rb"memoryos embedding-engine \d+: serving .* on (\S+)")
"""The engine child's start line on the worker's stdout: its socket, where the bench asks for `stats`."""
ENGINE_LINE_TIMEOUT_S = 30.0
"""Longest wait for the engine's start line once every applying process serves (they serve only after the
engine answers, so the line is already written or about to be)."""
GPU_SAMPLE_MS = 200
"""How often nvidia-smi samples the GPU's busy share during the run."""


def searchable(reads: OwnerCallClient, key: SpaceKey, write_id: str) -> bool:
    """Whether the write is searchable; False while the owner is still applying the backlog before it
    (no answer within the read timeout: the API's 503, retried)."""
    try:
        return bool(getattr(reads.ask(key, WRITE_STATUS, {"write_id": write_id}), "searchable", False))
    except OwnerUnavailableError:
        return False


def descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc: a spawned child's parent is the supervisor)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # exited meanwhile
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (/proc/PID/stat, fields 14 and 15)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def short_term_backlog(data_dir: Path, capacity: int, database_url: str | None = None) -> int:
    """Pages still in short-term memory beyond `capacity`, summed over every space stored under
    `data_dir` (or, with `database_url`, in that database): what consolidation had not yet moved into
    mid-term memory."""
    if database_url:
        import psycopg

        with psycopg.connect(database_url) as db:
            rows = db.execute("SELECT COUNT(*) FROM pages WHERE tier = 'stm' GROUP BY space_id").fetchall()
        return sum(max(0, count - capacity) for (count,) in rows)
    backlog = 0
    for store in data_dir.rglob(STORE_FILE):
        with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
            (short_term,) = db.execute("SELECT COUNT(*) FROM pages WHERE tier = 'stm'").fetchone()
        backlog += max(0, short_term - capacity)
    return backlog


def short_term_capacity(env: dict[str, str]) -> int:
    """The workers' short-term capacity: their environment's setting, else the engine's default."""
    default = MemoryConfig.model_fields["short_term_capacity"].default
    return int(env.get("MEMORYOS_SHORT_TERM_CAPACITY", default))


def free_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports (child i serves metrics on first + i)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports")


@dataclass
class WorkerTree:
    """The `memoryos worker` process started for the bench, and what it spawned."""

    process: "subprocess.Popen[bytes]"
    metrics_ports: list[int]
    log: Path
    engine_socket: Path | None = None
    """The embedding engine's socket, when the worker started one."""

    def pids(self) -> list[int]:
        return [self.process.pid, *descendants(self.process.pid)]

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pids())

    def signal(self, signum: int) -> None:
        for pid in self.pids():
            with suppress(ProcessLookupError):
                os.kill(pid, signum)

    def batch_figures(self) -> tuple[int, int]:
        """(batches, texts) the workers' embedding batchers encoded, summed over their /metrics."""
        batches = texts = 0.0
        for port in self.metrics_ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                families = text_string_to_metric_families(answer.read().decode())
            value = {sample.name: sample.value for family in families for sample in family.samples}
            batches += value.get("memoryos_embed_batches_total", 0.0)
            texts += value.get("memoryos_embed_texts_total", 0.0)
        return int(batches), int(texts)

    def engine_stats(self) -> dict[str, Any]:
        """The embedding engine's counters (`EngineStats.as_dict`); empty without an engine."""
        if self.engine_socket is None:
            return {}
        engine = EngineEmbedder(self.engine_socket, timeout_s=30.0)
        try:
            return engine.stats()
        finally:
            engine.close()


def worker_environment(
    settings: QueueSettings, data_dir: Path, model: str, device: str, speed_only: bool, metrics_port: int
) -> dict[str, str]:
    """The workers' settings as a deployment gives them: `MEMORYOS_*` variables; never a real LLM."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEMORYOS_")}
    return env | {
        "MEMORYOS_DATA_DIR": str(data_dir),
        "MEMORYOS_REDIS_URL": settings.redis_url,
        "MEMORYOS_SHARD_COUNT": str(settings.shard_count),
        "MEMORYOS_WRITE_RUN": str(settings.write_run),
        "MEMORYOS_EMBEDDING_MODEL_NAME": model,
        "MEMORYOS_EMBEDDING_DEVICE": device,
        "MEMORYOS_EMBEDDING_SPEED_ONLY": "true" if speed_only else "false",
        "MEMORYOS_FAISS_USE_GPU": "auto",
        "MEMORYOS_WORKER_METRICS_PORT": str(metrics_port),
        "MEMORYOS_WORKER_HEALTH_PORT": "0",  # not asked here; its default 9399 may be taken
        "PYTHONUNBUFFERED": "1",
    }


def line_before(stream: IO[bytes], deadline: float) -> bytes:
    """The next line of an unbuffered pipe, or b"" at its end or once `deadline` has passed."""
    ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
    return stream.readline() if ready else b""


@contextmanager
def worker_processes(
    settings: QueueSettings, env: dict[str, str], processes: int, instant: bool, log: Path
) -> Iterator[WorkerTree]:
    """`memoryos worker --processes N` (or `bench.serving.instant_worker`), yielded once every child serves and
    the children own every shard between them; SIGTERM (drain) at the end."""
    module = ["bench.serving.instant_worker"] if instant else ["memoryos.cli.main", "worker"]
    command = [sys.executable, "-m", *module, "--worker-id", "bench", "--processes", str(processes)]
    first_port = int(env["MEMORYOS_WORKER_METRICS_PORT"])
    with log.open("wb") as log_file:
        # Unbuffered: `select` then tells whether a line is waiting (none sits in a reader's buffer).
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log_file, bufsize=0)
    tree = WorkerTree(process, [first_port + i for i in range(processes)], log)
    try:
        assert process.stdout is not None
        serving, engine_on = 0, False
        deadline = time.monotonic() + READY_TIMEOUT_S
        while serving < processes or (engine_on and tree.engine_socket is None):
            if serving == processes:
                deadline = min(deadline, time.monotonic() + ENGINE_LINE_TIMEOUT_S)
            line = line_before(process.stdout, deadline)
            if not line:
                raise RuntimeError(
                    f"the worker exited, or did not start its engine and serve; its log: {log}"
                )
            serving += b"serving shards" in line
            engine_on |= b"and an embedding engine" in line  # the supervisor's first line
            if match := ENGINE_LINE.search(line):
                tree.engine_socket = Path(match[1].decode())
        client, keys = connect(settings), Keys(settings.redis_namespace)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            owners = [client.get(keys.lease(shard)) for shard in range(settings.shard_count)]
            if None not in owners and len(set(owners)) == min(processes, settings.shard_count):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the workers did not divide the shards between them")
        yield tree
    finally:
        tree.signal(signal.SIGCONT)  # a stopped tree cannot drain
        process.terminate()
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            tree.signal(signal.SIGKILL)
            process.wait()


@dataclass
class Feeder:
    """Queues rounds of writes — `users` new users, `turns` exchanges each, each user's in order — a slice
    at a time: one turn of every user of the round (turn 0 of every user, then turn 1...), interleaved as
    concurrent clients' writes are."""

    settings: QueueSettings
    users: int
    turns: int
    conversations: list[LocomoConversation]
    slices: int = 0

    def __post_init__(self) -> None:
        self.client = connect(self.settings)
        self.queue = WriteQueue(self.client, self.settings)

    @property
    def queued(self) -> int:
        return self.slices * self.users

    def space(self, round_: int, user: int) -> SpaceKey:
        return SpaceKey("bench", f"r{round_}u{user}", "helper")

    def queue_slice(self) -> None:
        """Queue the next slice as the API would (the producer's own script), pipelined so that the feeder
        never starves the workers."""
        round_, turn = divmod(self.slices, self.turns)
        fill = exchanges(self.users, self.conversations, start=self.queued)  # every text distinct
        pipe = self.client.pipeline(transaction=False)
        for user, exchange in enumerate(fill):
            space = self.space(round_, user)
            op = plan_write([exchange], max_text_chars=20_000, at=time.time(), write_id=f"t{turn}")
            self.queue.enqueue_on(pipe, space, op)
            if len(pipe) >= PIPELINE_WRITES:
                pipe.execute()
        pipe.execute()
        self.slices += 1

    def to_wait_for(self) -> list[tuple[SpaceKey, str]]:
        """(space, write id) whose searchability ends the run: the last write of every user of the last
        round, and of the last user of every earlier round."""
        last_round, last_turn = divmod(self.slices - 1, self.turns)
        earlier = [(self.space(r, self.users - 1), f"t{self.turns - 1}") for r in range(last_round)]
        return earlier + [(self.space(last_round, u), f"t{last_turn}") for u in range(self.users)]


class GpuBusy:
    """`nvidia-smi` sampling the first GPU's utilization (the share of each sample period in which a
    kernel ran) every `GPU_SAMPLE_MS` into `out`, from construction to `finish`; nothing without it."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.process: subprocess.Popen[bytes] | None = None
        if shutil.which("nvidia-smi"):
            with out.open("wb") as samples:
                self.process = subprocess.Popen(
                    [
                        "nvidia-smi", "--id=0", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                        "-lms", str(GPU_SAMPLE_MS),
                    ],
                    stdout=samples,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip

    def finish(self) -> dict[str, Any]:
        """`gpu_busy_percent_mean` over the samples (None without nvidia-smi or samples)."""
        if self.process is None:
            return {"gpu_busy_percent_mean": None, "gpu_busy_samples": 0}
        self.process.terminate()
        self.process.wait(timeout=30)
        samples = [int(v) for v in self.out.read_text().split() if v.isdigit()]
        mean = round(sum(samples) / len(samples), 1) if samples else None
        return {"gpu_busy_percent_mean": mean, "gpu_busy_samples": len(samples)}


def engine_figures(before: dict[str, Any], after: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """The engine's rates over the run (`after` less `before`): texts and tokens (its tokenizer's) per
    second inside the model's forward pass, its batches, and the share of the run it spent encoding."""
    if not after:
        return {}
    ran = {key: after[key] - before.get(key, 0) for key in ("texts", "batches", "tokens", "encode_s")}
    encode_s = ran["encode_s"]
    return {
        "engine_texts_per_s": round(ran["texts"] / encode_s, 1) if encode_s else 0.0,
        "engine_tokens_per_s": round(ran["tokens"] / encode_s) if encode_s else 0,
        "engine_batches": ran["batches"],
        "engine_mean_batch": round(ran["texts"] / ran["batches"], 1) if ran["batches"] else 0.0,
        "engine_encode_share": round(encode_s / elapsed, 3),
        "engine_failures": after.get("failures", 0) - before.get("failures", 0),
    }


class Profile:
    """py-spy recording the worker tree for the run (`--subprocesses`: every child), raw collapsed stacks."""

    def __init__(self, root: int, out: Path, seconds: float) -> None:
        self.process = subprocess.Popen(
            [
                "py-spy", "record", "--pid", str(root), "--subprocesses", "--threads", "--nonblocking",
                "--rate", "100", "--format", "raw", "--output", str(out), "--duration", str(int(seconds)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def finish(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # py-spy writes what it has on Ctrl-C
        self.process.wait(timeout=60)


def run_ingest(
    settings: QueueSettings,
    env: dict[str, str],
    users: int,
    turns: int,
    processes: int,
    seconds: float,
    instant: bool,
    log: Path,
    profile: Path | None = None,
) -> dict[str, Any]:
    """One sustained ingest (module docstring); its figures."""
    feeder = Feeder(settings, users, turns, dev_conversations())
    with worker_processes(settings, env, processes, instant, log) as workers:
        engine_before = workers.engine_stats()  # before the stop: a stopped engine answers nothing
        workers.signal(signal.SIGSTOP)
        for _ in range(turns):  # a whole round queued before the clock
            feeder.queue_slice()
        cpu_before = workers.cpu_seconds()
        spy = Profile(workers.process.pid, profile, seconds + 30) if profile else None
        gpu = GpuBusy(log.with_name("gpu_busy.csv"))
        workers.signal(signal.SIGCONT)
        started = time.perf_counter()
        embedded, checked = 0, 0.0
        while (elapsed := time.perf_counter() - started) < seconds:
            # Keep about BACKLOG_S of work waiting for its vectors (not for its applying: a worker applies
            # ahead of its batcher), and at least two slices. The workers' /metrics are read at most every
            # FEED_CHECK_S: each read costs every worker a request on its interpreter lock.
            if elapsed - checked >= FEED_CHECK_S:
                embedded, checked = workers.batch_figures()[1], elapsed
            if feeder.queued - embedded < max(2 * users, BACKLOG_S * embedded / elapsed):
                feeder.queue_slice()
            else:
                time.sleep(FEED_CHECK_S / 4)
        fed_s = time.perf_counter() - started
        while WriteQueue(feeder.client, settings).depth():  # every write applied (entries leave once settled)
            time.sleep(FEED_CHECK_S)
        reads = OwnerCallClient(connect(settings), settings)
        for space, write_id in feeder.to_wait_for():
            while not searchable(reads, space, write_id):
                time.sleep(SEARCHABLE_POLL_S)
        elapsed = time.perf_counter() - started
        gpu_busy = gpu.finish()
        worker_cpu = workers.cpu_seconds() - cpu_before
        engine = engine_figures(engine_before, workers.engine_stats(), elapsed)
        settled_s, settled_cpu = settle(workers.cpu_seconds, processes)
        settled_cpu -= cpu_before
        if spy:
            spy.finish()
        batches, texts = workers.batch_figures()
    applied = feeder.queued
    return {
        "users_per_round": users,
        "turns_per_user": turns,
        "rounds": round(feeder.slices / turns, 2),
        "turns": applied,
        "worker_processes": processes,
        "shards": settings.shard_count,
        "write_run": settings.write_run,
        "embedder": "hash (instant)" if instant else env["MEMORYOS_EMBEDDING_MODEL_NAME"],
        "fed_s": round(fed_s, 1),
        "searchable_s": round(elapsed, 2),
        "turns_per_s": round(applied / elapsed, 1),
        "worker_cpu_s": round(worker_cpu, 1),
        "worker_cpu_ms_per_turn": round(1000 * worker_cpu / applied, 3),
        "worker_cores_busy": round(worker_cpu / elapsed, 2),
        "settled_s": round(settled_s, 1),
        "turns_per_s_settled": round(applied / (elapsed + settled_s), 1),
        "worker_cpu_ms_per_turn_settled": round(1000 * settled_cpu / applied, 3),
        "short_term_backlog_settled": short_term_backlog(
            Path(env["MEMORYOS_DATA_DIR"]), short_term_capacity(env), env.get("MEMORYOS_DATABASE_URL")
        ),
        "batches": batches,
        "mean_batch_size": round(texts / batches, 1) if batches else 0.0,
        **engine,
        **gpu_busy,
    }


def settle(cpu_seconds: Callable[[], float], processes: int = 1) -> tuple[float, float]:
    """Wait until the `processes` workers go idle (`SETTLE_IDLE_CORES` each) after the last write is
    searchable: the consolidation trailing the pages is part of a turn's cost. Seconds waited and the
    workers' CPU seconds then; a run that does not settle within `SETTLE_TIMEOUT_S` says so in the figures
    (its backlog)."""
    started = time.perf_counter()
    cpu = cpu_seconds()
    while time.perf_counter() - started < SETTLE_TIMEOUT_S:
        time.sleep(SETTLE_WINDOW_S)
        now = cpu_seconds()
        if now - cpu < processes * SETTLE_IDLE_CORES * SETTLE_WINDOW_S:
            return time.perf_counter() - started - SETTLE_WINDOW_S, now
        cpu = now
    return time.perf_counter() - started, cpu_seconds()


def run_from_args(
    args: argparse.Namespace, settings: QueueSettings, env: dict[str, str], log: Path
) -> dict[str, Any]:
    """`run_ingest` with a bench command's --users, --turns, --processes, --seconds, --instant-embedder and,
    where the command has it, --profile."""
    return run_ingest(
        settings,
        env,
        args.users,
        args.turns,
        args.processes,
        args.seconds,
        args.instant_embedder,
        log,
        getattr(args, "profile", None),
    )


def raw_model_rows(location: str, device: str, texts: list[str], engine_batch: int) -> list[dict[str, Any]]:
    """`raw_rows` of the model at `location`, loaded as the workers load it (fp16 on CUDA)."""
    return raw_rows(load_named_model(location, device), device, texts, engine_batch)


def raw_rows(model: Any, device: str, texts: list[str], engine_batch: int) -> list[dict[str, Any]]:
    """The bare sentence-transformers model on the same texts: batch 1 (the first 256), one call per
    `engine_batch` texts in arrival order (padded to each chunk's longest, as the batcher's batches are),
    and all texts in one call at several batch sizes (sorted by length: the best case)."""
    import torch

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def row(label: str, batch: int, subset: list[str], per_call: int) -> dict[str, Any]:
        tokens = count_tokens(model, subset)
        with torch.inference_mode():  # the shape's first call picks its kernels: not timed
            model.encode(subset[: min(batch, per_call)], batch_size=batch, show_progress_bar=False)
        sync()
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(subset), per_call):
                model.encode(subset[start : start + per_call], batch_size=batch, show_progress_bar=False)
        sync()
        seconds = time.perf_counter() - started
        return {
            "call": label,
            "batch_size": batch,
            "texts": len(subset),
            "texts_per_s": round(len(subset) / seconds, 1),
            "tokens_per_s": round(tokens / seconds),
        }

    model.encode(texts[:engine_batch], batch_size=engine_batch, show_progress_bar=False)  # warm-up
    rows = [
        row("batch 1", 1, texts[:256], 1),
        row(f"per {engine_batch} texts", engine_batch, texts, engine_batch),
    ]
    for batch in sorted({64, 256, 1024} - {engine_batch}):
        rows.append(row("all texts in one call", batch, texts, len(texts)))
    best = max(rows, key=lambda r: r["tokens_per_s"])
    return [{**r, "best": r is best} for r in rows]


def raw_shares(report: dict[str, Any], location: str, device: str, texts: list[str], batch: int) -> None:
    """Add the raw model's rates on the ingest's texts, and the ingest's share of them, to `report`; with
    the engine's figures, its tokenizer's count over the engine's estimate on these texts, and the engine's
    rate in real tokens (comparable with `bench.gpu.forward`'s ceiling)."""
    model = load_named_model(location, device)
    rows = raw_rows(model, device, texts, batch)
    if "engine_tokens_per_s" in report:
        ratio = real_over_estimated(model, texts)
        report["real_over_estimated_tokens"] = round(ratio, 3)
        report["engine_real_tokens_per_s"] = round(report["engine_tokens_per_s"] * ratio)
    per_batch = next(row for row in rows if row["call"].startswith("per "))
    best = next(row for row in rows if row["best"])
    report["raw_model"] = rows
    report["share_of_raw_per_batch"] = round(report["turns_per_s"] / per_batch["texts_per_s"], 3)
    report["share_of_raw_best"] = round(report["turns_per_s"] / best["texts_per_s"], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--users", type=int, default=100, help="new users per round")
    parser.add_argument("--turns", type=int, default=20, help="exchanges per user")
    parser.add_argument("--processes", type=int, default=1, help="worker processes (memoryos worker)")
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="how long the feeder keeps the queue full"
    )
    parser.add_argument("--instant-embedder", action="store_true", help="no model: applying alone")
    parser.add_argument(
        "--engine",
        choices=["auto", "on", "off"],
        default="auto",
        help="one embedding engine process embedding for every worker process (with --instant-embedder, "
        "the hash embedder runs in it); auto: the worker's default, on when --processes > 1",
    )
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="a name or a model directory")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--speed-only", action="store_true", help="accept a random-weight model directory")
    parser.add_argument("--write-run", type=int, default=64, help="writes of a space in one transaction")
    parser.add_argument("--shards", type=int, default=64, help="MEMORYOS_SHARD_COUNT")
    parser.add_argument("--raw-texts", type=int, default=2000, help="texts for the raw model rows (0: none)")
    parser.add_argument(
        "--max-embedding-lag",
        type=float,
        help="MEMORYOS_WORKER_MAX_EMBEDDING_LAG_S for the workers (default: the setting's own)",
    )
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="MEMORYOS_NAME=VALUE",
        help="a worker setting to try (repeatable); the bench's own MEMORYOS_* environment is not passed on",
    )
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the workers, written here")
    parser.add_argument(
        "--store",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="postgres: the workers keep their spaces in a PostgreSQL the bench starts (MEMORYOS_DATABASE_URL)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tried: dict[str, str] = {}
    for setting in args.worker_env:
        name, equals, value = setting.partition("=")
        if not name.startswith("MEMORYOS_") or not equals:
            parser.error(f"--worker-env must be MEMORYOS_NAME=VALUE, got {setting!r}")
        tried[name] = value
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for flag, value in (("--users", args.users), ("--turns", args.turns), ("--processes", args.processes)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    with (
        tempfile.TemporaryDirectory() as workdir,
        running_redis(Path(workdir) / "redis") as server,
        running_postgres() if args.store == "postgres" else nullcontext() as database,
    ):
        settings = QueueSettings(
            redis_url=server.url,
            shard_count=args.shards,
            write_run=args.write_run,
            queue_max_entries=10**9,
        )
        env = worker_environment(
            settings,
            Path(workdir) / "data",
            args.model,
            args.device,
            args.speed_only,
            free_ports(args.processes),
        )
        if args.max_embedding_lag is not None:
            env["MEMORYOS_WORKER_MAX_EMBEDDING_LAG_S"] = str(args.max_embedding_lag)
        if args.engine != "auto":
            env["MEMORYOS_WORKER_EMBEDDING_ENGINE"] = "true" if args.engine == "on" else "false"
        if database is not None:
            env["MEMORYOS_DATABASE_URL"] = database.url
        env |= tried
        log = Path(workdir) / "worker.log"
        try:
            report = run_from_args(args, settings, env, log) | {
                "worker_env": tried,
                "engine": args.engine,
                "store": args.store,
            }
        finally:
            if log.exists():  # the workers' last words, for a run that failed
                sys.stderr.write("".join(log.read_text(errors="replace").splitlines(True)[-20:]))
        if not args.instant_embedder and args.raw_texts:
            device = args.device if args.device != "auto" else _auto_device()
            location = parse_model_spec(args.model)[1]
            texts = page_texts(exchanges(args.raw_texts, dev_conversations()))
            raw_shares(report, location, device, texts, 64)
    emit({"ingest": report}, args.out)


def _auto_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    main()
