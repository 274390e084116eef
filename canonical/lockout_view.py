"""An edge's local view of which source addresses failed a hello recently.

Why: every new connection would otherwise cost a Redis round trip (the lockout counter's
GET) before its hello, although almost every address has never failed. The counters stay
in Redis and stay authoritative; this view only answers "has this address certainly not
failed within the window?", and when it cannot be sure the edge asks Redis as before.

Safety:

- an address is known as failing from the moment any edge records a failure: the
  recording edge notes it at once, the others get it over the bus (``LOCKOUTS_CHANGED``)
  and, when their subscription (re)starts, from the index of failing addresses that every
  failure also writes;
- each entry outlives the counter it stands for by a margin (clock skew between edges);
- without a live subscription, or with more entries than ``max_entries`` (a flood of
  failing addresses), nothing is "certainly clear": every check goes to Redis;
- a check that races a failure on another edge (the message is under a millisecond
  behind) lets that connection through to its hello, as a connection opened a moment
  earlier would have been with the lookup; its failure is counted as usual;
- notices are never dropped (a missed one would let a locked-out address in): under a
  flood the view only grows, by at most one entry per refused hello.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

MARGIN_S = 30.0
MAX_ENTRIES = 10_000
PRUNE_EVERY_S = 1.0


class LockoutView:
    def __init__(
        self,
        margin_s: float = MARGIN_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.margin_s = margin_s
        self.max_entries = max_entries
        self._clock = clock
        self._until: dict[str, float] = {}
        self._live: set[object] = set()
        self._pruned_at = float("-inf")

    @property
    def live(self) -> bool:
        return bool(self._live) and len(self._until) <= self.max_entries

    def note(self, source: str, ttl_s: float) -> None:
        """`source` failed (or has failures) that count for another `ttl_s` seconds."""
        until = self._clock() + max(0.0, ttl_s) + self.margin_s
        if until > self._until.get(source, 0.0):
            self._until[source] = until
        if len(self._until) > self.max_entries:
            self._prune()

    def certainly_clear(self, source: str) -> bool:
        """True only if `source` has no failure within the window on any edge."""
        if not self.live:
            return False
        until = self._until.get(source)
        if until is None:
            return True
        if until <= self._clock():
            del self._until[source]
            return True
        return False

    def attach(self, subscription: object, failing: Iterable[tuple[str, float]]) -> None:
        """A subscription delivers failures again; `failing` is (source, seconds left) for
        every failure recorded before it started (the index)."""
        for source, ttl_s in failing:
            self.note(source, ttl_s)
        self._live.add(subscription)

    def detach(self, subscription: object) -> None:
        """Failures may be missed from now on: checks go to Redis until re-attached."""
        self._live.discard(subscription)

    def _prune(self) -> None:
        # At most once a second: under a flood of failing addresses every failure would
        # otherwise scan the whole view (the view is simply not live meanwhile).
        now = self._clock()
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        for source in [s for s, until in self._until.items() if until <= now]:
            del self._until[source]


__all__ = ["MARGIN_S", "MAX_ENTRIES", "PRUNE_EVERY_S", "LockoutView"]
