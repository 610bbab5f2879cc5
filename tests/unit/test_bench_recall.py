"""Leave-one-conversation-out in `bench/quality/recall.py`, on hand-made recall reports."""

from bench.quality.recall import LEAVE_ONE_OUT_K, held_out_markdown, leave_one_out, pooled
from memoryos.eval.metrics import RecallReport


def report(overall: float, by_category: dict[int, tuple[float, int]]) -> RecallReport:
    """A report whose recall@k is `overall` and, per category, (recall, questions)."""
    ks = (LEAVE_ONE_OUT_K,)
    return RecallReport(
        ks=ks,
        overall={LEAVE_ONE_OUT_K: overall},
        by_category={c: {LEAVE_ONE_OUT_K: r} for c, (r, _) in by_category.items()},
        question_count=sum(n for _, n in by_category.values()),
        category_counts={c: n for c, (_, n) in by_category.items()},
        without_evidence=0,
    )


def test_each_conversation_gets_the_value_best_on_the_others() -> None:
    # Value 0.5 is best on conversations 0 and 1, value 1.0 on conversation 2 alone.
    reports = {
        0.5: [report(0.9, {1: (0.9, 1)}), report(0.8, {1: (0.8, 1)}), report(0.1, {1: (0.1, 1)})],
        1.0: [report(0.5, {1: (0.5, 1)}), report(0.5, {1: (0.5, 1)}), report(0.9, {1: (0.9, 1)})],
    }
    chosen = leave_one_out(reports)
    # Held out 0: others mean 0.45 (0.5) vs 0.7 (1.0); held out 1: 0.5 vs 0.7; held out 2: 0.85 vs 0.5.
    assert [value for value, _ in chosen] == [1.0, 1.0, 0.5]
    assert [r.overall[LEAVE_ONE_OUT_K] for _, r in chosen] == [0.5, 0.5, 0.1]


def test_a_tie_goes_to_the_smaller_value() -> None:
    same = [report(0.5, {1: (0.5, 1)})] * 3
    assert [value for value, _ in leave_one_out({1.0: same, 0.25: same})] == [0.25] * 3


def test_categories_are_pooled_by_question_count() -> None:
    pooled_recall = pooled([report(0.0, {1: (1.0, 1), 4: (0.5, 2)}), report(0.0, {1: (0.0, 3)})])
    assert pooled_recall == {1: 0.25, 4: 0.5}


def test_the_table_has_a_row_per_value_and_the_held_out_row() -> None:
    reports = {0.5: [report(0.6, {1: (0.6, 1)})] * 3, 1.0: [report(0.4, {1: (0.4, 1)})] * 3}
    table = held_out_markdown("w", ["a", "b", "c"], reports, leave_one_out(reports))
    lines = table.splitlines()
    assert len(lines) == 2 + 2 + 1
    assert lines[-1].startswith("| held out (chosen a: 0.5, b: 0.5, c: 0.5) | 0.600 |")
