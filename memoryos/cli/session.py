"""How a `memoryos` command opens a memory space, says what it resumes, and stops on Ctrl-C.

- **Reads never create.** `retrieve`, `stats` and `profile` open existing spaces only
  (`Memoryos(..., create=False)`; `forget` and `reindex` look first): an unknown user or data directory is
  `SpaceNotFoundError`, and nothing appears on disk. `add` and `chat` create the space.
- **Resumed work is announced.** A space opened with pages an earlier run stored but did not embed (an
  interrupted `add`) says so on stderr before a read waits for them.
- **Ctrl-C stops cleanly.** The first SIGINT prints one line and raises `KeyboardInterrupt` in the command;
  the space is then closed without waiting for pending pages (they are durable: the next open embeds
  them) — the process's scheduler is stopped, letting only the embedding batch in flight finish. A second
  SIGINT ends the process at once: every acknowledged write is already committed.
"""

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from memoryos.config import MemoryConfig
    from memoryos.facade.memoryos import Memoryos

EXIT_INTERRUPTED = 130
"""128 + SIGINT, what shells report for a command stopped by Ctrl-C."""


def config_of(args: "argparse.Namespace") -> "MemoryConfig":
    """The configuration (env `MEMORYOS_*`) with the command's flags: `--data-dir`, `--database-url` (the
    commands that take it), and `--verbose`, which also shows the model-loading progress bar
    (`show_progress`)."""
    from memoryos.config import MemoryConfig

    overrides: dict[str, Any] = {}
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    if getattr(args, "verbose", False):
        overrides["show_progress"] = True
    return MemoryConfig(**overrides)


@contextlib.contextmanager
def opened(
    args: "argparse.Namespace", *, create: bool, config: "MemoryConfig | None" = None
) -> Iterator["Memoryos"]:
    """The command's space (`create=False`: an existing one, else `SpaceNotFoundError`), closed at the end:
    normally (its pages embedded and consolidated), or, on Ctrl-C, at once."""
    from memoryos.facade.memoryos import Memoryos

    config = config or config_of(args)
    memory = Memoryos.from_config(args.user, config, assistant_id=args.assistant, create=create)
    try:
        if memory.pending_pages_at_open:
            print(pending_message(memory), file=sys.stderr, flush=True)
        yield memory
    except KeyboardInterrupt:
        close_interrupted(memory)
        raise
    except BaseException:
        close(memory)
        raise
    close(memory)


def pending_message(memory: "Memoryos") -> str:
    """What a command says before it embeds pages an earlier run left pending: the count, and whether that
    loads PyTorch (only when the model has no verified ONNX export for this process to run without it)."""
    message = (
        f"embedding {memory.pending_pages_at_open} pages left pending by an earlier run (interrupted?) first"
    )
    will_load = getattr(memory.embedder, "will_load_pytorch", None)
    if callable(will_load) and will_load():
        return f"{message}; no verified ONNX export of the model yet, so this loads PyTorch (seconds) and can take a while on CPU"
    return f"{message}; this can take a while on CPU"


def close(memory: "Memoryos") -> None:
    try:
        memory.close()
    except KeyboardInterrupt:
        close_interrupted(memory)
        raise


def close_interrupted(memory: "Memoryos") -> None:
    """Close without waiting for pending pages or consolidation: stop the process's scheduler (the batch
    being embedded finishes and is stored), then the space (index snapshot, store, hold). Only for a
    process that is ending."""
    from memoryos.scheduler import shared_scheduler

    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # "pages left pending": the interrupt line said so already
    try:
        shared_scheduler(memory.config).close()
        memory.close()  # with the scheduler closed: the space only
    except Exception:  # the store is durable per op: a failed tidy-up loses nothing
        pass
    finally:
        logging.disable(previous)


class InterruptHandling:
    """SIGINT while a command runs: the first prints one line and raises `KeyboardInterrupt`, a second one
    exits at once. Restores the previous handler on exit; does nothing outside the main thread."""

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False
        self.interrupted = False

    def __enter__(self) -> "InterruptHandling":
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:
            exit_now(EXIT_INTERRUPTED)
        self.interrupted = True
        lead = "\n" if sys.stderr.isatty() else ""
        sys.stderr.write(
            f"{lead}interrupted: stopping; stored memories are kept, pages not yet embedded are embedded "
            "on the next open (Ctrl-C again to quit at once)\n"
        )
        sys.stderr.flush()
        raise KeyboardInterrupt

    def note_interrupted(self) -> None:
        """A `KeyboardInterrupt` that did not come through the handler (raised before it was installed, or
        by a test): print the same line once."""
        if not self.interrupted:
            self.interrupted = True
            print("interrupted: stopping; stored memories are kept", file=sys.stderr, flush=True)


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown: no daemon thread inside PyTorch or ONNX Runtime
    at finalization (`terminate called without an active exception`), no wait for LLM calls in flight.
    Safe for the store: every acknowledged op is committed (SQLite WAL, `synchronous=FULL`)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)
