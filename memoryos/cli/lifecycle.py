"""`memoryos list`, `delete` and `history`: act on single pages and facts by the ids results show.

Each opens an existing space only (a mistyped user is exit 3, nothing created) and prints JSON, so a
script can pipe `retrieve --json` page ids into `delete`. A missing page or fact id is exit 3 as well.
"""

import argparse
from collections.abc import Callable
from typing import Any

from memoryos.cli.output import print_json
from memoryos.cli.session import opened

Command = Callable[..., argparse.ArgumentParser]
"""`build_parser`'s `command(name, handler, help)`: a subcommand with --user and --assistant."""


def cmd_list(args: argparse.Namespace) -> None:
    with opened(args, create=False) as memory:
        print_json(memory.list_pages(offset=args.offset, limit=args.limit).model_dump())


def cmd_delete(args: argparse.Namespace) -> None:
    with opened(args, create=False) as memory:
        result = memory.delete_page(args.page) if args.page is not None else memory.delete_fact(args.fact)
        memory.flush()  # summaries and the profile rewritten without it before the command returns
        print_json(result.model_dump())


def cmd_history(args: argparse.Namespace) -> None:
    with opened(args, create=False) as memory:
        print_json(memory.fact_history(args.fact).model_dump())


def _id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer id, got {text!r}")
    return value


def register(command: Command) -> None:
    """Add the lifecycle subcommands to the `memoryos` parser."""
    listing: Any = command("list", cmd_list, "list stored pages with their ids, times and provenance")
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--limit", type=int, default=50)
    delete = command("delete", cmd_delete, "delete one page (and the facts only it supported) or one fact")
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("--page", type=_id, help="page id, as `retrieve --json` shows it")
    which.add_argument("--fact", type=_id, help="fact id (entry_id)")
    history = command("history", cmd_history, "how a fact changed, and from which turns")
    history.add_argument("--fact", type=_id, required=True, help="fact id (entry_id), any version")
