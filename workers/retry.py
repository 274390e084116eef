"""Retry delays: exponential backoff with jitter, and honouring ``Retry-After``.

Pure functions of (try number, random draw), so tests pin the draw. Job functions turn
the delay into ``arq.Retry(defer=...)``; the in-process runner honours the same
exception, so both modes back off identically.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RetryPolicy"]

_MAX_EXPONENT = 64


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``base * factor**(try-1)`` capped at ``cap``, with "equal jitter".

    Equal jitter keeps half the delay and randomises the other half: retries of a
    burst spread out, yet no retry comes back almost immediately.
    """

    base: float = 2.0
    factor: float = 2.0
    cap: float = 600.0
    retry_after_cap: float = 86_400.0
    rng: Callable[[], float] = random.random

    def backoff(self, job_try: int, draw: float | None = None) -> float:
        """Delay before try ``job_try + 1`` after try ``job_try`` (1-based) failed."""
        exponent = min(max(job_try, 1) - 1, _MAX_EXPONENT)
        ceiling = min(self.cap, self.base * self.factor**exponent)
        u = self.rng() if draw is None else draw
        return ceiling / 2 + ceiling / 2 * min(max(u, 0.0), 1.0)

    def after(self, retry_after: float, draw: float | None = None) -> float:
        """Delay honouring a server's ``Retry-After``: never earlier, up to 10% later."""
        wait = min(max(retry_after, 0.0), self.retry_after_cap)
        u = self.rng() if draw is None else draw
        return wait + min(wait * 0.1, 5.0) * min(max(u, 0.0), 1.0)
