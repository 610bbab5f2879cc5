"""The worker as a process: settings from flags and `MEMORYOS_*` variables, SIGTERM and SIGINT as drain;
with `--processes N` (`MEMORYOS_WORKER_PROCESSES`), N of them under a supervisor (`processes.py`)."""

import argparse
import gc
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from memoryos.cli.session import config_of
from memoryos.scheduler import shared_scheduler
from services.allocator import fix_mmap_threshold
from services.queue.settings import QueueSettings, redacted_url
from services.worker.main import Worker
from services.worker.metrics import WorkerCollector
from services.worker.processes import supervise

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


def run_worker_process(args: argparse.Namespace, parts: PartsFactory | None = None) -> None:
    """`memoryos worker`: run until SIGTERM/SIGINT, then drain (`Worker.run`); one process, or
    `worker_processes` children under a supervisor."""
    settings = _settings(args)
    if settings.worker_processes == 1:
        _serve(args, settings, parts() if parts else {})
        return
    print(
        f"memoryos worker: {settings.worker_processes} processes from {redacted_url(settings.redis_url)}",
        flush=True,
    )
    supervise(settings.worker_processes, _child, args, parts, _stop_on_signals())


def _child(args: argparse.Namespace, index: int, parts: PartsFactory | None) -> None:
    """Child `index` of a supervised set: its own metrics port and worker id, and its share of the cores
    for torch (each child would otherwise start one thread per core) and for the tokenizer (its thread
    pool takes every core in each child; the children already tokenize in parallel)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    settings = _settings(args)
    torch_threads = max(1, (os.cpu_count() or 1) // settings.worker_processes)
    port = settings.worker_metrics_port and settings.worker_metrics_port + index  # 0 stays off
    child_args = argparse.Namespace(**vars(args))
    if args.worker_id:
        child_args.worker_id = f"{args.worker_id}-{index}"
    child = settings.model_copy(update={"worker_metrics_port": port})
    _serve(child_args, child, parts() if parts else {}, torch_threads)


def _serve(
    args: argparse.Namespace,
    settings: QueueSettings,
    parts: dict[str, Any],
    torch_threads: int | None = None,
) -> None:
    """One worker until SIGTERM/SIGINT. `torch_threads`: the default when none is configured."""
    fix_mmap_threshold(settings.worker_mmap_threshold_kb * 1024)  # before any space is opened
    stop = _stop_on_signals()
    config = config_of(args)
    if torch_threads is not None and config.torch_threads is None:
        config = config.model_copy(update={"torch_threads": torch_threads})
    worker = Worker(settings, config, worker_id=args.worker_id, **parts)
    if settings.worker_metrics_port:
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker, shared_scheduler(worker.spaces.config)))
        start_http_server(settings.worker_metrics_port, registry=registry)
    worker.spaces.warm_up()
    gc.freeze()  # the model and runtime live as long as the worker: kept out of full collections' walks
    print(
        f"memoryos worker {worker.worker_id}: serving shards from {redacted_url(settings.redis_url)}",
        flush=True,
    )
    worker.run(stop)
