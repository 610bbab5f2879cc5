"""Fair shares of the write capacity under pressure (`services/spaces/write_shares.py`): the space writing
far past the others is refused first, nobody is refused without pressure, and a refused space is admitted
again once its burst leaves the window."""

import pytest

from memoryos.space.pool import SpaceKey
from services.spaces.protocol import BackpressureError
from services.spaces.write_shares import OVERLOADED_S, SLACK, WINDOW_S, WriteShares
from tests.support.fakes import FakeClock

QUIET = [SpaceKey("acme", f"user{i}", "helper") for i in range(10)]
NOISY = SpaceKey("acme", "flood", "helper")


def test_without_pressure_every_write_is_admitted() -> None:
    shares = WriteShares(FakeClock())
    assert all(shares.admit(NOISY, under_pressure=False) for _ in range(1000))


def test_under_pressure_the_space_past_its_share_is_refused_and_the_others_go_on() -> None:
    clock = FakeClock()
    shares = WriteShares(clock)
    for space in QUIET:
        assert shares.admit(space, under_pressure=False) and shares.admit(space, under_pressure=False)
    admitted = sum(shares.admit(NOISY, under_pressure=True) for _ in range(100))
    assert 2 <= admitted <= 2 * SLACK * 2  # about SLACK times the mean of 2, then refused
    with pytest.raises(BackpressureError, match="more than its share") as refused:
        shares.refuse_past_share(NOISY, under_pressure=True, retry_after_s=2)
    assert refused.value.retry_after_s == 2
    assert all(shares.admit(space, under_pressure=True) for space in QUIET)  # the others go on
    clock.advance(WINDOW_S + 0.01)  # the burst left the window
    assert shares.admit(NOISY, under_pressure=True)


def test_a_lone_writer_under_pressure_is_not_refused() -> None:
    shares = WriteShares(FakeClock())
    assert all(shares.admit(NOISY, under_pressure=True) for _ in range(100))


def test_after_the_bound_refused_a_write_the_shares_apply_for_a_while() -> None:
    clock = FakeClock()
    shares = WriteShares(clock)
    for space in QUIET:
        assert shares.admit(space, under_pressure=False)
    shares.overloaded()
    admitted = sum(shares.admit(NOISY, under_pressure=False) for _ in range(100))
    assert admitted < 100 and admitted <= SLACK * 2
    clock.advance(WINDOW_S + 0.01)  # the burst left the window, the pressure has not ended
    for space in QUIET:
        assert shares.admit(space, under_pressure=False)
    assert sum(shares.admit(NOISY, under_pressure=False) for _ in range(100)) < 100
    clock.advance(OVERLOADED_S)
    assert all(shares.admit(NOISY, under_pressure=False) for _ in range(100))


def test_a_write_the_bound_refuses_starts_the_pressure_for_every_space() -> None:
    shares = WriteShares(FakeClock())
    for space in QUIET:
        assert shares.admit(space, under_pressure=False)

    def over_bound() -> None:
        raise BackpressureError("lag over its bound", 2)

    with pytest.raises(BackpressureError, match="over its bound"):
        shares.admit_write(NOISY, over_bound, under_pressure=False, retry_after_s=2)
    with pytest.raises(BackpressureError, match="more than its share"):
        for _ in range(100):
            shares.admit_write(NOISY, lambda: None, under_pressure=False, retry_after_s=2)
