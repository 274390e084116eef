"""Where dead FCM registration tokens are reported for the plugin to prune.

The plugin owns the device registry; a worker only records ``token_invalid`` outcomes
in the Redis set ``gw:{tenant}:push:dead_tokens`` (or in memory, embedded). Before it
chooses whom to push, the plugin reads the set, clears those tokens in its registry and
only then removes them from the set, so a report is never lost between the two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Protocol, cast

from redis.asyncio import Redis

__all__ = [
    "DeadTokenRegistry",
    "MemoryDeadTokens",
    "RedisDeadTokens",
    "dead_tokens_key",
]


def dead_tokens_key(tenant: str) -> str:
    return f"gw:{tenant}:push:dead_tokens"


class DeadTokenRegistry(Protocol):
    async def add(self, tenant: str, token: str) -> None:
        """Record ``token`` as permanently invalid for ``tenant``."""
        ...

    async def members(self, tenant: str) -> set[str]:
        """The tokens reported dead for ``tenant`` and not yet pruned."""
        ...

    async def discard(self, tenant: str, tokens: Iterable[str]) -> None:
        """Forget reports: pruned from the registry, or registered again by a device."""
        ...


class RedisDeadTokens:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def add(self, tenant: str, token: str) -> None:
        await cast(Awaitable[int], self._redis.sadd(dead_tokens_key(tenant), token))

    async def members(self, tenant: str) -> set[str]:
        raw = await cast(Awaitable[set[bytes]], self._redis.smembers(dead_tokens_key(tenant)))
        return {item.decode() if isinstance(item, bytes) else str(item) for item in raw}

    async def discard(self, tenant: str, tokens: Iterable[str]) -> None:
        gone = list(tokens)
        if gone:
            await cast(Awaitable[int], self._redis.srem(dead_tokens_key(tenant), *gone))


class MemoryDeadTokens:
    def __init__(self) -> None:
        self.tokens: dict[str, set[str]] = {}

    async def add(self, tenant: str, token: str) -> None:
        self.tokens.setdefault(tenant, set()).add(token)

    async def members(self, tenant: str) -> set[str]:
        return set(self.tokens.get(tenant, ()))

    async def discard(self, tenant: str, tokens: Iterable[str]) -> None:
        self.tokens.get(tenant, set()).difference_update(tokens)
