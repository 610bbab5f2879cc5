"""Every rule of `memoryos.space.policy`, with hand-made values and a fixed clock."""

import math

import numpy as np
import pytest

from memoryos.space import policy
from memoryos.space.policy import HeatWeights, SegmentState
from tests.support.fakes import T0, axis, unit

HOUR = 3600.0
DIM = 8


def state(visits: int = 0, interactions: int = 0, last_visit_at: float = T0, sid: int = 1) -> SegmentState:
    return SegmentState(sid, visits, interactions, last_visit_at)


# --- heat ---------------------------------------------------------------------------------------------
def test_heat_at_the_moment_of_the_last_visit_is_visits_plus_interactions_plus_gamma() -> None:
    assert policy.heat_of(state(3, 4), T0, HeatWeights()) == pytest.approx(3 + 4 + 1.0)


def test_heat_cools_with_time_since_the_last_visit() -> None:
    weights = HeatWeights(tau_hours=24.0)
    segment = state(2, 1)
    heats = [policy.heat_of(segment, T0 + hours * HOUR, weights) for hours in (0, 1, 24, 48, 24 * 30)]
    assert heats == sorted(heats, reverse=True)
    assert len(set(heats)) == len(heats)
    assert heats[2] == pytest.approx(3 + math.exp(-1))
    assert heats[3] == pytest.approx(3 + math.exp(-2))
    assert heats[-1] == pytest.approx(3.0, abs=1e-9)


def test_heat_weights_scale_each_term() -> None:
    weights = HeatWeights(alpha=2.0, beta=3.0, gamma=4.0, tau_hours=10.0)
    heat = policy.heat_of(state(5, 7), T0 + 10 * HOUR, weights)
    assert heat == pytest.approx(2 * 5 + 3 * 7 + 4 * math.exp(-1))


def test_heat_with_a_last_visit_in_the_future_counts_full_recency_not_more() -> None:
    assert policy.heat_of(state(1, 0, last_visit_at=T0 + HOUR), T0, HeatWeights()) == pytest.approx(2.0)


def test_untouched_segment_ends_colder_than_a_recently_visited_one_with_equal_counters() -> None:
    cold, warm = state(1, 1, T0), state(1, 1, T0 + 72 * HOUR)
    now = T0 + 72 * HOUR
    assert policy.heat_of(cold, now, HeatWeights()) < policy.heat_of(warm, now, HeatWeights())


# --- keywords and segment choice ----------------------------------------------------------------------
def test_jaccard_is_case_insensitive_and_zero_for_two_empty_sets() -> None:
    assert policy.jaccard(["Tea", "cake"], ["tea", "scones"]) == pytest.approx(1 / 3)
    assert policy.jaccard(["a", "b"], ["B", "A"]) == 1.0
    assert policy.jaccard([], []) == 0.0
    assert policy.jaccard(["a"], []) == 0.0


def test_choose_segment_with_no_segments_starts_a_new_one() -> None:
    assert policy.choose_segment(axis(DIM, 0), ["x"], [], np.zeros((0, DIM), np.float32), [], 0.6) is None


def test_choose_segment_below_threshold_starts_a_new_one() -> None:
    vectors = np.stack([unit(DIM, (0, 1), (1, math.sqrt(3)))])  # cos to axis 0 = 0.5
    assert policy.choose_segment(axis(DIM, 0), ["tea"], [7], vectors, [["coffee"]], 0.6) is None


def test_choose_segment_keywords_lift_a_topic_over_the_threshold() -> None:
    vectors = np.stack([unit(DIM, (0, 1), (1, math.sqrt(3)))])  # cos 0.5, Jaccard 1/3 -> F = 0.83
    assert policy.choose_segment(axis(DIM, 0), ["tea", "cake"], [7], vectors, [["tea", "scones"]], 0.6) == 7


def test_choose_segment_threshold_is_inclusive() -> None:
    vectors = np.stack([axis(DIM, 1)])  # cos 0, Jaccard 1 -> F = 1.0 exactly
    assert policy.choose_segment(axis(DIM, 0), ["tea"], [3], vectors, [["tea"]], 1.0) == 3
    assert policy.choose_segment(axis(DIM, 0), ["tea"], [3], vectors, [["tea"]], 1.0001) is None


def test_choose_segment_picks_the_highest_score_not_the_first_over_threshold() -> None:
    vectors = np.stack([unit(DIM, (0, 4), (1, 3)), axis(DIM, 0), axis(DIM, 2)])  # cos 0.8, 1.0, 0.0
    chosen = policy.choose_segment(axis(DIM, 0), [], [10, 20, 30], vectors, [[], [], []], 0.6)
    assert chosen == 20


def test_choose_segment_tie_goes_to_the_first_segment_in_the_given_order() -> None:
    vectors = np.stack([axis(DIM, 0), axis(DIM, 0)])
    assert policy.choose_segment(axis(DIM, 0), [], [5, 4], vectors, [[], []], 0.6) == 5
    assert policy.choose_segment(axis(DIM, 0), [], [4, 5], vectors, [[], []], 0.6) == 4


# --- merging ------------------------------------------------------------------------------------------
def test_merged_keywords_puts_new_first_dedupes_cleans_and_bounds() -> None:
    assert policy.merged_keywords(["tea", "Cake"], [" CAKE", "scones", ""]) == ["cake", "scones", "tea"]
    many = [f"k{i}" for i in range(30)]
    merged = policy.merged_keywords(many, ["new"])
    assert len(merged) == policy.MAX_SEGMENT_KEYWORDS
    assert merged[0] == "new"


def test_merged_summary_prepends_new_topic_and_skips_a_repeat() -> None:
    assert policy.merged_summary("", "Tea talk.") == "Tea talk."
    assert policy.merged_summary("Tea talk.", "Cake talk.") == "Cake talk. | Tea talk."
    assert policy.merged_summary("Cake talk. | Tea talk.", "tea talk.") == "Cake talk. | Tea talk."


def test_merged_summary_is_bounded() -> None:
    merged = policy.merged_summary("o" * policy.MAX_SEGMENT_SUMMARY_CHARS, "new topic")
    assert len(merged) == policy.MAX_SEGMENT_SUMMARY_CHARS
    assert merged.startswith("new topic | ")


def test_merged_vector_is_the_renormalized_running_mean() -> None:
    merged = policy.merged_vector(axis(DIM, 0), 1, axis(DIM, 1))
    np.testing.assert_allclose(merged, unit(DIM, (0, 1), (1, 1)), atol=1e-6)
    weighted = policy.merged_vector(axis(DIM, 0), 3, axis(DIM, 1))
    np.testing.assert_allclose(weighted, unit(DIM, (0, 3), (1, 1)), atol=1e-6)
    assert weighted.dtype == np.float32


def test_merged_vector_falls_back_to_the_new_vector_when_they_cancel() -> None:
    merged = policy.merged_vector(axis(DIM, 0), 1, -axis(DIM, 0))
    np.testing.assert_allclose(merged, -axis(DIM, 0))


def test_unit_mean_is_the_normalized_mean_and_zero_stays_zero() -> None:
    mean = policy.unit_mean(np.stack([axis(DIM, 0), axis(DIM, 1)]))
    np.testing.assert_allclose(mean, unit(DIM, (0, 1), (1, 1)), atol=1e-6)
    cancelled = policy.unit_mean(np.stack([axis(DIM, 0), -axis(DIM, 0)]))
    assert not np.isnan(cancelled).any()
    np.testing.assert_allclose(cancelled, np.zeros(DIM))


# --- eviction and promotion ---------------------------------------------------------------------------
def test_segments_to_evict_nothing_at_or_under_capacity() -> None:
    assert policy.segments_to_evict({1: 0.1, 2: 0.2}, 2) == []
    assert policy.segments_to_evict({}, 1) == []


def test_segments_to_evict_the_coldest_beyond_capacity_coldest_first() -> None:
    heats = {1: 9.0, 2: 0.5, 3: 4.0, 4: 0.2}
    assert policy.segments_to_evict(heats, 3) == [4]
    assert policy.segments_to_evict(heats, 2) == [4, 2]
    assert policy.segments_to_evict(heats, 1) == [4, 2, 3]


def test_segments_to_evict_ties_go_to_the_oldest_id() -> None:
    assert policy.segments_to_evict({9: 1.0, 3: 1.0, 5: 1.0}, 1) == [3, 5]


def test_segments_to_evict_follows_heat_not_age() -> None:
    assert policy.segments_to_evict({1: 10.0, 2: 0.3}, 1) == [2]


def test_segments_to_promote_returns_every_eligible_segment_hottest_first() -> None:
    heats = {1: 9.0, 2: 5.0, 3: 7.0, 4: 4.99}
    assert policy.segments_to_promote(heats, {1, 2, 3, 4}, 5.0) == [1, 3, 2]


def test_a_hottest_segment_with_nothing_new_does_not_block_the_others() -> None:
    heats = {1: 50.0, 2: 6.0, 3: 5.5}
    assert policy.segments_to_promote(heats, {2, 3}, 5.0) == [2, 3]


def test_segments_to_promote_ties_by_id_and_none_when_nothing_new() -> None:
    assert policy.segments_to_promote({4: 6.0, 2: 6.0}, {2, 4}, 5.0) == [2, 4]
    assert policy.segments_to_promote({1: 9.0}, set(), 5.0) == []


# --- facts --------------------------------------------------------------------------------------------
def test_find_duplicate_none_for_empty_or_distant() -> None:
    assert policy.find_duplicate(axis(DIM, 0), np.zeros((0, DIM), np.float32), 0.9) is None
    assert policy.find_duplicate(axis(DIM, 0), np.stack([axis(DIM, 1)]), 0.9) is None


def test_find_duplicate_returns_the_closest_row_over_threshold() -> None:
    existing = np.stack([unit(DIM, (0, 10), (1, 2)), axis(DIM, 3), unit(DIM, (0, 10), (1, 1))])
    assert policy.find_duplicate(axis(DIM, 0), existing, 0.9) == 2
    assert policy.find_duplicate(axis(DIM, 0), existing, 0.999) is None


def test_find_duplicate_threshold_is_inclusive() -> None:
    existing = np.stack([axis(DIM, 0)])
    assert policy.find_duplicate(axis(DIM, 0), existing, 1.0) == 0


def test_normalized_fact_ignores_case_punctuation_and_spacing() -> None:
    assert policy.normalized_fact("Likes  TEA.") == policy.normalized_fact("likes tea")
    assert policy.normalized_fact("likes tea") != policy.normalized_fact("likes coffee")


def test_knowledge_to_drop_least_recently_confirmed_first_ties_oldest_id() -> None:
    updated = {1: 100.0, 2: 50.0, 3: 300.0, 4: 50.0}
    assert policy.knowledge_to_drop(updated, 4) == []
    assert policy.knowledge_to_drop(updated, 3) == [2]
    assert policy.knowledge_to_drop(updated, 1) == [2, 4, 1]
