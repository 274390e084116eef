"""How far a tenant's devices have read, as the push workers see it.

A push is for one event (its cursor); once any device of the tenant has acknowledged
that cursor the push is moot. The plugin records every ack here (it owns the acks, in
``outbox.db``); the job reads it before *each* send attempt, because an attempt deferred
by a ``Retry-After`` or a push delay may come long after the user read the event.

Redis: the string ``gw:{tenant}:push:acked``, only ever raised by acks (a Lua
compare-and-set, so acks recorded out of order never lower it). Embedded: a dict in the
process. The plugin sets it to its outbox's own mark when it starts (``reset``): an
outbox restored from a backup or lost numbers its events from lower cursors again, and a
mark left from the old numbering would take every new event up to it for read.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, cast

from redis.asyncio import Redis

__all__ = ["AckLedger", "MemoryAcks", "RedisAcks", "acked_key"]

_RAISE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if wanted > current then
    redis.call('SET', KEYS[1], ARGV[1])
    return wanted
end
return current
"""


def acked_key(tenant: str) -> str:
    return f"gw:{tenant}:push:acked"


class AckLedger(Protocol):
    async def acked(self, tenant: str) -> int:
        """The highest cursor any device of ``tenant`` acknowledged (0: none)."""
        ...

    async def record(self, tenant: str, cursor: int) -> None:
        """A device of ``tenant`` has everything up to ``cursor`` (never lowers the mark)."""
        ...

    async def reset(self, tenant: str, cursor: int) -> None:
        """Set the mark to ``cursor``, lower or not (the plugin's outbox is the truth)."""
        ...


class RedisAcks:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def acked(self, tenant: str) -> int:
        raw = await self._redis.get(acked_key(tenant))
        return int(raw) if raw is not None else 0

    async def record(self, tenant: str, cursor: int) -> None:
        await cast(Awaitable[int], self._redis.eval(_RAISE, 1, acked_key(tenant), str(cursor)))

    async def reset(self, tenant: str, cursor: int) -> None:
        await self._redis.set(acked_key(tenant), str(cursor))


class MemoryAcks:
    def __init__(self) -> None:
        self.cursors: dict[str, int] = {}

    async def acked(self, tenant: str) -> int:
        return self.cursors.get(tenant, 0)

    async def record(self, tenant: str, cursor: int) -> None:
        self.cursors[tenant] = max(cursor, self.cursors.get(tenant, 0))

    async def reset(self, tenant: str, cursor: int) -> None:
        self.cursors[tenant] = cursor
