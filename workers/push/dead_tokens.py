"""Where dead FCM registration tokens are reported for the plugin to prune.

The plugin owns the device registry; a worker only records ``token_invalid`` outcomes
in the Redis set ``gw:{tenant}:push:dead_tokens`` (or in memory, embedded).
"""

from __future__ import annotations

from collections.abc import Awaitable
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


class RedisDeadTokens:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def add(self, tenant: str, token: str) -> None:
        await cast(Awaitable[int], self._redis.sadd(dead_tokens_key(tenant), token))


class MemoryDeadTokens:
    def __init__(self) -> None:
        self.tokens: dict[str, set[str]] = {}

    async def add(self, tenant: str, token: str) -> None:
        self.tokens.setdefault(tenant, set()).add(token)
