"""The mixed-load bench reports the retrieve latency of a whole phase, and again without the reads sent in
its first seconds, when every client is a new user whose first writes and read arrive together (the
Redis-mode p99 was all in that second: docs/reliability.md, "A waiting read looks when told")."""

from bench.serving.mixed_load import Tally, summary


def test_the_start_of_a_phase_is_left_out_of_the_second_figures_only() -> None:
    tally = Tally(read_s=[2.0, 2.5] + [0.1] * 98, read_at=[0.2, 0.4] + [6.0 + i / 10 for i in range(98)])

    report = summary(tally, seconds=30, start_s=5)

    assert report["retrieve_p99_s"] == 2.5  # the whole phase, burst included
    assert report["retrieve_p99_s_after_start"] == 0.1
    assert report["retrieve_p50_s_after_start"] == 0.1 and report["start_s"] == 5
    assert report["reads_answered"] == 100


def test_a_phase_shorter_than_its_start_has_no_second_figures() -> None:
    report = summary(Tally(read_s=[0.3], read_at=[1.0]), seconds=3, start_s=5)

    assert report["retrieve_p99_s"] == 0.3 and report["retrieve_p99_s_after_start"] is None
