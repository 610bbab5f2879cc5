"""Dates a query names, and how close a page's timestamp is to them.

A question such as "What did Maria share on 16 June, 2023?" or "What happened to John's job in August
2023?" names the day or month the answer was said; every page carries the time it was stored, so pages
stored then are more likely to hold the answer. Re-ranking by it raises recall with no model call
(docs/retrieval.md).
"""

import calendar
import re
from dataclasses import dataclass
from datetime import date

import numpy as np

_MONTHS: dict[str, int] = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"

_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH})\.?,?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?{_YEAR}\b", re.IGNORECASE)
_MONTH_ONLY = re.compile(
    r"\b(?:in|during)\s+(January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\b(?!\.?,?\s*\d)"
)
"""A capitalized month after "in"/"during", with no day or year: "camping in June". Case-sensitive, so the
verb "may" is never read as a month."""

BEFORE_DAYS = 2.0
"""Decay (days) for pages stored before a named date: time zones and "the week before August 3"."""

AFTER_DAYS = 7.0
"""Decay (days) for pages stored after a named date: events are told after they happen ("last week")."""

_UNIX_EPOCH_JULIAN_DAY = 2440587.5


@dataclass(frozen=True)
class DateWindow:
    """A day or a month the query names; `year` None means that month of any year."""

    month: int
    year: int | None = None
    day: int | None = None

    def bounds(self, year: int) -> tuple[float, float]:
        """[start, end) in days since the Unix epoch, for the window placed in `year`."""
        if self.day is not None:
            start = date(year, self.month, self.day)
            return _epoch_days(start), _epoch_days(start) + 1.0
        end = date(year + 1, 1, 1) if self.month == 12 else date(year, self.month + 1, 1)
        return _epoch_days(date(year, self.month, 1)), _epoch_days(end)


def _epoch_days(day: date) -> float:
    return float(day.toordinal() - date(1970, 1, 1).toordinal())


def query_date_windows(query: str) -> list[DateWindow]:
    """The days and months `query` names, in order; impossible dates (31 June) are skipped."""
    windows: list[DateWindow] = []
    taken: list[tuple[int, int]] = []

    def add(match: re.Match[str], window: DateWindow) -> None:
        try:
            window.bounds(window.year if window.year is not None else 2000)
        except ValueError:
            return
        taken.append(match.span())
        windows.append(window)

    for match in _DAY_MONTH_YEAR.finditer(query):
        add(match, DateWindow(_MONTHS[match[2].lower()], int(match[3]), int(match[1])))
    for match in _MONTH_DAY_YEAR.finditer(query):
        add(match, DateWindow(_MONTHS[match[1].lower()], int(match[3]), int(match[2])))
    for match in _ISO_DATE.finditer(query):
        if 1 <= int(match[2]) <= 12:
            add(match, DateWindow(int(match[2]), int(match[1]), int(match[3])))
    for match in _MONTH_YEAR.finditer(query):
        if not any(start <= match.start() < end for start, end in taken):
            add(match, DateWindow(_MONTHS[match[1].lower()], int(match[2])))
    for match in _MONTH_ONLY.finditer(query):
        add(match, DateWindow(_MONTHS[match[1].lower()]))
    return windows


def julian_to_epoch_days(julian_days: np.ndarray) -> np.ndarray:
    """SQLite `julianday()` values as days since the Unix epoch."""
    return julian_days - _UNIX_EPOCH_JULIAN_DAY


def date_proximity(epoch_days: np.ndarray, windows: list[DateWindow]) -> np.ndarray:
    """Per page: 1 inside a window, decaying exponentially before its start (`BEFORE_DAYS`) and after its
    end (`AFTER_DAYS`); the best over the windows. A month without a year is placed in each page's year and
    the year before (a December window reaches into January). A page whose timestamp SQLite could not
    read (NaN) gets 0: no date bonus, and no NaN in the ranking."""
    best = np.zeros(len(epoch_days))
    dated = np.isfinite(epoch_days)
    if not windows or not dated.any():
        return best
    if not dated.all():
        best[dated] = date_proximity(epoch_days[dated], windows)
        return best
    page_years: set[int] = set()
    if any(window.year is None for window in windows):
        years = np.unique(epoch_days.astype("timedelta64[D]").astype("datetime64[D]").astype("datetime64[Y]"))
        page_years = {int(year) + 1970 for year in years.astype(int)}
    for window in windows:
        placed = (
            [window.year] if window.year is not None else sorted({y - 1 for y in page_years} | page_years)
        )
        for year in placed:
            start, end = window.bounds(year)
            before = np.maximum(start - epoch_days, 0.0)
            after = np.maximum(epoch_days - end, 0.0)
            closeness = np.exp(-before / BEFORE_DAYS - after / AFTER_DAYS)
            best = np.maximum(best, closeness)
    return best
