"""The bus contract on RedisBus against a real redis-server, plus surviving Redis faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis

from canonical.bus import TENANTS_KEY, command_stream, token_digest
from canonical.errors import BusUnavailable
from canonical.redis_bus import MAX_BLOCK_MS, RedisBus
from canonical.redis_timeouts import RedisTimeouts
from tests.harness.processes import RedisServer

from .test_bus_contract import BusContract, Recorder, settle, unique

T = TypeVar("T")


class TestRedisBusContract(BusContract):
    @pytest.fixture
    async def bus(self, redis_server: RedisServer) -> AsyncIterator[RedisBus]:
        bus = RedisBus(redis_server.url)
        yield bus
        await bus.close()


class Closer:
    """`closing(thing)` returns `thing` and closes it after the test, last opened first."""

    def __init__(self) -> None:
        self.opened: list[Any] = []

    def __call__(self, thing: T) -> T:
        self.opened.append(thing)
        return thing


@pytest.fixture
async def closing() -> AsyncIterator[Closer]:
    closer = Closer()
    yield closer
    for thing in reversed(closer.opened):
        await (thing.aclose() if hasattr(thing, "aclose") else thing.close())


async def _wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.02)


async def test_the_registry_stores_the_token_digest_never_the_token(
    redis_server: RedisServer,
) -> None:
    bus = RedisBus(redis_server.url)
    raw = aioredis.from_url(redis_server.url)
    try:
        tenant, token = unique("tenant"), unique("token") * 2
        await bus.register_tenant(tenant, token)
        stored = await raw.hgetall(TENANTS_KEY)
        assert stored[token_digest(token).encode()] == tenant.encode()
        assert all(token.encode() not in k and token.encode() not in v for k, v in stored.items())
        await bus.unregister_tenant(tenant, token)
    finally:
        await raw.aclose()
        await bus.close()


async def test_commands_live_in_the_tenants_own_stream(redis_server: RedisServer) -> None:
    bus = RedisBus(redis_server.url)
    raw = aioredis.from_url(redis_server.url)
    try:
        tenant = unique("tenant")
        await bus.submit(tenant, {"cmd": "ping"})
        assert await raw.xlen(command_stream(tenant)) == 1
        assert command_stream(tenant) == f"hdg:{{{tenant}}}:cmd"
    finally:
        await raw.aclose()
        await bus.close()


async def test_a_subscription_survives_a_redis_kill9_and_restart_and_calls_on_reconnect(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    bus = RedisBus(server.url)
    recorder = Recorder()
    reconnects: list[float] = []
    tenant, edge = unique("tenant"), unique("edge")
    sub = bus.subscription(edge, recorder, on_reconnect=lambda: reconnects.append(time.monotonic()))
    publisher = RedisBus(server.url)
    try:
        await sub.start()
        await sub.add_tenant(tenant)
        await settle(recorder, lambda p: publisher.publish(tenant, p))
        assert reconnects == []

        await asyncio.to_thread(server.kill9)
        await asyncio.to_thread(server.restart)
        await _wait_until(lambda: bool(reconnects))

        # Both the tenant channel and the edge's own channel are subscribed again.
        await settle(recorder, lambda p: publisher.publish(tenant, p))
        await settle(recorder, lambda p: publisher.reply(edge, p))
        await publisher.publish(tenant, b"after restart")
        await recorder.wait_for(b"after restart")
        assert recorder.real == [("event", tenant, b"after restart")]
        assert len(reconnects) == 1
    finally:
        await sub.close()
        await publisher.close()
        await bus.close()


async def test_submit_while_redis_is_down_raises_bus_unavailable_and_recovers_after(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    bus = RedisBus(server.url)
    tenant = unique("tenant")
    try:
        await bus.submit(tenant, {"n": 1})
        await asyncio.to_thread(server.kill9)
        with pytest.raises(BusUnavailable):
            await bus.submit(tenant, {"n": 2})
        with pytest.raises(BusUnavailable):
            await bus.submit(tenant, {"n": 3})
        with pytest.raises(BusUnavailable):
            await bus.publish(tenant, b"x")
        with pytest.raises(BusUnavailable):
            await bus.resolve_tenant("t" * 20)
        with pytest.raises(BusUnavailable):
            await bus.consume(tenant, "c1", block_ms=10)
        assert await bus.ping() is False

        await asyncio.to_thread(server.restart)
        # The dead pooled connection may fail once more; the next call reconnects.
        for _ in range(20):
            try:
                await bus.submit(tenant, {"n": 4})
                break
            except BusUnavailable:
                await asyncio.sleep(0.05)
        assert await bus.ping() is True
        batch = await bus.consume(tenant, "c1", block_ms=100)
        assert [c for _, c in batch] == [{"n": 4}]
    finally:
        await bus.close()


async def test_a_tenant_added_while_the_subscription_is_connecting_is_not_lost(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add_tenant() racing the (re)connect's SUBSCRIBE must still end up subscribed."""
    bus = RedisBus(redis_server.url)
    publisher = RedisBus(redis_server.url)
    gate = asyncio.Event()
    real_open = RedisBus.open_subscriber

    async def gated_open(self: RedisBus, *args: Any, **kwargs: Any) -> Any:
        await gate.wait()  # the connect + SUBSCRIBE round trip, held open
        return await real_open(self, *args, **kwargs)

    monkeypatch.setattr(RedisBus, "open_subscriber", gated_open)
    recorder = Recorder()
    tenant, edge = unique("tenant"), unique("edge")
    sub = bus.subscription(edge, recorder)
    try:
        starting = asyncio.create_task(sub.start())
        await asyncio.sleep(0.05)  # the subscription task is inside SUBSCRIBE now
        await sub.add_tenant(tenant)
        gate.set()
        await starting
        await settle(recorder, lambda p: publisher.reply(edge, p))
        await settle(recorder, lambda p: publisher.publish(tenant, p), timeout=3.0)
    finally:
        await sub.close()
        await publisher.close()
        await bus.close()


async def test_a_tenant_added_while_the_lockout_index_loads_is_not_lost(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, closing: Closer
) -> None:
    """The subscription awaits the lockout index after SUBSCRIBE: add_tenant() racing
    that round trip must still end up subscribed."""
    bus = closing(RedisBus(redis_server.url))
    publisher = closing(RedisBus(redis_server.url))
    gate, loading = asyncio.Event(), asyncio.Event()
    real_load = bus.failing_sources

    async def gated_load() -> list[tuple[str, float]]:
        loading.set()
        await gate.wait()
        return await real_load()

    monkeypatch.setattr(bus, "failing_sources", gated_load)
    recorder = Recorder()
    tenant, edge = unique("tenant"), unique("edge")
    sub = closing(bus.subscription(edge, recorder))
    starting = asyncio.create_task(sub.start())
    await asyncio.wait_for(loading.wait(), 5.0)
    await sub.add_tenant(tenant)
    gate.set()
    await starting
    await settle(recorder, lambda p: publisher.reply(edge, p))
    await settle(recorder, lambda p: publisher.publish(tenant, p), timeout=3.0)


async def _calls(raw: Any, command: str) -> int:
    """How many times this Redis ran `command` (a private server counts one test's)."""
    stats = await raw.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def _eventually(check: Callable[[], Any], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.01)


async def test_an_edge_caches_a_token_and_drops_it_as_soon_as_the_plugin_retires_it(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()  # private: commandstats count only this test's lookups
    plugin, edge = RedisBus(server.url), RedisBus(server.url)
    raw = aioredis.from_url(server.url)
    recorder = Recorder()
    sub = edge.subscription(unique("edge"), recorder)
    tenant, other, token = unique("tenant"), unique("tenant"), unique("token") * 2
    try:
        await sub.start()
        await plugin.register_tenant(tenant, token)
        await _cached(edge, token, tenant)  # once the registration's invalidation is past
        lookups = await _calls(raw, "hget")
        assert [await edge.resolve_tenant(token) for _ in range(5)] == [tenant] * 5
        assert await _calls(raw, "hget") == lookups  # answered from the cache

        await plugin.register_tenant(tenant, token)  # the heartbeat: nothing changes
        assert await edge.resolve_tenant(token) == tenant

        await plugin.unregister_tenant(tenant, token)  # rotation retires the token
        await _eventually(lambda: _is(edge.resolve_tenant(token), None))

        await plugin.register_tenant(tenant, token)
        await _cached(edge, token, tenant)
        await plugin.register_tenant(other, token)  # re-mapped to another tenant
        await _eventually(lambda: _is(edge.resolve_tenant(token), other))
    finally:
        await sub.close()
        await raw.aclose()
        await plugin.close()
        await edge.close()


async def test_without_a_live_subscription_every_lookup_asks_the_registry(
    redis_server: RedisServer,
) -> None:
    bus = RedisBus(redis_server.url)
    raw = aioredis.from_url(redis_server.url)
    tenant, token = unique("tenant"), unique("token") * 2
    try:
        await bus.register_tenant(tenant, token)
        assert await bus.resolve_tenant(token) == tenant
        await raw.hdel(TENANTS_KEY, token_digest(token))  # removed behind the bus' back
        assert await bus.resolve_tenant(token) is None
    finally:
        await raw.aclose()
        await bus.close()


async def test_a_subscription_that_reconnects_forgets_what_it_cached(
    redis_factory: Callable[..., RedisServer],
) -> None:
    """Invalidations published while it was down were missed: nothing cached survives."""
    server = redis_factory()
    bus = RedisBus(server.url)
    reconnects: list[float] = []
    sub = bus.subscription(unique("edge"), Recorder(), lambda: reconnects.append(1.0))
    tenant, token = unique("tenant"), unique("token") * 2
    try:
        await sub.start()
        await bus.register_tenant(tenant, token)
        await _cached(bus, token, tenant)
        await asyncio.to_thread(server.kill9)
        await asyncio.to_thread(server.restart)
        await _wait_until(lambda: bool(reconnects))
        assert bus.tenants.get(token_digest(token)) is None
        assert await bus.resolve_tenant(token) is None  # the restarted registry is empty
    finally:
        await sub.close()
        await bus.close()


async def _cached(bus: RedisBus, token: str, tenant: str) -> None:
    async def check() -> bool:
        return await bus.resolve_tenant(token) == tenant and bool(
            bus.tenants.get(token_digest(token)) == tenant
        )

    await _eventually(check)


async def _is(pending: Any, expected: Any) -> bool:
    return bool(await pending == expected)


async def test_publish_nowait_hands_events_over_in_order_once_connected(
    redis_server: RedisServer,
) -> None:
    bus = RedisBus(redis_server.url)
    recorder = Recorder()
    tenant, edge = unique("tenant"), unique("edge")
    sub = bus.subscription(edge, recorder)
    try:
        assert bus.publish_nowait(tenant, b"before") is False  # not connected yet
        await sub.start()
        await sub.add_tenant(tenant)
        await settle(recorder, lambda p: bus.publish(tenant, p))
        sent = [f"n{n}".encode() for n in range(50)]
        for n, payload in enumerate(sent):
            if n % 10 == 0:
                await bus.publish(tenant, payload)
            else:
                assert bus.publish_nowait(tenant, payload) is True
        await _wait_until(lambda: recorder.payloads()[-50:] == sent, timeout=5.0)
    finally:
        await sub.close()
        await bus.close()


async def test_edges_skip_the_lockout_lookup_for_clean_addresses_and_learn_failures_at_once(
    redis_factory: Callable[..., RedisServer], closing: Closer
) -> None:
    server = redis_factory()  # private: commandstats count only this test's lookups
    one, two = closing(RedisBus(server.url)), closing(RedisBus(server.url))
    raw = closing(aioredis.from_url(server.url))
    for bus in (one, two):
        await closing(bus.subscription(unique("edge"), Recorder())).start()
    await _wait_until(lambda: one.lockouts.live and two.lockouts.live)
    gets = await _calls(raw, "get")
    assert [await two.lockout_count("10.1.1.1") for _ in range(5)] == [0] * 5
    assert await _calls(raw, "get") == gets  # answered by the view

    assert await one.lockout_hit("10.1.1.1", 60.0) == 1
    assert await one.lockout_count("10.1.1.1") == 1  # the recording edge: at once
    await _eventually(lambda: _is(two.lockout_count("10.1.1.1"), 1))
    assert await two.lockout_hit("10.1.1.1", 60.0) == 2
    assert await one.lockout_count("10.1.1.1") == 2
    assert await _calls(raw, "get") > gets
    assert await two.lockout_count("10.9.9.9") == 0


async def test_an_edge_that_subscribes_later_knows_the_failures_recorded_before(
    redis_server: RedisServer, closing: Closer
) -> None:
    early, late = closing(RedisBus(redis_server.url)), closing(RedisBus(redis_server.url))
    source = unique("10.2.2")
    for _ in range(3):
        await early.lockout_hit(source, 60.0)
    await closing(late.subscription(unique("edge"), Recorder())).start()
    assert late.lockouts.live
    assert not late.lockouts.certainly_clear(source)
    assert await late.lockout_count(source) == 3


async def test_while_its_subscription_is_down_an_edge_asks_redis_every_time(
    redis_factory: Callable[..., RedisServer], closing: Closer
) -> None:
    server = redis_factory()
    bus, other = closing(RedisBus(server.url)), closing(RedisBus(server.url))
    reconnects: list[float] = []
    sub = closing(bus.subscription(unique("edge"), Recorder(), lambda: reconnects.append(1.0)))
    await sub.start()
    await asyncio.to_thread(server.kill9)
    await _wait_until(lambda: not bus.lockouts.live)
    await asyncio.to_thread(server.restart)
    await other.lockout_hit("10.3.3.3", 60.0)  # may land before the view is back
    await _wait_until(lambda: bool(reconnects))
    assert await bus.lockout_count("10.3.3.3") == 1


# Short bounds, so that a frozen server is noticed quickly.
QUICK = RedisTimeouts(connect_s=1.0, command_s=0.3, health_check_s=0.3)


async def _unavailable(call: Any) -> None:
    """The call fails as BusUnavailable, within a bounded wait (never hangs)."""
    with pytest.raises(BusUnavailable):
        await asyncio.wait_for(call, 10)


async def test_every_command_to_a_frozen_redis_is_unavailable_and_the_bus_recovers_after(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    bus = RedisBus(server.url, QUICK)
    tenant, token = unique("tenant"), unique("token") * 2
    try:
        await bus.register_tenant(tenant, token)
        assert await bus.consume(tenant, "c1", block_ms=10) == []  # the group exists
        with server.frozen():
            await _unavailable(bus.submit(tenant, {"n": 1}))
            await _unavailable(bus.publish(tenant, b"x"))
            await _unavailable(bus.resolve_tenant("t" * 20))
            await _unavailable(bus.register_tenant(tenant, token))
            await _unavailable(bus.consume(tenant, "c1", block_ms=100))
            await _unavailable(bus.reclaim(tenant, "c1"))
            await _unavailable(bus.ack_many(tenant, ["1-1"]))
            assert await asyncio.wait_for(bus.ping(), 10) is False
        await bus.submit(tenant, {"n": 2})
        assert await bus.ping() is True
        batch = await bus.consume(tenant, "c1", block_ms=100)
        # What timed out may still have been carried out (it reached the server's socket
        # before it froze): unavailable means "maybe", and clients retry idempotently.
        assert [c for _, c in batch][-1] == {"n": 2}
        assert await bus.resolve_tenant(token) == tenant
    finally:
        await bus.close()


async def test_a_subscription_whose_redis_freezes_resubscribes_once_it_thaws(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    bus = RedisBus(server.url, QUICK)
    publisher = RedisBus(server.url, QUICK)
    recorder = Recorder()
    reconnects: list[float] = []
    tenant, edge = unique("tenant"), unique("edge")
    sub = bus.subscription(edge, recorder, on_reconnect=lambda: reconnects.append(time.monotonic()))
    try:
        await sub.start()
        await sub.add_tenant(tenant)
        await settle(recorder, lambda p: publisher.publish(tenant, p))
        with server.frozen():
            await _wait_until(lambda: not sub.connected, timeout=10)  # type: ignore[attr-defined]
        await _wait_until(lambda: bool(reconnects))
        await settle(recorder, lambda p: publisher.publish(tenant, p))
        await settle(recorder, lambda p: publisher.reply(edge, p))
        await publisher.publish(tenant, b"after the thaw")
        await recorder.wait_for(b"after the thaw")
        assert recorder.real == [("event", tenant, b"after the thaw")]
    finally:
        await sub.close()
        await publisher.close()
        await bus.close()


@pytest.mark.parametrize("block_ms", [0, MAX_BLOCK_MS + 1])
async def test_a_stream_read_blocking_forever_or_longer_than_allowed_is_refused(
    redis_server: RedisServer, block_ms: int
) -> None:
    bus = RedisBus(redis_server.url)
    try:
        with pytest.raises(ValueError, match="block_ms"):
            await bus.consume(unique("tenant"), "c1", block_ms=block_ms)
    finally:
        await bus.close()


async def test_a_health_check_of_a_day_still_reads_the_stream(redis_server: RedisServer) -> None:
    # redis-py refuses to connect with a keep-alive idle time the kernel rejects.
    bus = RedisBus(redis_server.url, RedisTimeouts(health_check_s=86_400))
    try:
        tenant = unique("t")
        await bus.submit(tenant, {"cmd": "ping"})
        assert [command for _, command in await bus.consume(tenant, "c", 8, 10)] == [
            {"cmd": "ping"}
        ]
    finally:
        await bus.close()
