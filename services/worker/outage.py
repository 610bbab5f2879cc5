"""Waiting out Redis or the database: how long a worker's loops pause while one is away, and what they log.

A Redis restart (a rollout, a crash, its AOF replayed on start: `BusyLoadingError`) must not end the
worker: without a supervisor, writes would pile up unapplied while every read answered 503. So each loop
of the worker (applying writes, answering reads) catches `REDIS_UNAVAILABLE`, pauses `FIRST_S` doubling
to `MAX_S`, and tries again; one WARNING when an outage begins and one INFO when Redis answers again, not
a line per try. The database's restarts are waited out the same way (`DatabaseUnavailableError`): a
worker that died on one would leave a crash-looping pod behind while the database came back.
"""

import logging

from memoryos import backoff

log = logging.getLogger(__name__)

FIRST_S = 0.1
"""The first pause after Redis failed to answer: a restart on the same host is back within a second."""
MAX_S = 5.0
"""The longest pause: a worker notices Redis back within this."""


class Outage:
    """One loop's view of an outage of one dependency (Redis, the database): the pause before its next try."""

    def __init__(self, loop: str, dependency: str = "Redis") -> None:
        self._loop = loop
        self._dependency = dependency
        self._failures = 0

    def failed(self, error: Exception) -> float:
        """The dependency failed this loop's call: seconds to pause before the next try."""
        if self._failures == 0:
            log.warning(
                "%s: %s unavailable (%s); retrying", self._loop, self._dependency, type(error).__name__
            )
        self._failures += 1
        return backoff.delay_s(self._failures, FIRST_S, MAX_S)

    def over(self) -> None:
        """A call succeeded: the outage, if any, is over."""
        if self._failures:
            log.info(
                "%s: %s answers again after %d failed tries", self._loop, self._dependency, self._failures
            )
            self._failures = 0
