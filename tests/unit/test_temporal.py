"""Dates named in a query, and the page-date closeness that retrieval adds to the fused score."""

from datetime import date

import numpy as np
import pytest

from memoryos.planning.temporal import AFTER_DAYS, BEFORE_DAYS, DateWindow, date_proximity, query_date_windows


def _day(year: int, month: int, day: int) -> float:
    return float(date(year, month, day).toordinal() - date(1970, 1, 1).toordinal())


@pytest.mark.parametrize(
    ("query", "windows"),
    [
        ("What did Maria share on 16 June, 2023?", [DateWindow(6, 2023, 16)]),
        ("What did Melanie paint on October 13, 2023?", [DateWindow(10, 2023, 13)]),
        ("What happened to John's job in August 2023?", [DateWindow(8, 2023)]),
        ("When did Melanie go camping in June?", [DateWindow(6)]),
        ("Notes from 2023-05-08", [DateWindow(5, 2023, 8)]),
        ("You may go now", []),
        ("What did she do last weekend?", []),
    ],
)
def test_query_date_windows(query: str, windows: list[DateWindow]) -> None:
    assert query_date_windows(query) == windows


def test_impossible_day_falls_back_to_its_month() -> None:
    assert query_date_windows("on 31 June, 2023") == [DateWindow(6, 2023)]


def test_proximity_is_one_inside_and_decays_outside() -> None:
    days = np.array([_day(2023, 6, 16), _day(2023, 6, 14), _day(2023, 6, 24), _day(2022, 6, 16)])
    closeness = date_proximity(days, [DateWindow(6, 2023, 16)])
    assert closeness[0] == pytest.approx(1.0)
    assert closeness[1] == pytest.approx(np.exp(-2.0 / BEFORE_DAYS))
    assert closeness[2] == pytest.approx(np.exp(-7.0 / AFTER_DAYS))
    assert closeness[3] == pytest.approx(0.0, abs=1e-12)


def test_month_without_year_matches_that_month_of_any_year() -> None:
    days = np.array([_day(2022, 6, 3), _day(2023, 6, 30), _day(2023, 3, 1)])
    closeness = date_proximity(days, [DateWindow(6)])
    assert closeness[:2] == pytest.approx([1.0, 1.0])
    assert closeness[2] < 1e-6


def test_no_windows_means_no_bonus() -> None:
    assert not date_proximity(np.array([_day(2023, 1, 1)]), []).any()


def test_a_page_without_a_readable_date_gets_no_bonus_and_no_nan() -> None:
    days = np.array([np.nan, _day(2023, 6, 16)])
    for windows in ([DateWindow(6, 2023, 16)], [DateWindow(6)]):
        closeness = date_proximity(days, windows)
        assert closeness.tolist() == pytest.approx([0.0, 1.0])
    assert date_proximity(np.array([np.nan]), [DateWindow(6)]).tolist() == [0.0]
