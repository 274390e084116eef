"""How long a Redis connection may take to open, to answer, and to stay silent.

Without bounds, a Redis that stops answering while its TCP connection stays up (a silent
partition, a frozen server) hangs every caller forever. Every Redis client of the project
is built from one :class:`RedisTimeouts`, so a hung command surfaces as BusUnavailable
and the existing reconnect logic takes over. Pure values and option builders: no I/O.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import Any

# TCP keep-alive probes after the first silent interval: a peer gone without a FIN is
# dropped by the kernel after about health_check_s * (1 + 1/3 * KEEPALIVE_PROBES).
KEEPALIVE_PROBES = 3
# The kernel refuses a keep-alive idle time or interval above this (Linux's
# MAX_TCP_KEEPIDLE and MAX_TCP_KEEPINTVL): redis-py would then fail every connect.
KEEPALIVE_MAX_S = 32_767


@dataclass(frozen=True)
class RedisTimeouts:
    """``connect_s``: opening a connection (TCP, TLS); ``command_s``: waiting for a reply
    beyond any time the command itself blocks for; ``health_check_s``: how long a
    long-lived connection may be idle before it is probed with PING."""

    connect_s: float = 2.0
    command_s: float = 5.0
    health_check_s: float = 15.0

    def __post_init__(self) -> None:
        for name in ("connect_s", "command_s", "health_check_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"RedisTimeouts.{name} must be finite and > 0, not {value!r}")


def keepalive_options(health_check_s: float) -> dict[int, int]:
    """TCP keep-alive timing (idle, interval, probes) for the options this platform has;
    a health check longer than the kernel accepts probes at its longest idle time."""
    idle = max(1, min(int(health_check_s), KEEPALIVE_MAX_S))
    wanted = {
        "TCP_KEEPIDLE": idle,
        "TCP_KEEPINTVL": max(1, idle // 3),
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def redis_py_options(
    url: str, timeouts: RedisTimeouts, *, blocks_for_s: float = 0.0
) -> dict[str, Any]:
    """Keyword arguments for a redis-py client on ``url``: its reads wait at most
    ``command_s`` beyond ``blocks_for_s``, the longest a command on it blocks."""
    options: dict[str, Any] = {
        "socket_connect_timeout": timeouts.connect_s,
        "socket_timeout": timeouts.command_s + blocks_for_s,
        "health_check_interval": timeouts.health_check_s,
    }
    if not url.startswith("unix://"):  # redis-py's unix-socket connection takes no keep-alive
        options["socket_keepalive"] = True
        options["socket_keepalive_options"] = keepalive_options(timeouts.health_check_s)
    return options


__all__ = [
    "KEEPALIVE_MAX_S",
    "KEEPALIVE_PROBES",
    "RedisTimeouts",
    "keepalive_options",
    "redis_py_options",
]
