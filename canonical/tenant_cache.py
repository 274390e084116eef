"""An edge's short-lived memory of which tenant a token digest opens.

Why: every hello would otherwise cost a registry lookup (HGET) on top of the lockout check
and the hello itself. Safety:

- keyed by the token's SHA-256 digest, never the token; only *successful* lookups are
  kept, so a wrong token always reaches Redis and counts towards the lockout;
- used only while a bus subscription is live to deliver invalidations: the plugin
  publishes a digest on ``TENANTS_CHANGED`` when it unregisters (rotation, retirement) or
  re-maps it, and every edge drops it at once. When the subscription drops, the cache is
  cleared and bypassed until it is back (invalidations may have been missed);
- a lookup that raced an invalidation is not stored (generation check);
- whatever happens, an entry lives at most ``TTL_S`` seconds.
"""

from __future__ import annotations

import time

TTL_S = 5.0


class TenantCache:
    def __init__(self, ttl_s: float = TTL_S) -> None:
        self.ttl_s = ttl_s
        self.generation = 0
        self._entries: dict[str, tuple[str, float]] = {}
        self._live: set[object] = set()

    @property
    def enabled(self) -> bool:
        return bool(self._live)

    def get(self, digest: str) -> str | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            self._entries.pop(digest, None)
            return None
        return entry[0]

    def put(self, digest: str, tenant: str, generation: int) -> None:
        """Keep a lookup made at `generation`, unless an invalidation came meanwhile."""
        if self._live and generation == self.generation:
            self._entries[digest] = (tenant, time.monotonic() + self.ttl_s)

    def forget(self, digest: str | None = None) -> None:
        """Drop one digest (None: all), and refuse lookups already in flight."""
        self.generation += 1
        if digest is None:
            self._entries.clear()
        else:
            self._entries.pop(digest, None)

    def attach(self, subscription: object) -> None:
        """A subscription is (again) receiving invalidations; what it missed is dropped."""
        self._live.add(subscription)
        self.forget()

    def detach(self, subscription: object) -> None:
        self._live.discard(subscription)
        self.forget()


__all__ = ["TTL_S", "TenantCache"]
