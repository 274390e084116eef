"""Idempotency ("done") markers for at-least-once jobs.

arq may run a job again after a worker dies. Each job carries an idempotency key; when
the job *succeeds* it records its result under that key with ``SET NX``. A re-run finds
the marker and returns the recorded result instead of pushing or transcoding again.

The store is an injectable interface: :class:`RedisIdempotencyStore` for arq workers,
:class:`MemoryIdempotencyStore` for the embedded in-process runner and for tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from redis.asyncio import Redis

__all__ = [
    "DONE_KEY_PREFIX",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "RedisIdempotencyStore",
]

DONE_KEY_PREFIX = "gw:done:"


class IdempotencyStore(Protocol):
    """Where finished jobs leave their result, keyed by idempotency key."""

    async def get(self, key: str) -> dict[str, Any] | None:
        """The recorded result of a finished job, or ``None``."""
        ...

    async def mark_done(self, key: str, result: Mapping[str, Any], ttl_seconds: int) -> bool:
        """Record ``result`` unless a result exists already; ``True`` if recorded."""
        ...


class RedisIdempotencyStore:
    """Markers as ``gw:done:<key>`` strings holding the JSON result, with a TTL."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await self._redis.get(DONE_KEY_PREFIX + key)
        if raw is None:
            return None
        value = json.loads(raw)
        return value if isinstance(value, dict) else {"result": value}

    async def mark_done(self, key: str, result: Mapping[str, Any], ttl_seconds: int) -> bool:
        payload = json.dumps(dict(result), separators=(",", ":"), default=str)
        created = await self._redis.set(DONE_KEY_PREFIX + key, payload, nx=True, ex=ttl_seconds)
        return bool(created)


class MemoryIdempotencyStore:
    """Process-local markers with expiry (embedded mode and tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}

    async def get(self, key: str) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, result = entry
        if expires_at <= self._clock():
            del self._entries[key]
            return None
        return dict(result)

    def __len__(self) -> int:
        """How many markers are held (expired ones not swept yet included)."""
        return len(self._entries)

    async def mark_done(self, key: str, result: Mapping[str, Any], ttl_seconds: int) -> bool:
        if await self.get(key) is not None:
            return False
        self._sweep()
        self._entries[key] = (
            self._clock() + ttl_seconds,
            json.loads(json.dumps(dict(result), default=str)),
        )
        return True

    def _sweep(self) -> None:
        """Forget expired markers, oldest first: a push's key is never asked for again, so
        `get` alone would keep every marker for the life of the process. Markers share one
        TTL in practice, so insertion order is expiry order and this stops at the first
        live one (amortised O(1) per marker)."""
        now = self._clock()
        while self._entries:
            key = next(iter(self._entries))
            if self._entries[key][0] > now:
                break
            del self._entries[key]
