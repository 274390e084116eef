"""The pub/sub connection that dispatches messages as it parses them (canonical.fastpath.redis_pubsub),
against a real redis-server, and a silent peer."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from canonical.errors import BusUnavailable
from canonical.fastpath.redis_mux import Endpoint
from canonical.fastpath.redis_pubsub import hold, open_subscriber, silence_verdict
from canonical.redis_timeouts import RedisTimeouts
from tests.canonical.test_bus_contract import unique
from tests.harness.fixtures import REDIS_PASSWORD
from tests.harness.proc import ManagedProcess, port_is_open
from tests.harness.processes import RedisServer


async def _eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.01)


async def test_every_message_of_a_burst_arrives_once_in_order_with_its_channel(
    redis_server: RedisServer,
) -> None:
    got: list[tuple[bytes, bytes]] = []
    first, second = unique("ch"), unique("ch")
    wire = await open_subscriber(
        Endpoint(redis_server.url), [first, second], lambda c, d: got.append((c, d))
    )
    raw = aioredis.from_url(redis_server.url)
    try:
        async with raw.pipeline(transaction=False) as pipe:
            for n in range(2000):
                pipe.publish(first if n % 2 else second, f"m{n}".encode())
            await pipe.execute()
        await _eventually(lambda: len(got) == 2000)
        assert [d for _, d in got] == [f"m{n}".encode() for n in range(2000)]
        assert {c for c, _ in got} == {first.encode(), second.encode()}
    finally:
        wire.close()
        await raw.aclose()


async def test_a_handler_that_fails_on_one_message_does_not_end_the_subscription(
    redis_server: RedisServer,
) -> None:
    got: list[bytes] = []

    def handler(channel: bytes, data: bytes) -> None:
        if data == b"bad":
            raise ValueError("undecodable")
        got.append(data)

    channel = unique("ch")
    wire = await open_subscriber(Endpoint(redis_server.url), [channel], handler)
    raw = aioredis.from_url(redis_server.url)
    try:
        for data in (b"one", b"bad", b"two"):
            await raw.publish(channel, data)
        await _eventually(lambda: got == [b"one", b"two"])
        assert not wire.lost.done()
    finally:
        wire.close()
        await raw.aclose()


async def test_channels_added_and_removed_later_take_effect(redis_server: RedisServer) -> None:
    got: list[bytes] = []
    first, later = unique("ch"), unique("ch")
    wire = await open_subscriber(Endpoint(redis_server.url), [first], lambda c, d: got.append(d))
    raw = aioredis.from_url(redis_server.url)
    try:
        wire.command("SUBSCRIBE", later)
        for _ in range(200):  # until Redis has processed the SUBSCRIBE
            if await raw.publish(later, b"later") == 1:
                break
            await asyncio.sleep(0.01)
        wire.command("UNSUBSCRIBE", first)
        for _ in range(200):
            if await raw.publish(first, b"gone") == 0:
                break
            await asyncio.sleep(0.01)
        await _eventually(lambda: b"later" in got)
        assert b"gone" not in got[got.index(b"later") :]
    finally:
        wire.close()
        await raw.aclose()


async def test_a_password_authenticates_and_a_wrong_one_is_unavailable(
    redis_with_password: str,
) -> None:
    host_port = redis_with_password
    good = await open_subscriber(
        Endpoint(f"redis://:{REDIS_PASSWORD}@{host_port}"), ["c"], lambda c, d: None
    )
    good.close()
    with pytest.raises(BusUnavailable):
        await open_subscriber(Endpoint(f"redis://:wrong@{host_port}"), ["c"], lambda c, d: None)


async def test_hold_returns_when_redis_dies(redis_factory: Callable[..., RedisServer]) -> None:
    server = redis_factory()
    wire = await open_subscriber(Endpoint(server.url), ["c"], lambda c, d: None)
    holding = asyncio.create_task(hold(wire))
    await asyncio.to_thread(server.kill9)
    reason = await asyncio.wait_for(holding, 5)
    assert "lost" in reason


async def test_hold_gives_up_on_a_peer_that_confirms_then_goes_silent() -> None:
    """A link that died without a FIN: PINGs go unanswered, the subscription ends."""

    done = asyncio.Event()

    async def silent_redis(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n")  # the SUBSCRIBE: confirm it, then say nothing
            writer.write(b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n")
            await writer.drain()
            await done.wait()
        finally:
            writer.close()

    server = await asyncio.start_server(silent_redis, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        wire = await open_subscriber(
            Endpoint(f"redis://127.0.0.1:{port}"), ["c"], lambda c, d: None
        )
        quick = RedisTimeouts(command_s=0.1, health_check_s=0.1)
        reason = await asyncio.wait_for(hold(wire, quick), 5)
        assert "silent" in reason
    finally:
        done.set()
        await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()


QUICK = RedisTimeouts(connect_s=1.0, command_s=0.3, health_check_s=0.3)


async def test_hold_gives_up_on_a_frozen_redis_and_a_new_subscription_works_once_it_thaws(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    endpoint = Endpoint(server.url, QUICK)
    got: list[bytes] = []
    wire = await open_subscriber(endpoint, ["c"], lambda c, d: None)
    try:
        with server.frozen():
            reason = await asyncio.wait_for(hold(wire, QUICK), 10)
            assert "silent" in reason
            with pytest.raises(BusUnavailable):  # no confirmation from a frozen server
                await asyncio.wait_for(open_subscriber(endpoint, ["c"], lambda c, d: None), 10)
    finally:
        wire.close()
    again = await open_subscriber(endpoint, ["c"], lambda c, d: got.append(d))
    publisher = aioredis.from_url(server.url)
    try:
        await publisher.publish("c", b"after the thaw")
        await _eventually(lambda: got == [b"after the thaw"])
    finally:
        again.close()
        await publisher.aclose()


def test_a_subscription_is_probed_after_the_health_check_and_dead_a_command_timeout_later() -> None:
    timeouts = RedisTimeouts(command_s=5.0, health_check_s=15.0)
    assert silence_verdict(10.0, timeouts) == ("fine", 5.0)
    assert silence_verdict(15.0, timeouts) == ("probe", 5.0)
    assert silence_verdict(18.0, timeouts) == ("probe", 2.0)
    assert silence_verdict(20.0, timeouts) == ("dead", 5.0)


# Keeps the server running a script for ~1 s.
_ONE_SECOND_LUA = (
    "local t = redis.call('TIME') local stop = t[1] * 1e6 + t[2] + 1000000 "
    "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= stop return 1"
)
# Probes at once, and waits long enough for a reply not to be the question.
PROBING = RedisTimeouts(command_s=30.0, health_check_s=0.05)


async def _error_count(client: aioredis.Redis, prefix: str) -> int:
    stats = await client.info("errorstats")
    return int(stats.get(f"errorstat_{prefix}", {}).get("count", 0))


async def test_a_subscription_outlives_a_script_that_keeps_redis_busy(
    redis_factory: Callable[..., RedisServer],
) -> None:
    """PINGs answered BUSY: the server is alive, the subscription is kept (dropping it
    would resync every device of the edge)."""
    server = redis_factory()
    got: list[bytes] = []
    wire = await open_subscriber(Endpoint(server.url), ["c"], lambda c, d: got.append(d))
    admin = aioredis.from_url(server.url)
    scripting = aioredis.from_url(server.url)
    holding = asyncio.create_task(hold(wire, PROBING))
    try:
        await admin.config_set("busy-reply-threshold", 50)  # BUSY after 50 ms of script
        await scripting.eval(_ONE_SECOND_LUA, 0)
        assert await _error_count(admin, "BUSY") >= 1  # the PINGs met the script
        await admin.publish("c", b"after the script")
        await _eventually(lambda: bool(got) or holding.done())
        assert not holding.done(), holding.result()
        assert got == [b"after the script"]
    finally:
        holding.cancel()
        wire.close()
        await admin.aclose()
        await scripting.aclose()


async def test_a_subscription_outlives_redis_loading_its_data_set(
    redis_factory: Callable[..., RedisServer], tmp_path: Path
) -> None:
    """A restarted Redis answers LOADING until its data set is in memory, and subscribes
    meanwhile: the subscription made then is kept and gets what is published after."""
    first = redis_factory()
    filler = aioredis.from_url(first.url)
    # 12 keys of 2 KB (incompressible) read 0.25 s apart, the server answering between each.
    await filler.mset({f"k{i}": os.urandom(2048) for i in range(12)})
    await filler.save()
    await filler.aclose()
    await asyncio.to_thread(first.stop)
    loading = ManagedProcess(
        "redis-loading",
        ["redis-server", "--port", str(first.port), "--bind", "127.0.0.1",
         "--dir", str(first.workdir), "--save", "", "--appendonly", "no",
         "--key-load-delay", "250000", "--loading-process-events-interval-bytes", "1024"],
        log_path=tmp_path / "loading.log",
        cwd=tmp_path,
    ).start()  # fmt: skip
    admin = aioredis.from_url(first.url)
    got: list[bytes] = []
    holding: asyncio.Task[str] | None = None
    try:
        await _eventually(lambda: port_is_open("127.0.0.1", first.port), 10)
        wire = await open_subscriber(Endpoint(first.url), ["c"], lambda c, d: got.append(d))
        holding = asyncio.create_task(hold(wire, PROBING))
        assert (await admin.info("persistence"))["loading"] == 1, loading.log_text()
        for _ in range(600):  # until it has loaded (30 s at most)
            if (await admin.info("persistence"))["loading"] == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(loading.log_text())
        assert await _error_count(admin, "LOADING") >= 1  # the PINGs met the loading
        await admin.publish("c", b"loaded")
        await _eventually(lambda: bool(got) or holding.done())
        assert not holding.done(), holding.result()
        assert got == [b"loaded"]
    finally:
        if holding is not None:
            holding.cancel()
        await admin.aclose()
        loading.stop()
