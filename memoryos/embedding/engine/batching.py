"""How the embedding engine cuts its queues into model batches: by padded tokens, within a length bucket.

A model run pads every text to the longest of its batch, so what a batch costs the device is
`texts x longest`, not the sum of the texts' lengths. The engine counts tokens with the model's own
tokenizer (truncated at the model's window, so no text counts for more than the model reads), keeps each
batch inside one length bucket, and bounds it by that padded cost: a batch of short pages holds many texts,
one of long pages few, and one long text never pads a batch of short ones.
"""

from collections import deque
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def length_bucket(tokens: int) -> int:
    """Half-octave buckets: the lengths of one bucket differ by at most 1.5x (from 2^k to 1.5 x 2^k, and
    from there to 2^(k+1)), so a batch of one bucket spends at most a third of the device on padding."""
    tokens = max(tokens, 1)
    high = tokens.bit_length()
    half = (tokens >> (high - 2)) & 1 if high >= 2 else 0
    return 2 * high + half


def padded_tokens(lengths: list[int]) -> int:
    """What a batch of these lengths costs a model run: each text padded to the longest."""
    return len(lengths) * max(lengths, default=0)


def take_batch(
    queue: deque[T], tokens_of: Callable[[T], int], max_texts: int, max_padded_tokens: int
) -> list[T]:
    """The next batch, taken out of `queue`: the oldest item, then the others of its length bucket in
    arrival order while the batch stays within `max_texts` texts and `max_padded_tokens` padded tokens
    (the oldest always goes, so no length waits behind another for ever); sorted longest first."""
    if not queue:
        return []
    bucket = length_bucket(tokens_of(queue[0]))
    taken: list[int] = []
    longest = 0
    for position, item in enumerate(queue):
        if len(taken) == max_texts:
            break
        cost = tokens_of(item)
        if length_bucket(cost) != bucket:
            continue
        if taken and (len(taken) + 1) * max(longest, cost) > max_padded_tokens:
            continue  # a shorter one of the bucket may still fit
        taken.append(position)
        longest = max(longest, cost)
    chosen = set(taken)
    batch = [queue[position] for position in taken]
    kept = [item for position, item in enumerate(queue) if position not in chosen]
    queue.clear()
    queue.extend(kept)
    return sorted(batch, key=tokens_of, reverse=True)
