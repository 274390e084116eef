"""The auto-pipelined Redis connection (canonical.fastpath.redis_mux) against a real redis-server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import uvloop
from redis.exceptions import ResponseError

from canonical.errors import BusUnavailable
from canonical.fastpath.redis_mux import RedisMux, watchdog_verdict
from canonical.redis_timeouts import RedisTimeouts
from tests.canonical.test_bus_contract import unique
from tests.harness.certs import self_signed
from tests.harness.fixtures import REDIS_PASSWORD
from tests.harness.proc import ManagedProcess, free_port, port_is_open
from tests.harness.processes import RedisServer

# Holds the server busy for ~0.3 s (redis' DEBUG SLEEP is off by default).
_BUSY_LUA = (
    "local t = redis.call('TIME') local stop = t[1] * 1e6 + t[2] + 300000 "
    "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= stop return 1"
)


# Short bounds, so that a frozen server is noticed quickly.
QUICK = RedisTimeouts(connect_s=1.0, command_s=0.3, health_check_s=0.3)


@pytest.fixture
async def mux(redis_server: RedisServer) -> AsyncIterator[RedisMux]:
    mux = RedisMux(redis_server.url)
    yield mux
    await mux.close()


class _Writes:
    """Counts the socket writes of a mux's connection."""

    def __init__(self, mux: RedisMux) -> None:
        wire = mux._wire
        assert wire is not None and wire.transport is not None
        self.count = 0
        real = wire.transport.write

        def write(data: Any) -> None:
            self.count += 1
            real(data)

        wire.transport.write = write  # type: ignore[method-assign]


async def test_commands_issued_together_share_one_write_and_get_their_own_replies(
    mux: RedisMux,
) -> None:
    prefix = unique("k")
    await mux.execute("PING")  # connected
    writes = _Writes(mux)
    await asyncio.gather(*(mux.execute("SET", f"{prefix}:{i}", i) for i in range(300)))
    values = await asyncio.gather(*(mux.execute("GET", f"{prefix}:{i}") for i in range(300)))
    assert values == [str(i).encode() for i in range(300)]
    assert writes.count == 2


async def test_an_error_reply_raises_for_its_caller_only(mux: RedisMux) -> None:
    key = unique("k")
    await mux.execute("SET", key, "text")
    results = await asyncio.gather(
        mux.execute("INCR", key), mux.execute("GET", key), return_exceptions=True
    )
    assert isinstance(results[0], ResponseError)
    assert results[1] == b"text"


async def test_a_pipeline_returns_replies_in_order_and_raises_the_first_error_after_all(
    mux: RedisMux,
) -> None:
    key, text = unique("k"), unique("t")
    assert await mux.pipeline([("SET", key, 1), ("INCR", key), ("GET", key)]) == [
        b"OK",
        2,
        b"2",
    ]
    await mux.execute("SET", text, "x")
    with pytest.raises(ResponseError):
        await mux.pipeline([("INCR", text), ("SET", key, 10)])
    assert await mux.execute("GET", key) == b"10"  # the command after the error still ran
    assert await mux.pipeline([]) == []


async def test_multi_exec_in_a_pipeline_stays_atomic_among_concurrent_callers(
    mux: RedisMux,
) -> None:
    key = unique("k")

    async def transaction() -> Any:
        replies = await mux.pipeline([("MULTI",), ("INCR", key), ("INCR", key), ("EXEC",)])
        return replies[-1]

    results = await asyncio.gather(*(transaction() for _ in range(50)))
    assert sorted(results) == [[2 * i + 1, 2 * i + 2] for i in range(50)]


async def test_a_cancelled_caller_does_not_shift_the_replies_of_the_next_ones(
    mux: RedisMux,
) -> None:
    key = unique("k")
    await mux.execute("SET", key, "v")
    slow = asyncio.create_task(mux.execute("EVAL", _BUSY_LUA, 0))
    await asyncio.sleep(0.05)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert await mux.execute("GET", key) == b"v"
    assert await mux.execute("PING") == b"PONG"


async def test_the_url_selects_the_database(redis_server: RedisServer) -> None:
    mux = RedisMux(redis_server.url_for_db(3))
    raw = aioredis.from_url(redis_server.url_for_db(3))
    key = unique("k")
    try:
        await mux.execute("SET", key, "in db 3")
        assert await raw.get(key) == b"in db 3"
    finally:
        await raw.aclose()
        await mux.close()


async def test_a_password_in_the_url_authenticates_and_a_wrong_one_is_unavailable(
    redis_with_password: str,
) -> None:
    host_port = redis_with_password
    good = RedisMux(f"redis://:{REDIS_PASSWORD}@{host_port}")
    bad = RedisMux(f"redis://:wrong-pass@{host_port}")
    try:
        assert await good.execute("PING") == b"PONG"
        with pytest.raises(BusUnavailable):
            await bad.execute("PING")
    finally:
        await good.close()
        await bad.close()


async def test_commands_fail_with_bus_unavailable_while_redis_is_down_then_reconnect(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    mux = RedisMux(server.url)
    try:
        await mux.execute("SET", "k", "before")
        busy = asyncio.create_task(mux.execute("EVAL", _BUSY_LUA, 0))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(server.kill9)
        with pytest.raises(BusUnavailable):
            await busy  # in flight when the server died
        with pytest.raises(BusUnavailable):
            await mux.execute("PING")
        await asyncio.to_thread(server.restart)
        assert await mux.execute("PING") == b"PONG"
    finally:
        await mux.close()


async def test_concurrent_callers_share_one_connect(mux: RedisMux) -> None:
    await asyncio.gather(*(mux.execute("PING") for _ in range(100)))
    info = await mux.execute("CLIENT", "LIST")
    assert info.count(b"cmd=client") == 1
    await mux.close()
    assert await mux.execute("PING") == b"PONG"  # usable again after close


def test_it_runs_on_uvloop(redis_server: RedisServer) -> None:
    """The edges run uvloop, whose transports are not asyncio.Transport subclasses."""

    async def main() -> list[Any]:
        mux = RedisMux(redis_server.url)
        try:
            return await asyncio.gather(*(mux.execute("ECHO", str(i)) for i in range(20)))
        finally:
            await mux.close()

    assert uvloop.run(main()) == [str(i).encode() for i in range(20)]


async def test_rediss_urls_connect_over_tls_and_verify_the_server(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)  # its own CA
    port = free_port()
    server = ManagedProcess(
        "redis-tls",
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key),
         "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no"],
        log_path=tmp_path / "redis.log",
        cwd=tmp_path,
    ).start()  # fmt: skip
    trusted = RedisMux(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}")
    untrusted = RedisMux(f"rediss://127.0.0.1:{port}/0")
    try:
        deadline = time.monotonic() + 10
        while not port_is_open("127.0.0.1", port):
            assert time.monotonic() < deadline, server.log_text()
            await asyncio.sleep(0.05)
        assert await trusted.execute("PING") == b"PONG"
        with pytest.raises(BusUnavailable):
            await untrusted.execute("PING")  # a certificate nobody vouches for
    finally:
        await trusted.close()
        await untrusted.close()
        server.stop()


async def _eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.02)


async def test_commands_to_a_frozen_redis_fail_as_unavailable_and_work_again_once_it_thaws(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    mux = RedisMux(server.url, QUICK)
    key = unique("k")
    try:
        await mux.execute("SET", key, "v")
        with server.frozen():
            waiting = [mux.execute("GET", key) for _ in range(20)]
            failures = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
            assert all(isinstance(f, BusUnavailable) for f in failures), failures
            assert "did not answer" in str(failures[0])
            # A new connection to a frozen server fails the same way.
            with pytest.raises(BusUnavailable):
                await asyncio.wait_for(mux.pipeline([("GET", key), ("PING",)]), 10)
        assert await mux.execute("GET", key) == b"v"
    finally:
        await mux.close()


async def test_an_idle_connection_to_a_frozen_redis_is_dropped_by_its_health_check(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    mux = RedisMux(server.url, QUICK)
    try:
        await mux.execute("PING")
        idle = mux._wire
        assert idle is not None
        with server.frozen():
            await _eventually(lambda: idle.lost is not None)
        assert await mux.execute("PING") == b"PONG"
        assert mux._wire is not idle
    finally:
        await mux.close()


async def test_a_slow_redis_that_answers_within_the_command_timeout_keeps_its_connection(
    redis_server: RedisServer,
) -> None:
    mux = RedisMux(redis_server.url, RedisTimeouts(command_s=1.0, health_check_s=0.3))
    try:
        await mux.execute("PING")
        wire = mux._wire
        assert await mux.execute("EVAL", _BUSY_LUA, 0) == 1  # busy ~0.3 s
        await asyncio.sleep(0.7)  # idle past the health check: probed, and answered
        assert await mux.execute("PING") == b"PONG"
        assert mux._wire is wire and wire is not None and wire.lost is None
    finally:
        await mux.close()


def test_a_connection_owing_replies_is_dead_after_the_command_timeout_of_silence() -> None:
    timeouts = RedisTimeouts(command_s=5.0, health_check_s=15.0)
    assert watchdog_verdict(True, 5.0, timeouts) == ("dead", 0.0)
    assert watchdog_verdict(True, 2.0, timeouts) == ("fine", 3.0)


def test_an_idle_connection_is_probed_after_the_health_check_interval() -> None:
    timeouts = RedisTimeouts(command_s=5.0, health_check_s=15.0)
    assert watchdog_verdict(False, 4.0, timeouts) == ("fine", 11.0)
    assert watchdog_verdict(False, 15.0, timeouts) == ("probe", 5.0)


async def test_a_readonly_reply_drops_the_connection_so_the_next_command_reconnects(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # A replica answers writes with READONLY, as a primary demoted by a failover does.
    replica = RedisServer(
        workdir=tmp_path / "replica",
        extra_args=["--replicaof", redis_server.host, str(redis_server.port)],
    ).start()
    mux = RedisMux(replica.url)
    try:
        assert await mux.execute("PING") == b"PONG"
        first = mux._wire
        with pytest.raises(BusUnavailable, match="no longer the primary"):
            await mux.execute("SET", unique("k"), "v")
        assert await mux.execute("PING") == b"PONG"
        assert mux._wire is not first
    finally:
        await mux.close()
        replica.cleanup()
