"""Memory policy as pure functions: heat, segment choice, eviction, promotion, fact dedup.

Nothing here touches storage or models, so every rule is unit-tested with a fixed clock and hand-made
vectors. `MemorySpace.apply` calls these with the current state.
"""

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SECONDS_PER_HOUR = 3600.0

MAX_SEGMENT_KEYWORDS = 12
"""Keywords kept per segment: enough for Jaccard matching, small enough that one topic does not swamp it."""

MAX_SEGMENT_SUMMARY_CHARS = 600
"""A merged segment summary keeps its newest topics up to this length."""


@dataclass(frozen=True)
class HeatWeights:
    """The paper's heat coefficients and recency constant."""

    alpha: float = 1.0
    beta: float = 1.0
    gamma: float = 1.0
    tau_hours: float = 24.0


@dataclass(frozen=True)
class SegmentState:
    """What policy needs to know of a segment."""

    segment_id: int
    visit_count: int
    interaction_count: int
    last_visit_at: float
    has_unanalyzed_pages: bool = False


@dataclass(frozen=True)
class HeatParts:
    """Heat split into the three weighted terms it sums, so a view can show *why* a segment is hot
    (visited often, long, or touched recently) and not only how hot it is."""

    visits: float
    """α·visits."""
    length: float
    """β·interactions: pages filed since the segment was last analyzed."""
    recency: float
    """γ·exp(−hours since last visit / τ)."""

    @property
    def total(self) -> float:
        return self.visits + self.length + self.recency


def heat_parts(segment: SegmentState, now: float, weights: HeatWeights) -> HeatParts:
    """The terms of `heat_of` at `now`, each already weighted, in its order: `total` is its heat exactly."""
    hours = max(0.0, now - segment.last_visit_at) / SECONDS_PER_HOUR
    return HeatParts(
        visits=weights.alpha * segment.visit_count,
        length=weights.beta * segment.interaction_count,
        recency=weights.gamma * math.exp(-hours / weights.tau_hours),
    )


def heat_of(segment: SegmentState, now: float, weights: HeatWeights) -> float:
    """Heat = α·visits + β·interactions + γ·exp(−hours since last visit / τ), computed at `now`.

    Computing recency at read time (not when the segment was last written) is what lets untouched
    segments cool down; the reference froze it. `heat_parts` gives the same terms one by one (kept apart
    so this hot path builds no object; tests/unit/test_segment_heat_parts.py holds the two equal).
    """
    hours = max(0.0, now - segment.last_visit_at) / SECONDS_PER_HOUR
    recency = math.exp(-hours / weights.tau_hours)
    return (
        weights.alpha * segment.visit_count
        + weights.beta * segment.interaction_count
        + weights.gamma * recency
    )


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two keyword sets, case-insensitive; 0 when both are empty."""
    set_a, set_b = {k.lower() for k in a}, {k.lower() for k in b}
    union = set_a | set_b
    return len(set_a & set_b) / len(union) if union else 0.0


def choose_segment(
    topic_vector: np.ndarray,
    topic_keywords: Sequence[str],
    segment_ids: Sequence[int],
    segment_vectors: np.ndarray,
    segment_keywords: Sequence[Sequence[str]],
    threshold: float,
) -> int | None:
    """The segment a topic joins: highest F = cos(summary vectors) + Jaccard(keywords) if F ≥ threshold.

    None means the topic starts a new segment.
    """
    if not segment_ids:
        return None
    cosines = segment_vectors @ topic_vector
    scores = [float(c) + jaccard(topic_keywords, kw) for c, kw in zip(cosines, segment_keywords, strict=True)]
    best = int(np.argmax(scores))
    return segment_ids[best] if scores[best] >= threshold else None


def merged_keywords(
    existing: Sequence[str], new: Sequence[str], limit: int = MAX_SEGMENT_KEYWORDS
) -> list[str]:
    """Union of keywords, new ones first so the segment follows where its topic went, bounded."""
    seen: dict[str, None] = {}
    for keyword in [*new, *existing]:
        cleaned = keyword.strip().lower()
        if cleaned:
            seen.setdefault(cleaned, None)
    return list(seen)[:limit]


def merged_summary(existing: str, new: str, limit: int = MAX_SEGMENT_SUMMARY_CHARS) -> str:
    """The segment summary after a topic merges in: the new topic first, then older text, bounded."""
    if not existing or new.strip().lower() in existing.lower():
        return (existing or new)[:limit]
    return f"{new.strip()} | {existing}"[:limit]


def merged_vector(existing: np.ndarray, existing_topics: int, new: np.ndarray) -> np.ndarray:
    """Running mean of a segment's topic vectors, renormalized, so the segment embedding tracks its content."""
    combined = existing * existing_topics + new
    norm = float(np.linalg.norm(combined))
    return (combined / norm if norm > 0 else new).astype(np.float32)


def unit_mean(vectors: np.ndarray) -> np.ndarray:
    """The normalized mean of unit vectors: the direction a set of pages shares."""
    mean = vectors.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm > 0 else mean).astype(np.float32)


def segments_to_evict(heats: dict[int, float], capacity: int) -> list[int]:
    """The coldest segments beyond `capacity`, coldest first (ties: oldest id first)."""
    excess = len(heats) - capacity
    if excess <= 0:
        return []
    return [sid for sid, _ in sorted(heats.items(), key=lambda item: (item[1], item[0]))[:excess]]


def segments_to_promote(heats: dict[int, float], unanalyzed: set[int], threshold: float) -> list[int]:
    """Every segment at or over the heat threshold that has pages not yet analyzed, hottest first.

    The reference looked only at the single hottest segment; one with nothing new then blocked all others.
    """
    eligible = [sid for sid, heat in heats.items() if heat >= threshold and sid in unanalyzed]
    return sorted(eligible, key=lambda sid: (-heats[sid], sid))


def find_duplicate(vector: np.ndarray, existing: np.ndarray, threshold: float) -> int | None:
    """Row of `existing` that `vector` restates (cosine ≥ threshold, the closest), or None."""
    if existing.shape[0] == 0:
        return None
    cosines = existing @ vector
    best = int(np.argmax(cosines))
    return best if float(cosines[best]) >= threshold else None


_WORD = re.compile(r"[^\W_]+")
"""Letters and digits of every script: with ASCII ones only, every Chinese or Russian fact would compare as
the same empty text, and a second one count as a restatement of the first."""


def normalized_fact(text: str) -> str:
    """A fact's comparison form: lowercase words, so 'Likes tea.' and 'likes  tea' are the same fact."""
    return " ".join(_WORD.findall(text.casefold()))


def knowledge_to_drop(updated_at: dict[int, float], capacity: int) -> list[int]:
    """Facts beyond capacity, least recently confirmed first: a restated fact is refreshed, so a user's
    name and job, said often, outlive one-off remarks (the reference's FIFO dropped them)."""
    excess = len(updated_at) - capacity
    if excess <= 0:
        return []
    return [eid for eid, _ in sorted(updated_at.items(), key=lambda item: (item[1], item[0]))[:excess]]
