"""The worker as a process: settings from flags and `MEMORYOS_*` variables, SIGTERM and SIGINT as drain;
with `--processes N` (`MEMORYOS_WORKER_PROCESSES`), N of them under a supervisor (`processes.py`). What
is checked at start, each refused in one line: the store (`unsafe_store`), the ports (`taken_port`), the
memory the container's limit leaves the open spaces (`memory_budget.py`)."""

import argparse
import errno
import gc
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from memoryos import MemoryConfig
from memoryos.cli.embedding_engine import serve_engine
from memoryos.cli.session import config_of
from memoryos.embedding.device import gpu_may_be_present, no_gpu_for
from memoryos.embedding.engine.client import EngineEmbedder
from memoryos.embedding.engine.health import EngineWatch
from memoryos.errors import InvalidInputError
from memoryos.portability.database_move import unmoved_spaces
from memoryos.scheduler import shared_scheduler
from memoryos.storage.network_fs import filesystem_type, is_network_fs
from memoryos.storage.records.factory import database_url, record_store_exists, uses_database
from memoryos.tracing import configure_tracing, flush_spans
from services.allocator import fix_mmap_threshold
from services.queue.settings import QueueSettings, redacted_url
from services.worker.health import serving, serving_health
from services.worker.main import Worker
from services.worker.memory_budget import MemoryBudget, memory_budget
from services.worker.metrics import WorkerCollector
from services.worker.processes import ChildKeepsFailingError, ChildSpec, Supervision, Supervisor

ENGINE_START_TIMEOUT_S = 600.0
"""How long a worker child waits for the embedding engine's first answer before it takes shards: a large
model's first load from a cold disk."""
WORKER_SERVICE_NAME = "memoryos-worker"
"""A worker process's `service.name` in traces (the supervisor and each applying child), unless
`OTEL_SERVICE_NAME` names another."""
ENGINE_SERVICE_NAME = "memoryos-embedding-engine"
PartsFactory = Callable[[], dict[str, Any]]
"""Builds the parts injected into every space of a worker (an embedder, an LLM): a benchmark's instant
embedder. A module-level callable, so that a spawned child can import it."""


def _settings(args: argparse.Namespace) -> QueueSettings:
    overrides: dict[str, Any] = {"redis_url": args.redis_url} if args.redis_url else {}
    if args.processes is not None:
        overrides["worker_processes"] = args.processes
    return QueueSettings(**overrides)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def runs_embedding_engine(settings: QueueSettings, config: MemoryConfig) -> bool:
    """Whether this worker starts the host's embedding engine: as configured (`worker_embedding_engine`;
    unset, when several applying processes would each load the model), and never when an engine runs
    apart (`embedding_engine_socket`) or an embeddings server embeds (`embedding_api_base_url`)."""
    wanted = settings.worker_embedding_engine
    if wanted is None:
        wanted = settings.worker_processes > 1
    return wanted and config.embedding_engine_socket is None and config.embedding_api_base_url is None


def run_worker_process(args: argparse.Namespace, parts: PartsFactory | None = None) -> None:
    """`memoryos worker`: run until SIGTERM/SIGINT, then drain (`Worker.run`); one process, or
    `worker_processes` children under a supervisor, with an embedding engine child where it is on.
    Tracing is turned on first where the `OTEL_*` variables ask (a bad one is refused in one line before
    anything starts), and again in each child, which is a process of its own."""
    configure_tracing(WORKER_SERVICE_NAME)
    try:
        refusal = unsafe_store(config_of(args))
    except InvalidInputError as error:  # a database URL libpq cannot read: one line, never the URL
        raise SystemExit(f"memoryos worker: {error}") from None
    if refusal is not None:
        raise SystemExit(f"memoryos worker: {refusal}")
    settings = _settings(args)
    taken = taken_port(settings)
    if taken is not None:
        raise SystemExit(f"memoryos worker: {taken}")
    engine_on = runs_embedding_engine(settings, config_of(args))
    try:
        budget = memory_budget(settings, engine_on)
    except ValueError as error:
        raise SystemExit(f"memoryos worker: {error}") from None
    settings = settings.model_copy(update={"worker_memory_budget_mb": budget.per_process_mb})
    if settings.worker_processes == 1 and not engine_on:
        _serve(args, settings, parts() if parts else {}, budget)
        return
    print(
        f"memoryos worker: {settings.worker_processes} processes"
        + (" and an embedding engine" if engine_on else "")
        + f" from {redacted_url(settings.redis_url)}; {budget}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="memoryos-engine-") as socket_dir:  # 0700: only this user
        socket_path = Path(socket_dir) / "engine.sock" if engine_on else None
        workers = [
            ChildSpec(
                f"memoryos-worker-{index}",
                _child,
                (args, index, parts, socket_path, budget),
                _metrics_port(settings, index),
            )
            for index in range(settings.worker_processes)
        ]
        engine = ChildSpec("memoryos-embedding-engine", _engine_child, (args, socket_path, parts))
        supervision = Supervision(
            max_failures=settings.worker_max_child_failures,
            failure_window_s=settings.worker_child_failure_window_s,
        )
        watch = EngineWatch(socket_path, config_of(args).embedding_engine_stall_s) if socket_path else None
        supervisor = Supervisor(workers, engine if socket_path else None, supervision, watch)
        stop = _stop_on_signals()
        with serving_health(
            settings.worker_health_port, supervisor.liveness, supervisor.readiness, supervisor.metrics
        ):
            try:
                supervisor.run(stop)
            except ChildKeepsFailingError as error:
                print(f"memoryos worker: {error}", file=sys.stderr, flush=True)
                raise SystemExit(1) from None


def unsafe_store(config: MemoryConfig) -> str | None:
    """Why this worker must not start on its store, or None: SQLite files on a network file system
    (`memoryos/storage/network_fs.py`), which SQLite's locks do not cover across hosts; or, with a
    database, spaces still in the data directory's files, which a worker serving from the database
    would not see (and a forget would not erase)."""
    if uses_database(config):
        database_url(config)  # a URL libpq cannot read is refused here, in one line
        unmoved = unmoved_spaces(
            config.data_dir, lambda space: record_store_exists(config, config.data_dir.joinpath(*space))
        )
        if not unmoved:
            return None
        return (
            f"{len(unmoved)} memory space(s) in {config.data_dir} were never moved into the database; stop "
            "the workers and run `memoryos move-to-database --data-dir DIR --database-url URL` first"
        )
    fstype = filesystem_type(config.data_dir)
    if not is_network_fs(fstype):
        return None
    return (
        f"the data directory {config.data_dir} is on a network file system ({fstype}), where SQLite's "
        "per-space files are not safe across hosts; set MEMORYOS_DATABASE_URL (or --database-url) to keep "
        "the spaces in PostgreSQL"
    )


def taken_port(settings: QueueSettings) -> str | None:
    """Why this worker cannot listen where it is configured to, or None: a port it serves on (the health
    port, each process's metrics port) already taken on this host, said with the setting that moves it.
    A second `memoryos worker` on a host, started with the defaults, used to die with `error: address
    already in use`, naming neither. Asked before any process starts, so the line comes once."""
    wanted = [(settings.worker_health_port, "worker_health_port", "")]
    wanted += [
        (_metrics_port(settings, index), "worker_metrics_port", f" + {index}" if index else "")
        for index in range(settings.worker_processes)
    ]
    for port, setting, offset in wanted:
        if port and not _port_free(port):
            return port_in_use(port, setting, offset)
    return None


def port_in_use(port: int, setting: str, offset: str = "") -> str:
    """The one line for `port` found taken: which setting gave it, and how to move it."""
    return (
        f"port {port} ({setting}{offset}) is already in use on this host, by another `memoryos worker` or "
        f"another program; set MEMORYOS_{setting.upper()} to a free port (0: not served)"
    )


def _port_free(port: int) -> bool:
    """Whether a server could listen on `port` of every address now, as the worker's do (address reuse
    on, so a port in TIME_WAIT after a restart counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def worker_faiss(config: MemoryConfig, settings: QueueSettings) -> MemoryConfig:
    """The engine settings of one of `settings.worker_processes` worker processes: with several, faiss
    stays in RAM unless `MEMORYOS_FAISS_USE_GPU` is set. On a GPU each process would hold a CUDA context,
    faiss's scratch reservation and pinned host memory of its own (docs/deploy.md, Sizing), beside the
    engine that holds the model: the pod's GPU and memory limit were sized for the model once."""
    if settings.worker_processes > 1 and "faiss_use_gpu" not in config.model_fields_set:
        return config.model_copy(update={"faiss_use_gpu": "never"})
    return config


def _metrics_port(settings: QueueSettings, index: int) -> int:
    """Child `index`'s metrics port: the configured one + index (0 stays off)."""
    return settings.worker_metrics_port and settings.worker_metrics_port + index


def engine_threads(cpu_count: int | None, applying_processes: int) -> int:
    """The embedding engine's model threads when `torch_threads` is not set: the cores the applying
    processes leave free, at least one. An applying process is one interpreter lock, so about one core,
    and it embeds nothing itself with the engine on; the engine is the host's only model, so it takes the
    rest, not the per-process cap of 4 (`MAX_AUTO_TORCH_THREADS`, set against several processes each
    loading a model): a 16-core host with 8 processes embedded on 4 threads."""
    return max(1, (cpu_count or 1) - applying_processes)


def _engine_child(args: argparse.Namespace, socket_path: Path, parts: PartsFactory | None) -> None:
    """The host's embedding engine: the configured model, or the embedder of `parts` (a benchmark's), on
    the cores the applying processes leave free (`engine_threads`) unless `torch_threads` is set. A model
    that cannot load here (`no_gpu_for`) exits 1 at once, in one line, before torch is imported."""
    configure_tracing(ENGINE_SERVICE_NAME)
    stop = _stop_on_signals()
    embedder = (parts() if parts else {}).get("embedder")
    config = config_of(args)
    refusal = (
        None
        if embedder is not None
        else no_gpu_for(config.embedding_device, config.embedding_model_kwargs, gpu_may_be_present())
    )
    if refusal is not None:
        raise SystemExit(f"memoryos embedding-engine: {refusal}")  # exit status 1, the line on stderr
    if config.torch_threads is None:
        threads = engine_threads(os.cpu_count(), _settings(args).worker_processes)
        config = config.model_copy(update={"torch_threads": threads})
    serve_engine(config, socket_path, stop, embedder)


def _child(
    args: argparse.Namespace,
    index: int,
    parts: PartsFactory | None,
    engine_socket: Path | None,
    budget: MemoryBudget,
) -> None:
    """Child `index` of a supervised set: its own metrics port and worker id, its share of the memory
    (`budget`, reckoned once by the parent), and its share of the cores for torch (each child
    would otherwise start one thread per core) and for the tokenizer (its thread pool takes every core in
    each child; the children already tokenize in parallel). With `engine_socket`, it embeds through the
    engine (the injected embedder is the engine's) and waits for the engine's first start before it
    takes shards."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    configure_tracing(WORKER_SERVICE_NAME)  # spawned: nothing of the parent's provider came along
    settings = _settings(args)
    torch_threads = max(1, (os.cpu_count() or 1) // settings.worker_processes)
    child_args = argparse.Namespace(**vars(args))
    if args.worker_id:
        child_args.worker_id = f"{args.worker_id}-{index}"
    child = settings.model_copy(
        update={
            "worker_metrics_port": _metrics_port(settings, index),
            "worker_health_port": 0,  # the parent answers the probes for all
            "worker_memory_budget_mb": budget.per_process_mb,
        }
    )
    child_parts = parts() if parts else {}
    if engine_socket is not None:
        child_parts.pop("embedder", None)
        waiting = EngineEmbedder(engine_socket, timeout_s=ENGINE_START_TIMEOUT_S)
        waiting.wait_ready()
        waiting.close()
    _serve(child_args, child, child_parts, budget, torch_threads, engine_socket)


def _serve(
    args: argparse.Namespace,
    settings: QueueSettings,
    parts: dict[str, Any],
    budget: MemoryBudget,
    torch_threads: int | None = None,
    engine_socket: Path | None = None,
) -> None:
    """One worker until SIGTERM/SIGINT, its open spaces within `budget` (said in its first line).
    `torch_threads`: the default when none is configured; `engine_socket`: the embedding engine's, when
    this worker loads no model. Its metrics are served on the metrics port and, as they are
    (no `worker_process` label), on the health port: a scrape moved from 9400 to 9399 keeps the series a
    one-process worker's dashboards and HPA already know."""
    fix_mmap_threshold(settings.worker_mmap_threshold_kb * 1024)  # before any space is opened
    stop = _stop_on_signals()
    config = worker_faiss(config_of(args), settings)
    if engine_socket is not None:
        config = config.model_copy(update={"embedding_engine_socket": engine_socket})
    if torch_threads is not None and config.torch_threads is None:
        config = config.model_copy(update={"torch_threads": torch_threads})
    worker = Worker(settings, config, worker_id=args.worker_id, **parts)
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker, shared_scheduler(worker.spaces.config)))
    if settings.worker_metrics_port:
        try:
            start_http_server(settings.worker_metrics_port, registry=registry)
        except OSError as error:  # taken since the check at start
            if error.errno != errno.EADDRINUSE:
                raise
            taken = port_in_use(settings.worker_metrics_port, "worker_metrics_port")
            raise SystemExit(f"memoryos worker: {taken}") from None
    worker.spaces.warm_up()
    gc.freeze()  # the model and runtime live as long as the worker: kept out of full collections' walks
    # One write with its newline (`end=""`): the other worker processes and the embedding engine print
    # into the same pipe at the same moment, and unbuffered (PYTHONUNBUFFERED, as the images run) print's
    # two writes interleave: a test read one process's line with the other's newline after it.
    print(
        f"memoryos worker {worker.worker_id}: serving shards from {redacted_url(settings.redis_url)}; {budget}\n",
        end="",
        flush=True,
    )
    # one process: alive and ready while it answers, which it does once it serves
    answering = serving("worker")
    try:
        with serving_health(
            settings.worker_health_port, answering, answering, partial(generate_latest, registry)
        ):
            worker.run(stop)
    finally:
        flush_spans()  # the drain's last spans, before the process goes
