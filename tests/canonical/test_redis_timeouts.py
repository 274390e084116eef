"""canonical.redis_timeouts: the bounds every Redis client of the project is built with."""

from __future__ import annotations

import socket

import pytest

from canonical.redis_timeouts import (
    KEEPALIVE_MAX_S,
    RedisTimeouts,
    keepalive_options,
    redis_py_options,
)


@pytest.mark.parametrize("field", ["connect_s", "command_s", "health_check_s"])
@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan")])
def test_a_timeout_that_is_not_positive_is_refused_naming_it(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RedisTimeouts(**{field: value})


def test_every_redis_py_client_waits_a_bounded_time_to_connect_and_for_each_reply() -> None:
    options = redis_py_options("redis://h:6379/0", RedisTimeouts(connect_s=1.5, command_s=4.0))
    assert options["socket_connect_timeout"] == 1.5
    assert options["socket_timeout"] == 4.0
    assert options["health_check_interval"] == 15.0


def test_a_client_that_blocks_waits_for_replies_longer_than_it_blocks() -> None:
    options = redis_py_options("redis://h:6379/0", RedisTimeouts(command_s=4.0), blocks_for_s=30)
    assert options["socket_timeout"] == 34.0


def test_tcp_clients_probe_a_silent_peer_on_the_health_check_rhythm() -> None:
    options = redis_py_options("rediss://h:6379/0", RedisTimeouts(health_check_s=12))
    assert options["socket_keepalive"] is True
    assert options["socket_keepalive_options"] == keepalive_options(12)
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert keepalive_options(12) == {
            socket.TCP_KEEPIDLE: 12,
            socket.TCP_KEEPINTVL: 4,
            socket.TCP_KEEPCNT: 3,
        }


def test_a_sub_second_health_check_still_gives_valid_keepalive_timing() -> None:
    assert all(value >= 1 for value in keepalive_options(0.2).values())


def test_a_health_check_longer_than_the_kernel_allows_probes_at_its_longest() -> None:
    # The kernel refuses a longer keep-alive idle time (EINVAL): every redis-py connect
    # would fail with it.
    assert all(value <= KEEPALIVE_MAX_S for value in keepalive_options(86_400).values())
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert keepalive_options(86_400)[socket.TCP_KEEPIDLE] == KEEPALIVE_MAX_S


def test_unix_socket_clients_get_timeouts_but_no_tcp_keepalive() -> None:
    options = redis_py_options("unix:///run/redis.sock", RedisTimeouts(command_s=3.0))
    assert options["socket_timeout"] == 3.0
    assert "socket_keepalive" not in options
    assert "socket_keepalive_options" not in options
