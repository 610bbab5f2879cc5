"""Where the API stops taking writes (`services/queue/redis_full.py`): the absolute size when set (a managed
Redis that hides `maxmemory`), else the fraction of `maxmemory`, and no limit on a Redis without one."""

import pytest
from pydantic import ValidationError

from services.queue.redis_full import soft_limit_bytes
from services.queue.settings import QueueSettings


def test_the_soft_limit_is_a_fraction_of_maxmemory_unless_an_absolute_size_is_set() -> None:
    assert soft_limit_bytes(QueueSettings(), 1000) == 800
    assert soft_limit_bytes(QueueSettings(queue_soft_limit_fraction=0.5), 1000) == 500
    assert soft_limit_bytes(QueueSettings(queue_soft_limit_bytes=300), 1000) == 300
    assert soft_limit_bytes(QueueSettings(queue_soft_limit_bytes=300), 0) == 300  # maxmemory hidden


def test_a_redis_without_maxmemory_has_no_soft_limit_unless_one_is_set() -> None:
    assert soft_limit_bytes(QueueSettings(), 0) is None


@pytest.mark.parametrize(
    "bad",
    [{"queue_soft_limit_fraction": 0}, {"queue_soft_limit_fraction": 1.5}, {"queue_soft_limit_bytes": 0}],
)
def test_a_soft_limit_out_of_range_is_refused_naming_the_field(
    bad: dict[str, float],
) -> None:
    with pytest.raises(ValidationError, match=next(iter(bad))):
        QueueSettings(**bad)
