"""The `memoryos` command. Heavy modules (torch via sentence-transformers, faiss) are imported inside the
commands that need them, so `memoryos --help` answers at once.

Every failure a user can cause is one line on stderr, `error: ...`, naming the flag, file and line, or
field, and a non-zero exit status (`EXIT_CODES`); Ctrl-C is exit 130 (`memoryos/cli/session.py`).
"""

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memoryos.cli.output import (
    empty_context,
    empty_stats,
    erased_summary,
    note_missing,
    print_context,
    print_json,
    print_stats,
)
from memoryos.cli.service_entry import service_entry
from memoryos.cli.session import EXIT_INTERRUPTED, InterruptHandling, config_of, exit_now, opened
from memoryos.config import MemoryConfig

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a Unix tool whose reader closed the pipe."""
EXIT_CODES = {
    0: "done",
    1: "the environment failed: a data directory that cannot be created or written, an unreadable store, "
    "an LLM that keeps failing",
    2: "bad input: a flag, a file or one of its lines, a field, the configuration",
    3: "no memory for that user, assistant and data directory (a read creates nothing), or no page or "
    "fact with that id",
    4: "the memory space is busy: another process holds it (the message names the pids)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); what was stored is kept",
    EXIT_BROKEN_PIPE: "the output's reader went away (`| head`): SIGPIPE's status, as Unix tools",
}
NO_SPACE_HINT = "check --user, --assistant and --data-dir (or MEMORYOS_DATA_DIR), or add a memory first"


def cmd_add(args: argparse.Namespace) -> None:
    """Every turn is checked before the space is opened: a bad file or flag creates nothing."""
    if _answered_by_server(args, "add"):
        return
    from datetime import UTC, datetime

    from memoryos.cli.input import TurnsFile, check_add_flags, named_by_flag, turn_of_flags
    from memoryos.errors import InvalidInputError
    from memoryos.validation import validate_turn

    check_add_flags(args)
    config = config_of(args)
    config.space_dir(args.user, args.assistant)  # the ids, checked
    now, limit = datetime.now(UTC), config.max_text_chars
    if args.file is not None:
        turns_file = TurnsFile(args.file)
        turns = turns_file.turns
        try:
            for i, turn in enumerate(turns):
                validate_turn(turn, f"turns[{i}].", limit, now)
        except InvalidInputError as error:
            raise turns_file.locate(error) from None
    else:
        turns = [turn_of_flags(args)]
        try:
            validate_turn(turns[0], "", limit, now)
        except InvalidInputError as error:
            raise named_by_flag(error, single_turn=True) from None
    with opened(args, create=True, config=config) as memory:
        ids = memory.add_memories(turns)
        print_json({"page_ids": ids})  # acknowledged: durable now; embedded before the close returns


def cmd_retrieve(args: argparse.Namespace) -> None:
    if _answered_by_server(args, "retrieve"):
        return
    from memoryos.errors import SpaceNotFoundError
    from memoryos.validation import validate_text

    try:
        with opened(args, create=False) as memory:
            context = memory.retrieve(args.query, top_k=args.top_k)
    except SpaceNotFoundError as missing:
        if not args.json:
            raise
        query = validate_text("query", args.query, config_of(args).max_text_chars)
        note_missing(missing)
        print_json(empty_context(query))
        return
    if args.json:
        print_json({"space_exists": True, **context.model_dump()})
    else:
        print_context(context)


def cmd_profile(args: argparse.Namespace) -> None:
    with opened(args, create=False) as memory:
        print(memory.get_user_profile_summary() or "(no profile yet)")
        if args.knowledge:
            print_json(
                {"user": memory.get_user_knowledge(), "assistant": memory.get_assistant_knowledge_summary()}
            )


def cmd_stats(args: argparse.Namespace) -> None:
    if _answered_by_server(args, "stats"):
        return
    from memoryos.errors import SpaceNotFoundError

    try:
        with opened(args, create=False) as memory:
            stats = memory.stats()
    except SpaceNotFoundError as missing:
        if not args.json:
            raise
        note_missing(missing)
        print_json(empty_stats(args.user, args.assistant))
        return
    if args.json:
        print_json({"space_exists": True, **stats.model_dump()})
    else:
        print_stats(stats)


def cmd_chat(args: argparse.Namespace) -> None:
    """The conversation is `memoryos/cli/chat.py`'s; Ctrl-C ends it with exit 130, end of input with 0."""
    from memoryos.cli.chat import chat_loop

    with opened(args, create=True) as memory, contextlib.suppress(EOFError):
        chat_loop(memory, input, print)


def cmd_forget(args: argparse.Namespace) -> None:
    from memoryos.errors import InvalidInputError, SpaceNotFoundError
    from memoryos.facade.memoryos import forget_space
    from memoryos.space.layout import STORE_FILE

    config = config_of(args)
    directory = config.space_dir(args.user, args.assistant)
    if not (directory / STORE_FILE).is_file():
        raise SpaceNotFoundError(directory)
    what = f"all memory of user {args.user!r} (assistant {args.assistant!r}) in {config.data_dir}"
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidInputError(
                "--yes", f"forget erases {what}; confirm with --yes (stdin is not a terminal)"
            )
        if input(f"Erase {what}? This cannot be undone. [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing erased", file=sys.stderr)
            return
    contents = forget_space(args.user, config, args.assistant)
    print(erased_summary(what, contents) + f"; removed {directory}")


def cmd_reindex(args: argparse.Namespace) -> None:
    from memoryos.errors import InvalidInputError

    if args.all and args.user is not None:
        raise InvalidInputError("--all", "give --user or --all, not both")
    if args.all and not args.redis_url:
        raise InvalidInputError("--all", "goes with --redis-url: every space that deployment's queue knows")
    if not args.all and args.user is None:
        raise InvalidInputError("--user", "missing: give the user whose space to re-embed (or --all)")
    if args.redis_url:  # a deployment's space: its owning worker re-embeds it (services/jobs/request.py)
        service_entry("reindex-job")(args)
        return
    if args.wait:
        raise InvalidInputError("--wait", "goes with --redis-url only (a local reindex always waits)")
    from memoryos.portability.reindex import reindex_space

    config = config_of(args).model_copy(update={"embedding_model_name": args.model})
    print_json(reindex_space(config, args.user, args.assistant, show_progress=True))


def cmd_demo(args: argparse.Namespace) -> None:
    from memoryos.cli.demo import run_demo

    run_demo(args.data_dir or Path("./memoryos_demo_data"))


def cmd_worker(args: argparse.Namespace) -> None:
    service_entry("worker")(args)


def _answered_by_server(args: argparse.Namespace, command: str) -> bool:
    """`--api-url` (or `MEMORYOS_API_URL`): a running `memoryos serve` answers (`services/cli_remote.py`)."""
    if not args.api_url:
        return False
    service_entry("remote")(command, args)
    return True


def _api_flags(parser: argparse.ArgumentParser) -> None:
    import os

    parser.add_argument(
        "--api-url",
        default=os.environ.get("MEMORYOS_API_URL"),
        help="ask a running `memoryos serve` at this URL instead of opening the store (env MEMORYOS_API_URL)",
    )
    parser.add_argument("--api-key", default=None, help="its API key (env MEMORYOS_API_KEY)")


def cmd_serve(args: argparse.Namespace) -> None:
    service_entry("serve")(args)


def cmd_mcp(args: argparse.Namespace) -> None:
    service_entry("mcp")(args)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memoryos",
        description="Long-term memory for LLM agents.",
        epilog="exit status: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()),
    )
    _global_flags(parser, default=None)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler: Any, help_text: str, needs_user: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if needs_user:
            sub.add_argument("--user", required=True, help="user id")
            sub.add_argument("--assistant", default="default_assistant_profile", help="assistant id")
        sub.set_defaults(handler=handler)
        return sub

    command("chat", cmd_chat, "chat interactively; the conversation is remembered across runs")
    add = command("add", cmd_add, "store an exchange (or a JSON-lines file of them)")
    add.add_argument("--user-input")
    add.add_argument("--agent-response")
    add.add_argument("--timestamp", default=None, help="ISO 8601 or 'YYYY-MM-DD HH:MM:SS'")
    add.add_argument("--meta", default=None, help="meta_data as a JSON object")
    add.add_argument(
        "--file", default=None, help="JSON lines of {user_input, agent_response, timestamp?, meta_data?}"
    )
    _api_flags(add)
    retrieve = command("retrieve", cmd_retrieve, "show what memory returns for a query")
    _api_flags(retrieve)
    retrieve.add_argument("query")
    retrieve.add_argument("--top-k", type=_positive_int, default=None)
    retrieve.add_argument(
        "--json", action="store_true", help="JSON; an unknown user gives an empty result, space_exists false"
    )
    profile = command("profile", cmd_profile, "show the user profile")
    profile.add_argument("--knowledge", action="store_true", help="also list user and assistant facts")
    stats = command("stats", cmd_stats, "tier counts and segments with their heat")
    _api_flags(stats)
    stats.add_argument(
        "--json", action="store_true", help="JSON; an unknown user gives zero counts, space_exists false"
    )
    forget = command("forget", cmd_forget, "erase everything remembered about a user (with one assistant)")
    forget.add_argument(
        "--yes", action="store_true", help="do not ask (required when stdin is not a terminal)"
    )
    reindex = command(
        "reindex", cmd_reindex, "re-embed a space from its stored text with another model", needs_user=False
    )
    reindex.add_argument("--user", default=None, help="user id (or --all)")
    reindex.add_argument("--assistant", default="default_assistant_profile", help="assistant id")
    reindex.add_argument(
        "--all", action="store_true", help="with --redis-url: one job per space the deployment's queue knows"
    )
    reindex.add_argument("--model", required=True, help="embedding model name, e.g. BAAI/bge-m3")
    reindex.add_argument(
        "--redis-url",
        default=None,
        help="ask the workers of this deployment (rq job; the model must be the one they serve) instead of "
        "opening the store (docs/service.md)",
    )
    reindex.add_argument("--wait", action="store_true", help="with --redis-url: wait for the job's report")
    command("demo", cmd_demo, "store a short conversation and query it, offline", needs_user=False)
    from memoryos.cli.lifecycle import register as register_lifecycle

    register_lifecycle(command)
    from memoryos.eval.cli import register as register_eval

    register_eval(commands)
    worker = command(
        "worker",
        cmd_worker,
        "apply queued writes and answer reads for shards of spaces (Redis)",
        needs_user=False,
    )
    worker.add_argument("--redis-url", default=None, help="Redis of the queue (env MEMORYOS_REDIS_URL)")
    worker.add_argument("--worker-id", default=None, help="default: host-pid-random")
    worker.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL holding every space (env MEMORYOS_DATABASE_URL); unset: SQLite files in --data-dir",
    )
    worker.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes on this host, sharing its GPU (env MEMORYOS_WORKER_PROCESSES, default 1)",
    )
    serve = command(
        "serve",
        cmd_serve,
        "run the HTTP API on this machine (embedded: no Redis); docs at /docs",
        needs_user=False,
    )
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1; env MEMORYOS_API_HOST)")
    serve.add_argument("--port", type=int, default=None, help="default 8765 (env MEMORYOS_API_PORT)")
    serve.add_argument(
        "--keys-file", type=Path, default=None, help="JSON API keys -> tenants, re-read on change"
    )
    serve.add_argument(
        "--allow-unauthenticated", action="store_true", help="serve a non-loopback --host with no API key"
    )
    serve.add_argument(
        "--redis-url",
        default=None,
        help="the API alone, in front of Redis and `memoryos worker` processes (docs/service.md)",
    )
    mcp = command(
        "mcp", cmd_mcp, "serve memory to MCP clients (Claude Desktop, Cline, Cursor) over stdio", False
    )
    mcp.add_argument("--user", default=None, help="default user of calls that name none")
    mcp.add_argument("--assistant", default="default_assistant_profile", help="default assistant id")
    _api_flags(mcp)
    mcp.epilog = "the data directory is the global flag: memoryos --data-dir DIR mcp --user ID (docs/mcp.md)"
    from memoryos.cli.embedding_engine import register as register_embedding_engine

    register_embedding_engine(command)
    from memoryos.cli.bundle import register as register_bundle

    register_bundle(commands)
    from memoryos.cli.database_move import register as register_database_move

    register_database_move(command)
    _after_every_command(commands)
    return parser


DEFAULT_DATA_DIR = MemoryConfig.model_fields["data_dir"].default
"""Where memory is kept with neither `--data-dir` nor MEMORYOS_DATA_DIR: relative, so under the directory the
command runs from."""


def _shown(path: Path) -> str:
    """A relative path as users type it (`./memoryos_data`), which `Path` normalises away."""
    return str(path) if path.is_absolute() else f"./{path}"


def _global_flags(parser: argparse.ArgumentParser, default: Any) -> None:
    """`--data-dir` and `--verbose`. `default` SUPPRESS on a command's own parser: given after the command
    they count, and not given they leave what came before the command alone."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default,
        help=f"root of the memory store (default {_shown(DEFAULT_DATA_DIR)}, in the directory you run from; "
        "`demo`: ./memoryos_demo_data; env MEMORYOS_DATA_DIR)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=False if default is None else default,
        help="log what the engine does (INFO: the LLM backend, the embedding runtime and why) and show the "
        "model-loading progress bar",
    )


def _after_every_command(commands: Any) -> None:
    """Accept the global flags after the command too (`memoryos serve --data-dir D`), as users type them,
    in every command and subcommand."""
    for sub in commands.choices.values():
        _global_flags(sub, default=argparse.SUPPRESS)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                _after_every_command(action)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status. `argv=None` is the process's own entry point (`memoryos`,
    `python -m memoryos.cli.main`): after Ctrl-C it then ends the process at once (`session.exit_now`)."""
    with InterruptHandling() as interrupts:
        try:
            args = build_parser().parse_args(argv)
            _configure_logging(args.verbose)
            code = _run(args)
        except KeyboardInterrupt:
            interrupts.note_interrupted()
            code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED and argv is None:
        exit_now(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """The command, with every error a user can cause turned into one line and an exit status."""
    import sqlite3

    from memoryos.cli.input import named_by_flag
    from memoryos.errors import (
        InvalidInputError,
        ItemNotFoundError,
        LLMError,
        MemoryOSError,
        MissingExtraError,
        SpaceNotFoundError,
        StorageError,
    )
    from memoryos.storage.space_lock import SpaceBusyError

    try:
        args.handler(args)
        sys.stdout.flush()  # a reader that went away is found here, not at interpreter exit
        return 0
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except SpaceNotFoundError as error:
        return _fail(f"{error} — {NO_SPACE_HINT}", 3)
    except ItemNotFoundError as error:
        return _fail(str(error), 3)
    except SpaceBusyError as error:
        return _fail(str(error), 4)
    except (StorageError, LLMError, MissingExtraError) as error:
        return _fail(str(error), 1)
    except InvalidInputError as error:
        return _fail(str(named_by_flag(error)), 2)
    except (MemoryOSError, ValueError) as error:  # pydantic's ValidationError is a ValueError
        return _fail(_one_line(error), 2)
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        return _fail(f"{where}{(error.strerror or str(error)).lower()}", 1)
    except sqlite3.Error as error:
        return _fail(f"memory store: {error}", 1)


def _stdout_to_devnull() -> None:
    """The reader closed the pipe: what is left in stdout's buffer goes nowhere, so that the interpreter's
    last flush does not print "Exception ignored ... BrokenPipeError" (Python's documented remedy)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _fail(message: str, code: int) -> int:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return code


def _one_line(error: Exception) -> str:
    """pydantic's multi-line `ValidationError` as `field: reason; field: reason`."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        parts = []
        for item in error.errors():
            field = ".".join(str(part) for part in item.get("loc", ()))
            reason = str(item.get("msg", "")).removeprefix("Value error, ")
            parts.append(reason if reason.startswith(f"{field}:") else f"{field}: {reason}")
        return "; ".join(parts)
    return str(error)


def _configure_logging(verbose: bool) -> None:
    """`--verbose`: the engine's INFO lines (the LLM backend chosen, the embedding runtime and why, models
    loaded) on stderr; `config_of` also turns the model-loading progress bar on."""
    if verbose:
        import logging

        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr)
        logging.getLogger("memoryos").setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
