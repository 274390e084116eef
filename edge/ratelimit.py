"""A token bucket: pure, clock injected, so it is tested without sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    __slots__ = ("_at", "_clock", "_tokens", "burst", "rate")

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self, cost: float = 1.0) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= cost:
            self._tokens -= cost
            return True
        return False
