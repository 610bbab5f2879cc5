"""`memoryos move-to-database` and `memoryos move-to-files`: a data directory's spaces into the PostgreSQL
database and back (`memoryos/portability/database_move.py`), every id and write id kept.

Not `migrate`: that word is the schema's (a store's tables brought up to this version). Both commands run
OFFLINE: every worker, `memoryos serve` and `memoryos mcp` of the data directory and the database must be
stopped first. One line per space (ids and counts, no memory text), then a summary; exit 1 when a space
was refused or failed (the others are moved), 2 for bad flags (a missing URL names `--database-url`).
"""

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from memoryos.cli.session import config_of

if TYPE_CHECKING:
    from memoryos.config import MemoryConfig
    from memoryos.portability.database_move import MoveReport

Command = Callable[..., argparse.ArgumentParser]
"""`build_parser`'s `command(name, handler, help, needs_user)`."""

OFFLINE = (
    "OFFLINE: stop every worker, `memoryos serve` and `memoryos mcp` of this data directory and database "
    "first. Each space moves in one transaction, keeping every id (pages, segments, facts, profile "
    "versions) and the op log with its write ids, so a write delivered again after the move is recognized "
    "as applied. A space the destination already holds is refused, never overwritten. Index snapshots are "
    "not moved: they are rebuilt from the stored vectors when the space is first opened."
)


def cmd_move_to_database(args: argparse.Namespace) -> None:
    from memoryos.portability.database_move import move_to_database

    report = move_to_database(_config(args), remove_files=args.remove_files, progress=_print)
    _finish(report)


def cmd_move_to_files(args: argparse.Namespace) -> None:
    from memoryos.portability.database_move import move_to_files

    report = move_to_files(_config(args), remove_rows=args.remove_rows, progress=_print)
    _finish(report)


def _config(args: argparse.Namespace) -> "MemoryConfig":
    from pydantic import SecretStr

    from memoryos.errors import InvalidInputError

    if not args.database_url:
        raise InvalidInputError(
            "--database-url", "missing: give the PostgreSQL database's URL (or set MEMORYOS_DATABASE_URL)"
        )
    return config_of(args).model_copy(update={"database_url": SecretStr(args.database_url)})


def _print(line: str) -> None:
    print(line, flush=True)


def _finish(report: "MoveReport") -> None:
    """The summary, then exit 1 (one `error:` line) when a space is left for the operator."""
    from memoryos.errors import StorageError

    print(report.summary(), flush=True)
    if not report.ok:
        not_moved = report.count("refused") + report.count("failed")
        raise StorageError(f"{not_moved} of {len(report.spaces)} spaces were not moved (listed above)")


def register(command: Command) -> None:
    """Add `move-to-database` and `move-to-files` to the `memoryos` parser."""
    to_database = command(
        "move-to-database",
        cmd_move_to_database,
        "move every space of --data-dir's SQLite files into the PostgreSQL database (offline)",
        needs_user=False,
    )
    to_database.description = (
        "Copy every memory space under --data-dir (<tenant>/<user>/<assistant>/memory.sqlite) into the "
        f"database. {OFFLINE} The files are kept unless --remove-files."
    )
    _url_flag(to_database)
    to_database.add_argument(
        "--remove-files",
        action="store_true",
        help="remove each space's directory once it is in the database (default: keep, check, remove later)",
    )
    to_files = command(
        "move-to-files",
        cmd_move_to_files,
        "move every space of the PostgreSQL database into SQLite files under --data-dir (offline)",
        needs_user=False,
    )
    to_files.description = (
        "Copy every memory space of the database into <data-dir>/<tenant>/<user>/<assistant>/memory.sqlite. "
        f"{OFFLINE} The rows are kept unless --remove-rows."
    )
    _url_flag(to_files)
    to_files.add_argument(
        "--remove-rows",
        action="store_true",
        help="delete each space's rows once its file is in place (default: keep them)",
    )


def _url_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=os.environ.get("MEMORYOS_DATABASE_URL"),
        help="libpq URL of the PostgreSQL database (env MEMORYOS_DATABASE_URL)",
    )
