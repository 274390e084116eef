"""The one retry policy: exponential, capped, with full jitter.

Every reconnect loop (the edge's bus subscription and its resync requests, the plugin's
command reader, its doorbell repair and push enqueues) waits by this policy. Full jitter
(a delay drawn uniformly between 0 and the capped exponential, "Full Jitter" in tenacity's
``wait_random_exponential``): when Redis comes back, the edges, the plugin and the workers
that lost it in the same instant do not all knock again in the same instant.

``Backoff.delay`` is the pure part; ``Attempts`` counts the failures of one loop (a success
starts it over); ``retrying`` bounds a retried call in time with tenacity.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay
from tenacity.wait import wait_random_exponential

__all__ = ["RECONNECT", "Attempts", "Backoff", "retrying"]

Draw = Callable[[float, float], float]


@dataclass(frozen=True)
class Backoff:
    """Delays of ``first_s`` doubling per failure, at most ``max_s``, fully jittered."""

    first_s: float = 0.1
    max_s: float = 5.0

    def ceiling(self, failures: int) -> float:
        """The largest delay after ``failures`` failures in a row (0 for the first)."""
        if failures >= 64:  # 2**64 × first_s is past any cap; no float overflow
            return self.max_s
        return min(self.max_s, self.first_s * 2.0**failures)

    def delay(self, failures: int, draw: Draw = random.uniform) -> float:
        """Seconds to wait after ``failures`` + 1 failures in a row: uniform in
        ``[0, ceiling]``."""
        return draw(0.0, self.ceiling(failures))

    def wait(self) -> wait_random_exponential:
        """The same policy as a tenacity wait strategy."""
        return wait_random_exponential(multiplier=self.first_s, max=self.max_s)


#: Reconnecting to the bus, from any process.
RECONNECT = Backoff(first_s=0.1, max_s=5.0)


class Attempts:
    """The failures of one reconnect loop: ``next_delay`` after each, ``succeeded`` once
    it works again (the next failure waits little again)."""

    def __init__(self, policy: Backoff = RECONNECT, draw: Draw = random.uniform) -> None:
        self.policy = policy
        self.failures = 0
        self._draw = draw

    def next_delay(self) -> float:
        delay = self.policy.delay(self.failures, self._draw)
        self.failures += 1
        return delay

    def succeeded(self) -> None:
        self.failures = 0


def retrying(
    on: type[BaseException] | tuple[type[BaseException], ...],
    *,
    give_up_after_s: float,
    policy: Backoff = RECONNECT,
) -> AsyncRetrying:
    """Retry while the call raises ``on``, by ``policy``, for ``give_up_after_s`` at most;
    then the last error is raised. ``async for attempt in retrying(...): with attempt: ...``
    """
    return AsyncRetrying(
        wait=policy.wait(),
        stop=stop_after_delay(give_up_after_s),
        retry=retry_if_exception_type(on),
        reraise=True,
    )
