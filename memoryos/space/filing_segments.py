"""The active segments that filing a topic compares it with and merges it into, kept through one write
transaction, so each filing need not read them again.

Why this is safe: no other writer can change a space while a transaction holds it (see `page_states.py`),
so within it the segments change only by the transaction's own writes; filing notes each segment it
makes, merges into or archives. What filing reads of a segment is its id, summary, keywords, vector and
topic count; ops that change those any other way (a rewrite, a delete that empties a segment) are not
noted, and the applier drops what is kept after them.

Why it is worth it: consolidation files every run of pages it moves with one read of the active segments,
and on a database that read is a round trip that must first send every write waiting before it (`PageStates`
says the same of pages); kept, a commit's filings read the segments once and their writes wait together
for the commit, where one statement per table carries them.
"""

from dataclasses import dataclass, field

import numpy as np

from memoryos.storage.records.base import ActiveSegments, RecordStore
from memoryos.types import Segment


@dataclass
class _Kept:
    """The active segments as this transaction left them: item i of each list is segment i's."""

    segments: list[Segment]
    vectors: list[np.ndarray] = field(default_factory=list)
    topic_counts: list[int] = field(default_factory=list)

    def position(self, segment_id: int) -> int | None:
        return next((i for i, s in enumerate(self.segments) if s.segment_id == segment_id), None)


class FilingSegments:
    """The space's active segments, their vectors and topic counts, read on a transaction's first filing
    and then kept as its filings change them; `forget` drops them."""

    def __init__(self, store: RecordStore, dim: int) -> None:
        self._store = store
        self._dim = dim
        self._kept: _Kept | None = None

    def active(self) -> ActiveSegments:
        """The active segments in id order (read if not known), as `RecordStore.active_segments_with_vectors`."""
        if self._kept is None:
            segments, vectors, topic_counts = self._store.active_segments_with_vectors(self._dim)
            self._kept = _Kept(segments, list(vectors), topic_counts)
        kept = self._kept
        vectors = np.stack(kept.vectors) if kept.vectors else np.zeros((0, self._dim), dtype=np.float32)
        return ActiveSegments(list(kept.segments), vectors, list(kept.topic_counts))

    def added(self, segment: Segment, vector: np.ndarray) -> None:
        """A segment this transaction made (its id the newest: the id order holds)."""
        if self._kept is not None:
            self._kept.segments.append(segment)
            self._kept.vectors.append(vector)
            self._kept.topic_counts.append(1)

    def merged(self, segment: Segment, vector: np.ndarray, topic_count: int) -> None:
        """A segment this transaction merged a topic into: its new summary, keywords, vector and count."""
        kept = self._kept
        position = None if kept is None else kept.position(segment.segment_id)
        if kept is not None and position is not None:
            kept.segments[position] = segment
            kept.vectors[position] = vector
            kept.topic_counts[position] = topic_count

    def archived(self, segment_id: int) -> None:
        """A segment this transaction archived: no longer active."""
        kept = self._kept
        position = None if kept is None else kept.position(segment_id)
        if kept is not None and position is not None:
            del kept.segments[position], kept.vectors[position], kept.topic_counts[position]

    def forget(self) -> None:
        self._kept = None
