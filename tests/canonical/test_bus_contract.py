"""The bus contract, written once and run against both implementations (no tests of its own).

``test_memory_bus.py`` and ``test_redis_bus.py`` subclass :class:`BusContract` and provide
the ``bus`` fixture; every test here must hold for the embedded bus and for Redis alike.
Redis pub/sub delivers asynchronously and a SUBSCRIBE takes effect on the server a little
after the call returns, so subscriptions are *settled* (a probe is published until it
arrives) before a test relies on them.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from canonical.bus import Bus, Subscription

PROBE = b"probe:"
WAIT_S = 10.0


class Recorder:
    """A bus handler that keeps what it was given (probes apart)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, bytes]] = []

    def __call__(self, kind: str, source: str, payload: bytes) -> None:
        self.received.append((kind, source, bytes(payload)))

    @property
    def real(self) -> list[tuple[str, str, bytes]]:
        return [m for m in self.received if not m[2].startswith(PROBE)]

    def payloads(self) -> list[bytes]:
        return [m[2] for m in self.real]

    def saw(self, payload: bytes) -> bool:
        return any(m[2] == payload for m in self.received)

    async def wait_for(self, payload: bytes, timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self.saw(payload):
            if time.monotonic() > deadline:
                raise AssertionError(f"{payload!r} never arrived; got {self.received!r}")
            await asyncio.sleep(0.01)


async def settle(
    recorder: Recorder, send: Callable[[bytes], Awaitable[None]], timeout: float = WAIT_S
) -> None:
    """Publish probes until one arrives: the subscription is then live on the server."""
    deadline = time.monotonic() + timeout
    while True:
        probe = PROBE + uuid.uuid4().hex.encode()
        try:
            await send(probe)
        except Exception:  # the bus may still be coming back
            pass
        step_deadline = time.monotonic() + 0.2
        while time.monotonic() < step_deadline:
            if recorder.saw(probe):
                return
            await asyncio.sleep(0.01)
        if time.monotonic() > deadline:
            raise AssertionError(f"subscription never settled; got {recorder.received!r}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class BusContract:
    """Subclasses provide an async ``bus`` fixture yielding a fresh, open Bus."""

    @pytest.fixture
    def tenant(self) -> str:
        return unique("tenant")

    @pytest.fixture
    async def subscribe(
        self, bus: Bus
    ) -> AsyncIterator[Callable[..., Awaitable[tuple[Subscription, Recorder]]]]:
        opened: list[Subscription] = []

        async def make(
            edge_id: str, *tenants: str, on_reconnect: Callable[[], None] | None = None
        ) -> tuple[Subscription, Recorder]:
            recorder = Recorder()
            sub = bus.subscription(edge_id, recorder, on_reconnect)
            opened.append(sub)
            await sub.start()
            for tenant in tenants:
                await sub.add_tenant(tenant)
            await settle(recorder, lambda p: bus.reply(edge_id, p))
            for tenant in tenants:
                await settle(recorder, lambda p, t=tenant: bus.publish(t, p))
            return sub, recorder

        yield make
        for sub in reversed(opened):
            await sub.close()

    # -- tenants
    async def test_a_registered_token_resolves_to_its_tenant(self, bus: Bus, tenant: str) -> None:
        token = unique("token") * 2
        await bus.register_tenant(tenant, token)
        assert await bus.resolve_tenant(token) == tenant

    async def test_a_wrong_token_resolves_to_no_tenant(self, bus: Bus, tenant: str) -> None:
        await bus.register_tenant(tenant, unique("token") * 2)
        assert await bus.resolve_tenant(unique("wrong") * 2) is None
        assert await bus.resolve_tenant("") is None

    async def test_two_tenants_resolve_each_to_its_own_token(self, bus: Bus) -> None:
        a, b = unique("tenant"), unique("tenant")
        token_a, token_b = unique("ta") * 2, unique("tb") * 2
        await bus.register_tenant(a, token_a)
        await bus.register_tenant(b, token_b)
        assert await bus.resolve_tenant(token_a) == a
        assert await bus.resolve_tenant(token_b) == b

    async def test_an_unregistered_tenant_no_longer_resolves_nor_is_alive(
        self, bus: Bus, tenant: str
    ) -> None:
        token = unique("token") * 2
        await bus.register_tenant(tenant, token)
        await bus.unregister_tenant(tenant, token)
        assert await bus.resolve_tenant(token) is None
        assert await bus.tenant_alive(tenant) is False

    async def test_unregistering_with_another_tenants_token_leaves_that_tenant_registered(
        self, bus: Bus
    ) -> None:
        a, b = unique("tenant"), unique("tenant")
        token_b = unique("tb") * 2
        await bus.register_tenant(b, token_b)
        await bus.unregister_tenant(a, token_b)
        assert await bus.resolve_tenant(token_b) == b

    async def test_a_registered_tenant_is_alive_and_an_unknown_one_is_not(
        self, bus: Bus, tenant: str
    ) -> None:
        await bus.register_tenant(tenant, unique("token") * 2, ttl_s=30)
        assert await bus.tenant_alive(tenant) is True
        assert await bus.tenant_alive(unique("nobody")) is False

    async def test_a_tenant_is_no_longer_alive_once_its_ttl_passed(
        self, bus: Bus, tenant: str
    ) -> None:
        await bus.register_tenant(tenant, unique("token") * 2, ttl_s=1)
        assert await bus.tenant_alive(tenant) is True
        await asyncio.sleep(1.15)
        assert await bus.tenant_alive(tenant) is False

    async def test_tenant_count_counts_registered_tokens(self, bus: Bus) -> None:
        before = await bus.tenant_count()
        a, b = unique("tenant"), unique("tenant")
        token_a, token_b = unique("ta") * 2, unique("tb") * 2
        await bus.register_tenant(a, token_a)
        await bus.register_tenant(b, token_b)
        await bus.register_tenant(a, token_a)  # the 10 s refresh: not a second tenant
        assert await bus.tenant_count() == before + 2
        await bus.unregister_tenant(a, token_a)
        assert await bus.tenant_count() == before + 1
        await bus.unregister_tenant(b, token_b)
        assert await bus.tenant_count() == before

    # -- inbound commands
    async def test_submitted_commands_are_consumed_in_order_with_their_payloads(
        self, bus: Bus, tenant: str
    ) -> None:
        commands = [
            {"cmd": "chat.send", "args": {"text": f"héllo {i}", "n": [i, None]}} for i in range(3)
        ]
        for command in commands:
            await bus.submit(tenant, command)
        batch = await bus.consume(tenant, "c1", block_ms=100)
        assert [command for _, command in batch] == commands
        ids = [entry_id for entry_id, _ in batch]
        assert len(set(ids)) == 3
        assert all(isinstance(entry_id, str) for entry_id in ids)

    async def test_consume_returns_at_most_count_entries_per_call(
        self, bus: Bus, tenant: str
    ) -> None:
        for i in range(5):
            await bus.submit(tenant, {"n": i})
        first = await bus.consume(tenant, "c1", count=2, block_ms=100)
        rest = await bus.consume(tenant, "c1", count=10, block_ms=100)
        assert [c["n"] for _, c in first] == [0, 1]
        assert [c["n"] for _, c in rest] == [2, 3, 4]

    async def test_consume_on_an_empty_stream_returns_nothing_after_blocking(
        self, bus: Bus, tenant: str
    ) -> None:
        started = time.monotonic()
        assert await bus.consume(tenant, "c1", block_ms=100) == []
        assert time.monotonic() - started >= 0.05

    async def test_consume_wakes_up_for_a_command_submitted_while_it_waits(
        self, bus: Bus, tenant: str
    ) -> None:
        await bus.consume(tenant, "c1", block_ms=10)  # the group exists before the wait
        waiting = asyncio.create_task(bus.consume(tenant, "c1", block_ms=5000))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await bus.submit(tenant, {"late": True})
        batch = await asyncio.wait_for(waiting, 5)
        assert [c for _, c in batch] == [{"late": True}]
        assert time.monotonic() - started < 2.0

    async def test_a_consumed_command_is_not_consumed_again(self, bus: Bus, tenant: str) -> None:
        await bus.submit(tenant, {"n": 1})
        assert len(await bus.consume(tenant, "c1", block_ms=100)) == 1
        assert await bus.consume(tenant, "c1", block_ms=50) == []
        assert await bus.consume(tenant, "c2", block_ms=50) == []

    async def test_unacked_entries_come_back_from_reclaim_and_acked_ones_do_not(
        self, bus: Bus, tenant: str
    ) -> None:
        for i in range(3):
            await bus.submit(tenant, {"n": i})
        batch = await bus.consume(tenant, "crashed", block_ms=100)
        await bus.ack(tenant, batch[1][0])
        reclaimed = await bus.reclaim(tenant, "restarted", min_idle_ms=0)
        assert reclaimed == [batch[0], batch[2]]
        for entry_id, _ in reclaimed:
            await bus.ack(tenant, entry_id)
        assert await bus.reclaim(tenant, "restarted", min_idle_ms=0) == []

    async def test_ack_many_acks_every_given_entry_in_one_call(self, bus: Bus, tenant: str) -> None:
        for i in range(4):
            await bus.submit(tenant, {"n": i})
        batch = await bus.consume(tenant, "crashed", block_ms=100)
        await bus.ack_many(tenant, [batch[0][0], batch[2][0], batch[3][0]])
        await bus.ack_many(tenant, [])
        assert await bus.reclaim(tenant, "restarted", min_idle_ms=0) == [batch[1]]

    async def test_reclaim_leaves_entries_that_have_not_been_idle_long_enough(
        self, bus: Bus, tenant: str
    ) -> None:
        await bus.submit(tenant, {"n": 1})
        batch = await bus.consume(tenant, "busy", block_ms=100)
        assert await bus.reclaim(tenant, "other", min_idle_ms=60_000) == []
        assert await bus.reclaim(tenant, "other", min_idle_ms=0) == batch

    async def test_reclaim_on_a_stream_with_nothing_pending_is_empty(
        self, bus: Bus, tenant: str
    ) -> None:
        assert await bus.reclaim(tenant, "c1") == []

    async def test_commands_of_one_tenant_never_reach_another(self, bus: Bus) -> None:
        a, b = unique("tenant"), unique("tenant")
        await bus.submit(a, {"for": "a"})
        assert await bus.consume(b, "c1", block_ms=50) == []
        assert [c for _, c in await bus.consume(a, "c1", block_ms=100)] == [{"for": "a"}]

    # -- outbound
    async def test_publish_reaches_only_subscribers_of_that_tenant(
        self, bus: Bus, subscribe: Any
    ) -> None:
        t1, t2 = unique("tenant"), unique("tenant")
        _, on_t1 = await subscribe(unique("edge"), t1)
        _, on_t2 = await subscribe(unique("edge"), t2)
        _, on_none = await subscribe(unique("edge"))
        # t2 first: had the t1 subscriber been on t2 too, it would see x2 before x1.
        await bus.publish(t2, b'{"x":2}')
        await bus.publish(t1, b'{"x":1}')
        await on_t1.wait_for(b'{"x":1}')
        await on_t2.wait_for(b'{"x":2}')
        assert on_t1.real == [("event", t1, b'{"x":1}')]
        assert on_t2.real == [("event", t2, b'{"x":2}')]
        assert on_none.real == []

    async def test_one_subscription_receives_every_tenant_it_added(
        self, bus: Bus, subscribe: Any
    ) -> None:
        t1, t2 = unique("tenant"), unique("tenant")
        _, recorder = await subscribe(unique("edge"), t1, t2)
        for i in range(5):
            await bus.publish(t1 if i % 2 else t2, f"{i}".encode())
        await recorder.wait_for(b"4")
        assert recorder.payloads() == [b"0", b"1", b"2", b"3", b"4"]
        assert [source for _, source, _ in recorder.real] == [t2, t1, t2, t1, t2]

    async def test_a_removed_tenant_is_no_longer_received(self, bus: Bus, subscribe: Any) -> None:
        t1, t2 = unique("tenant"), unique("tenant")
        sub, recorder = await subscribe(unique("edge"), t1, t2)
        await sub.remove_tenant(t1)
        # The removal is ordered before these publishes on the server once this settles.
        await settle(recorder, lambda p: bus.publish(t2, p))
        await bus.publish(t1, b"gone")
        await bus.publish(t2, b"kept")
        await recorder.wait_for(b"kept")
        assert recorder.payloads() == [b"kept"]

    async def test_a_reply_reaches_only_that_edge(self, bus: Bus, subscribe: Any) -> None:
        tenant = unique("tenant")
        edge_a, edge_b = unique("edge"), unique("edge")
        _, on_a = await subscribe(edge_a, tenant)
        _, on_b = await subscribe(edge_b, tenant)
        # to b first: had a heard b's channel it would see y before x.
        await bus.reply(edge_b, b'{"conn":"c2"}')
        await bus.reply(edge_a, b'{"conn":"c1"}')
        await on_a.wait_for(b'{"conn":"c1"}')
        await on_b.wait_for(b'{"conn":"c2"}')
        assert [(kind, payload) for kind, _, payload in on_a.real] == [("direct", b'{"conn":"c1"}')]
        assert [(kind, payload) for kind, _, payload in on_b.real] == [("direct", b'{"conn":"c2"}')]

    async def test_publish_many_and_reply_many_deliver_in_order(
        self, bus: Bus, subscribe: Any
    ) -> None:
        tenant, edge_a, edge_b = unique("tenant"), unique("edge"), unique("edge")
        _, on_a = await subscribe(edge_a, tenant)
        _, on_b = await subscribe(edge_b)
        await bus.publish_many(tenant, [b"e1", b"e2", b"e3"])
        await bus.reply_many([(edge_a, b"r1"), (edge_b, b"r2"), (edge_a, b"r3")])
        await on_a.wait_for(b"r3")
        await on_b.wait_for(b"r2")
        assert on_a.real == [
            ("event", tenant, b"e1"),
            ("event", tenant, b"e2"),
            ("event", tenant, b"e3"),
            ("direct", on_a.real[3][1], b"r1"),
            ("direct", on_a.real[3][1], b"r3"),
        ]
        assert on_b.payloads() == [b"r2"]

    async def test_device_online_queues_the_hello_and_marks_the_device_online(
        self, bus: Bus, tenant: str
    ) -> None:
        info = {"edge": "e1", "conn": "c1", "dialect": "iris"}
        await bus.device_online(tenant, "phone", info, {"cmd": "hello", "device_id": "phone"})
        await bus.device_online(tenant, "desk", {**info, "dialect": "pheby"}, ttl_s=30)
        batch = await bus.consume(tenant, "c1", block_ms=100)
        assert [command for _, command in batch] == [{"cmd": "hello", "device_id": "phone"}]
        online = await bus.presence(tenant)
        assert set(online) == {"phone", "desk"}
        assert online["phone"]["conn"] == "c1" and online["desk"]["dialect"] == "pheby"

    async def test_publish_with_no_subscribers_is_not_an_error(self, bus: Bus) -> None:
        await bus.publish(unique("tenant"), b"nobody listens")
        await bus.reply(unique("edge"), b"nobody listens")

    async def test_a_closed_subscription_receives_nothing_more(
        self, bus: Bus, subscribe: Any
    ) -> None:
        tenant = unique("tenant")
        sub, recorder = await subscribe(unique("edge"), tenant)
        _, witness = await subscribe(unique("edge"), tenant)
        await sub.close()
        await bus.publish(tenant, b"after close")
        await witness.wait_for(b"after close")
        await asyncio.sleep(0.05)
        assert recorder.payloads() == []

    # -- counters
    async def test_lockout_hit_counts_failures_of_one_source_within_the_window(
        self, bus: Bus
    ) -> None:
        source, other = unique("198.51.100.1"), unique("198.51.100.2")
        assert [await bus.lockout_hit(source, 60.0) for _ in range(3)] == [1, 2, 3]
        assert await bus.lockout_count(source) == 3
        assert await bus.lockout_count(other) == 0
        assert await bus.lockout_hit(other, 60.0) == 1

    async def test_lockout_hits_older_than_the_window_no_longer_count(self, bus: Bus) -> None:
        source = unique("198.51.100.3")
        assert await bus.lockout_hit(source, 1.0) == 1
        assert await bus.lockout_hit(source, 1.0) == 2
        await asyncio.sleep(1.15)
        assert await bus.lockout_hit(source, 1.0) == 1

    async def test_presence_lists_online_devices_with_their_edge_and_connection(
        self, bus: Bus, tenant: str
    ) -> None:
        await bus.set_presence(tenant, "phone", {"edge": "e1", "conn": "c1"}, ttl_s=30)
        await bus.set_presence(tenant, "tablet", {"edge": "e2", "conn": "c9"}, ttl_s=30)
        online = await bus.presence(tenant)
        assert set(online) == {"phone", "tablet"}
        assert online["phone"]["edge"] == "e1" and online["phone"]["conn"] == "c1"
        assert online["tablet"]["edge"] == "e2"
        assert await bus.presence(unique("tenant")) == {}

    async def test_a_device_set_offline_leaves_presence(self, bus: Bus, tenant: str) -> None:
        await bus.set_presence(tenant, "phone", {"edge": "e1", "conn": "c1"}, ttl_s=30)
        await bus.set_presence(tenant, "phone", None)
        assert await bus.presence(tenant) == {}

    async def test_presence_expires_after_its_ttl(self, bus: Bus, tenant: str) -> None:
        await bus.set_presence(tenant, "phone", {"edge": "e1", "conn": "c1"}, ttl_s=0.2)
        await bus.set_presence(tenant, "tablet", {"edge": "e1", "conn": "c2"}, ttl_s=30)
        assert set(await bus.presence(tenant)) == {"phone", "tablet"}
        await asyncio.sleep(0.3)
        assert set(await bus.presence(tenant)) == {"tablet"}

    async def test_presence_info_round_trips_as_json(self, bus: Bus, tenant: str) -> None:
        info = {"edge": "e1", "conn": "c1", "dialect": "iris", "since": "2026-01-01T00:00:00Z"}
        await bus.set_presence(tenant, "phone", info, ttl_s=30)
        stored = (await bus.presence(tenant))["phone"]
        assert {k: stored[k] for k in info} == info
        json.dumps(stored)

    async def test_ping_answers_true(self, bus: Bus) -> None:
        assert await bus.ping() is True

    async def test_reclaimed_entries_come_back_in_submission_order(
        self, bus: Bus, tenant: str
    ) -> None:
        for i in range(120):
            await bus.submit(tenant, {"n": i})
        batch: list[tuple[str, Any]] = []
        while len(batch) < 120:
            batch += await bus.consume(tenant, "crashed", count=500, block_ms=100)
        reclaimed = await bus.reclaim(tenant, "restarted", min_idle_ms=0)
        assert [c["n"] for _, c in reclaimed] == list(range(120))
        assert reclaimed == batch
