"""Unique ids for ops, writes and requests, drawn without a system call.

`uuid.uuid4()` reads `os.urandom`, which releases the GIL; on the API's event loop each of the three ids
a write needs then waited to re-take it from the embedding and store threads (up to the 5 ms switch
interval each), which set the acknowledgement latency under load (docs/api.md). These ids must be unique,
not secret — a write id grants nothing outside its own space — so a generator seeded once per process
from the system's entropy serves them with the GIL held throughout.
"""

import os
import random

_generator = random.Random(os.urandom(32))


def _reseed() -> None:
    """A forked child must not draw the ids its parent draws."""
    _generator.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed)


def new_id() -> str:
    """128 random bits as 32 hex digits (as `uuid4().hex` is long; a valid op `Key`)."""
    return f"{_generator.getrandbits(128):032x}"
