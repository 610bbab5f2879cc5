"""`memoryos embedding-engine --socket PATH`: the host's embedding model, loaded once and served to every
applying process of the host (memoryos/embedding/engine/). No FastAPI, no Redis: a model and a socket."""

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from memoryos.cli.lifecycle import Command
from memoryos.cli.session import config_of
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder

log = logging.getLogger(__name__)

STATS_LOG_EVERY_S = 60.0
"""How often the engine logs its counters (counts and rates only, never a text)."""


def serve_engine(
    config: MemoryConfig, socket_path: Path, stop: threading.Event, embedder: Embedder | None = None
) -> None:
    """Load the model (`embedder`, else the configured one), then serve it on `socket_path` until `stop`.
    The socket is created only once the model answers, so a client's hello means the engine is ready."""
    from memoryos.embedding.engine.server import EmbeddingEngine
    from memoryos.embedding.shared import shared_embedder

    model = embedder or shared_embedder(config.model_copy(update={"embedding_engine_socket": None}))
    model.encode(["warm up"])
    engine = EmbeddingEngine.from_config(model, socket_path, config)
    engine.start()
    # One write with its newline (`end=""`): the worker processes print their lines into the same pipe at
    # the same moment, and unbuffered (PYTHONUNBUFFERED, as the images run) print's two writes interleave.
    print(
        f"memoryos embedding-engine {os.getpid()}: serving {model.name} (dim {model.dim}) on {socket_path}\n",
        end="",
        flush=True,
    )
    try:
        while not stop.wait(STATS_LOG_EVERY_S):
            log.info("embedding engine: %s", engine.stats().as_dict())
    finally:
        engine.close()
        log.info("embedding engine stopped: %s", engine.stats().as_dict())


def cmd_embedding_engine(args: argparse.Namespace) -> None:
    """Serve until SIGTERM or SIGINT; the batch inside the model finishes first."""
    from memoryos.errors import InvalidInputError

    config = config_of(args)
    socket_path = args.socket or config.embedding_engine_socket
    if socket_path is None:
        raise InvalidInputError(
            "--socket", "the engine's Unix socket path (or MEMORYOS_EMBEDDING_ENGINE_SOCKET)"
        )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    serve_engine(config, Path(socket_path), stop)


def register(command: Command) -> None:
    """Add `embedding-engine` to the `memoryos` parser."""
    engine = command(
        "embedding-engine",
        cmd_embedding_engine,
        "serve the embedding model to every worker process of this host over a Unix socket",
        False,
    )
    engine.add_argument(
        "--socket", type=Path, default=None, help="Unix socket path (env MEMORYOS_EMBEDDING_ENGINE_SOCKET)"
    )
