"""The worker as a process: settings from flags and `MEMORYOS_*` variables, SIGTERM and SIGINT as drain."""

import argparse
import gc
import signal
import threading

from prometheus_client import CollectorRegistry, start_http_server

from memoryos.cli_session import config_of
from memoryos.scheduler import shared_scheduler
from services.allocator import fix_mmap_threshold
from services.queue.settings import QueueSettings, redacted_url
from services.worker.main import Worker
from services.worker.metrics import WorkerCollector


def run_worker_process(args: argparse.Namespace) -> None:
    """`memoryos worker`: run until SIGTERM/SIGINT, then drain (`Worker.run`)."""
    overrides = {"redis_url": args.redis_url} if args.redis_url else {}
    settings = QueueSettings(**overrides)
    fix_mmap_threshold(settings.worker_mmap_threshold_kb * 1024)  # before any space is opened
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    config = config_of(args)
    worker = Worker(settings, config, worker_id=args.worker_id)
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
