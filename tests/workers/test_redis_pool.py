"""workers.redis_pool: arq's connections wait a bounded time for Redis (a real server,
frozen with SIGSTOP to play a silent partition)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from arq.connections import RedisSettings
from redis.exceptions import TimeoutError as RedisTimeoutError

from canonical.redis_timeouts import RedisTimeouts
from tests.harness.processes import RedisServer
from workers.jobs import PUSH_QUEUE
from workers.redis_pool import open_arq_pool, with_connect_timeout

QUICK = RedisTimeouts(connect_s=1.0, command_s=0.3, health_check_s=0.3)


async def test_an_enqueue_to_a_frozen_redis_times_out_and_works_again_once_it_thaws(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    pool = open_arq_pool(server.url, QUICK)
    try:
        assert await pool.enqueue_job("push_notify", {}, _job_id="a", _queue_name=PUSH_QUEUE)
        with server.frozen():
            with pytest.raises(RedisTimeoutError):
                await asyncio.wait_for(
                    pool.enqueue_job("push_notify", {}, _job_id="b", _queue_name=PUSH_QUEUE), 10
                )
        assert await pool.enqueue_job("push_notify", {}, _job_id="c", _queue_name=PUSH_QUEUE)
        assert await pool.zcard(PUSH_QUEUE) >= 2
    finally:
        await pool.aclose()


async def test_a_health_check_of_a_day_still_connects(redis_server: RedisServer) -> None:
    # Its keep-alive idle time is more than the kernel accepts: it is capped, not refused.
    pool = open_arq_pool(redis_server.url, RedisTimeouts(health_check_s=86_400))
    try:
        assert await pool.ping()
    finally:
        await pool.aclose()


def test_arq_check_connects_within_the_configured_connect_timeout() -> None:
    settings = with_connect_timeout(RedisSettings.from_dsn("redis://h:6379/3"), QUICK)
    assert settings.conn_timeout == 1.0
    assert (settings.host, settings.port, settings.database) == ("h", 6379, 3)
