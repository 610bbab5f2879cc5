"""The worker as a process: settings from flags and `MEMORYOS_*` variables, SIGTERM and SIGINT as drain."""

import argparse
import signal
import threading

from memoryos.cli_session import config_of
from services.queue.settings import QueueSettings
from services.worker.main import Worker


def run_worker_process(args: argparse.Namespace) -> None:
    """`memoryos worker`: run until SIGTERM/SIGINT, then drain (`Worker.run`)."""
    overrides = {"redis_url": args.redis_url} if args.redis_url else {}
    settings = QueueSettings(**overrides)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    worker = Worker(settings, config_of(args), worker_id=args.worker_id)
    worker.spaces.warm_up()
    print(f"memoryos worker {worker.worker_id}: serving shards from {settings.redis_url}", flush=True)
    worker.run(stop)
