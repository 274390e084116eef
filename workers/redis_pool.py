"""arq's Redis connections with the project's timeouts.

arq's own ``create_pool`` sets only a connect timeout: a Redis that stops answering
while the TCP connection stays up would hang a worker's poll, or the plugin's enqueue,
forever. arq issues no blocking command, so every read may wait ``command_s`` at most;
the worker then fails and its supervisor restarts it once Redis answers.
"""

from __future__ import annotations

import dataclasses
from typing import cast

from arq import ArqRedis
from arq.connections import RedisSettings

from canonical.redis_timeouts import RedisTimeouts, redis_py_options
from canonical.sentinel import is_sentinel_url, parse_sentinel_url, primary_client

__all__ = ["FAILOVER_RIDE_OUT_S", "open_arq_pool", "with_connect_timeout"]

# How long a command on a sentinel URL keeps trying while no primary answers: failure
# detection (``down-after-milliseconds``) plus the promotion, with room to spare.
FAILOVER_RIDE_OUT_S = 20.0


def open_arq_pool(url: str, timeouts: RedisTimeouts) -> ArqRedis:
    """An arq client on ``url`` (connects lazily, on its first command). For a
    ``redis+sentinel://`` URL every new connection asks the sentinels for the primary, and
    a demoted primary's READONLY drops the connection, so jobs follow a failover."""
    if is_sentinel_url(url):
        # arq stops a worker at the first refused connection: ride out a failover instead.
        client = primary_client(
            parse_sentinel_url(url), timeouts, redis_class=ArqRedis, ride_out_s=FAILOVER_RIDE_OUT_S
        )
        return cast(ArqRedis, client)
    return cast(ArqRedis, ArqRedis.from_url(url, **redis_py_options(url, timeouts)))


def with_connect_timeout(settings: RedisSettings, timeouts: RedisTimeouts) -> RedisSettings:
    """arq's settings (used by ``arq --check``) with the project's connect timeout."""
    # arq declares the field an int but hands it to redis-py, which takes seconds as float.
    return dataclasses.replace(settings, conn_timeout=timeouts.connect_s)  # type: ignore[arg-type]
