"""`memoryos retrieve|add|stats --api-url URL`: the command answered by a running server through the typed
client, in milliseconds (no model load, no space open), with the local command's output and exit codes.

Errors keep the CLI's conventions: bad input (422, a refused key) exits 2 naming the field, no memory
(404) exits 3 — or, with `--json`, prints the empty result with `space_exists: false` as the local
command does —, a busy or overloaded server (429, 503) exits 4, an unreachable one exits 1.
"""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from memoryos.cli.input import TurnsFile, check_add_flags, turn_of_flags
from memoryos.cli.output import empty_context, empty_stats, print_context, print_json, print_stats
from memoryos.errors import InvalidInputError, MemoryOSError
from memoryos.storage.space_lock import SpaceBusyError
from services.client import ApiError, MemoryClient
from services.spaces.errors import RemoteSpaceNotFoundError

MAX_TURNS_PER_CALL = 256
"""Turns per batch request: the server's default `max_turns_per_batch`."""


def _local_error(error: ApiError, url: str) -> MemoryOSError:
    """The engine error the local command would have raised, for `cli._run` to report and exit with."""
    if error.status == 404:
        return RemoteSpaceNotFoundError(f"{error.message} on {url}")
    if error.status in (429, 503):
        return SpaceBusyError(Path(), f"{url}: {error.message} (retry after {error.retry_after_s or 1} s)")
    if error.status == 401:
        return InvalidInputError("--api-key", error.message)
    if error.status < 500:
        return InvalidInputError(error.field or "request", error.message.removeprefix(f"{error.field}: "))
    return MemoryOSError(f"{url}: {error.status} {error.message}")


def run_remote(command: str, args: argparse.Namespace) -> None:
    """Run `command` ("retrieve", "add" or "stats") against `args.api_url`."""
    commands: dict[str, Callable[[MemoryClient, argparse.Namespace], None]] = {
        "retrieve": _retrieve,
        "add": _add,
        "stats": _stats,
    }
    try:
        with MemoryClient(args.api_url, args.api_key) as client:
            commands[command](client, args)
    except ApiError as error:
        raise _local_error(error, args.api_url) from None
    except httpx.HTTPError as error:
        raise OSError(f"cannot reach the memory server at {args.api_url}: {error}") from None


def _retrieve(client: MemoryClient, args: argparse.Namespace) -> None:
    try:
        context = client.retrieve(args.user, args.query, assistant_id=args.assistant, top_k=args.top_k)
    except ApiError as error:
        if error.code != "space_not_found" or not args.json:
            raise
        print(f"note: {error.message} on {args.api_url}", file=sys.stderr)
        print_json(empty_context(args.query))
        return
    if args.json:
        print_json({"space_exists": True, **context.model_dump()})
    else:
        print_context(context)


def _stats(client: MemoryClient, args: argparse.Namespace) -> None:
    try:
        stats = client.stats(args.user, assistant_id=args.assistant)
    except ApiError as error:
        if error.code != "space_not_found" or not args.json:
            raise
        print(f"note: {error.message} on {args.api_url}", file=sys.stderr)
        print_json(empty_stats(args.user, args.assistant))
        return
    if args.json:
        print_json({"space_exists": True, **stats.model_dump()})
    else:
        print_stats(stats)


def _add(client: MemoryClient, args: argparse.Namespace) -> None:
    """Every turn is sent as one batch per `MAX_TURNS_PER_CALL`; the server checks them (422 names the
    turn) before any of a batch is stored."""
    check_add_flags(args)
    turns = TurnsFile(args.file).turns if args.file is not None else [turn_of_flags(args)]
    page_ids: list[int] = []
    for start in range(0, len(turns), MAX_TURNS_PER_CALL):
        chunk = [
            {k: v for k, v in turn.items() if v is not None}
            for turn in turns[start : start + MAX_TURNS_PER_CALL]
        ]
        page_ids += client.add_batch(args.user, chunk, assistant_id=args.assistant).page_ids
    print_json({"page_ids": page_ids})
