"""How long the plugin may take to stop, and how to share that time out.

Hermes gives each platform's ``disconnect()`` ``HERMES_GATEWAY_ADAPTER_DISCONNECT_TIMEOUT``
seconds (5 by default; 0 waits for ever), then cancels it and carries on shutting down.
A cancelled stop closes nothing in order, so the plugin fits its own waits (the pushes
being queued, the jobs still running, ``HDG_JOB_COMPLETION_WAIT`` at most) inside that
budget, keeping a margin for closing its files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

HERMES_TIMEOUT_ENV = "HERMES_GATEWAY_ADAPTER_DISCONNECT_TIMEOUT"
HERMES_DEFAULT_S = 5.0  # gateway/run.py _ADAPTER_DISCONNECT_TIMEOUT_SECS_DEFAULT
MARGIN_S = 0.75  # closing the SQLite files and the bus after the waits


def disconnect_budget(env: Mapping[str, str]) -> float | None:
    """Seconds Hermes waits for ``disconnect()``, as it reads them; None: no limit."""
    raw = env.get(HERMES_TIMEOUT_ENV, "").strip()
    if not raw:
        return HERMES_DEFAULT_S
    try:
        seconds = float(raw)
    except ValueError:
        return HERMES_DEFAULT_S  # Hermes ignores it too
    if seconds != seconds or seconds <= 0:  # NaN compares as "not positive" for Hermes: none
        return None
    return seconds


class Deadline:
    """The time left of a stop budget; without one, every wait keeps its own cap."""

    def __init__(self, budget: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._end = None if budget is None else clock() + max(0.0, budget - MARGIN_S)

    def left(self, cap: float) -> float:
        """Seconds a wait capped at `cap` may take now (0 once the budget is spent)."""
        if self._end is None:
            return cap
        return max(0.0, min(cap, self._end - self._clock()))


UNBOUNDED = Deadline(None)  # a stop without a budget: every wait keeps its own cap
