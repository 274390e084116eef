"""workers.idempotency: done markers in memory and in a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from tests.harness.processes import RedisServer
from workers.idempotency import IdempotencyStore, MemoryIdempotencyStore, RedisIdempotencyStore


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url_for_db(4))
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def store(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryIdempotencyStore()
        return
    client = Redis.from_url(redis_server.url_for_db(5))
    await client.flushdb()
    yield RedisIdempotencyStore(client)
    await client.flushdb()
    await client.aclose()


async def test_an_unknown_key_is_not_done(store: IdempotencyStore) -> None:
    assert await store.get("nope") is None


async def test_the_first_result_wins(store: IdempotencyStore) -> None:
    assert await store.mark_done("k", {"outcome": "delivered", "n": 1}, 60) is True
    assert await store.mark_done("k", {"outcome": "delivered", "n": 2}, 60) is False
    assert await store.get("k") == {"outcome": "delivered", "n": 1}


async def test_markers_expire() -> None:
    now = [0.0]
    store = MemoryIdempotencyStore(clock=lambda: now[0])
    await store.mark_done("k", {"x": 1}, 10)
    now[0] = 9.9
    assert await store.get("k") == {"x": 1}
    now[0] = 10.0
    assert await store.get("k") is None
    assert await store.mark_done("k", {"x": 2}, 10) is True


async def test_redis_markers_carry_a_ttl_and_use_the_gw_prefix(redis: Redis) -> None:
    await RedisIdempotencyStore(redis).mark_done("push:1", {"outcome": "delivered"}, 120)
    assert 0 < await redis.ttl("gw:done:push:1") <= 120


async def test_expired_markers_are_forgotten_though_their_keys_are_never_asked_again() -> None:
    """Embedded, every push leaves a marker under a key no one asks for again: without a
    sweep the gateway process held every push it ever sent."""
    now = [0.0]
    store = MemoryIdempotencyStore(clock=lambda: now[0])
    for n in range(100):
        await store.mark_done(f"push:{n}", {"outcome": "delivered"}, 10)
    now[0] = 10.0
    await store.mark_done("push:new", {"outcome": "delivered"}, 10)
    assert len(store) == 1
