"""Delivered write entries, and how a shard's batch of them is cut into runs the engine applies at once:
each space's entries in the order accepted, its consecutive writes together."""

from dataclasses import dataclass

from memoryos.space.ops import AddTurns, AnyOp
from memoryos.space.pool import SpaceKey


@dataclass(frozen=True)
class Delivered:
    """A write entry read for applying (from a shard's stream, or a space's held list): its id, its raw
    fields (a dead letter keeps them) and its op."""

    entry_id: bytes
    fields: dict[bytes, bytes]
    space: SpaceKey
    op: AnyOp


def space_runs(entries: list[Delivered], longest: int) -> list[list[Delivered]]:
    """The entries as runs to apply: each space's entries in the order accepted, its consecutive writes
    together (up to `longest`) and every other op alone; spaces in the order they first appear."""
    by_space: dict[SpaceKey, list[list[Delivered]]] = {}
    for entry in entries:
        runs = by_space.setdefault(entry.space, [])
        writes = isinstance(entry.op, AddTurns)
        if runs and writes and isinstance(runs[-1][-1].op, AddTurns) and len(runs[-1]) < longest:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return [run for runs in by_space.values() for run in runs]
