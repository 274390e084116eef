"""Redis Sentinel: the bus URL that names sentinels, and finding the current primary.

``redis+sentinel://[[user]:password@]host1[:port],host2[:port],.../<service>[/<db>]``
``[?sentinel_password=...]``: the sentinels (port 26379 unless given, IPv6 in brackets),
the monitored service's name, and the database. The password (and user) are the data
nodes'; the sentinels' own password, if they have one, is ``sentinel_password``.

Every connection to the primary is opened through :func:`discover_primary` (raw
connections) or :func:`primary_client` (redis-py clients, whose Sentinel pool asks again
on each new connection), so a reconnect after a failover finds the promoted replica.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import BusUnavailable
from .redis_timeouts import RedisTimeouts, redis_py_options

SCHEME = "redis+sentinel://"
DEFAULT_SENTINEL_PORT = 26379

if TYPE_CHECKING:  # settings import the parser: redis-py only where a connection is made
    from redis.asyncio.sentinel import Sentinel


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def redacted(self) -> str:
        """The URL without credentials, for messages and logs."""
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        return f"{SCHEME}{hosts}/{urllib.parse.quote(self.service, safe='')}/{self.db}"


def is_sentinel_url(url: str) -> bool:
    return url.startswith(SCHEME)


def bus_url_for_display(url: str) -> str:
    """A bus URL without its credentials: for messages and logs."""
    if is_sentinel_url(url):
        try:
            return parse_sentinel_url(url).redacted()
        except ValueError:
            return SCHEME + "…"
    return url.split("@")[-1]


def _host_port(part: str) -> tuple[str, int]:
    if part.startswith("["):
        host, sep, rest = part[1:].partition("]")
        if not sep or not host or (rest and not rest.startswith(":")):
            raise ValueError(f"bad sentinel address {part!r}")
        port_text = rest[1:] if rest else ""
        if rest == ":":
            raise ValueError(f"bad port in sentinel address {part!r}")
    else:
        host, colon, port_text = part.partition(":")
        if not host or ":" in port_text or "[" in host or "]" in host:
            raise ValueError(f"bad sentinel address {part!r} (IPv6 goes in brackets)")
        if colon and not port_text:
            raise ValueError(f"bad port in sentinel address {part!r}")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"bad port in sentinel address {part!r}")
    return host, int(port_text)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, service, db and credentials of a ``redis+sentinel://`` URL;
    ValueError saying what is wrong otherwise. Pure."""
    if not is_sentinel_url(url):
        raise ValueError(f"a sentinel URL starts with {SCHEME}")
    rest, _, query = url[len(SCHEME) :].partition("?")
    userinfo, at, hostpath = rest.rpartition("@")
    if not at:
        userinfo, hostpath = "", rest
    hosts, slash, path = hostpath.partition("/")
    if not hosts:
        raise ValueError("no sentinel addresses (host1:26379,host2:26379,...)")
    sentinels = tuple(_host_port(part) for part in hosts.split(","))
    segments = path.split("/") if slash else []
    if not segments or not segments[0]:
        raise ValueError("no service name (.../<service-name>/<db>)")
    if len(segments) > 2:
        raise ValueError("the path is /<service-name>/<db>")
    service = urllib.parse.unquote(segments[0])
    db_text = segments[1] if len(segments) == 2 else ""
    if db_text and not (db_text.isascii() and db_text.isdigit()):
        raise ValueError(f"the db must be a number, not {db_text!r}")
    db = int(db_text) if db_text else 0
    username: str | None = None
    password: str | None = None
    if at:
        user, colon, secret = userinfo.partition(":")
        if colon:
            username = urllib.parse.unquote(user) or None
            password = urllib.parse.unquote(secret)
        else:  # a password alone, as redis-py reads redis://secret@host
            password = urllib.parse.unquote(user)
    sentinel_password: str | None = None
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key != "sentinel_password":
            raise ValueError(f"unknown option {key!r} (only sentinel_password)")
        sentinel_password = value or None
    return SentinelTarget(sentinels, service, db, username, password, sentinel_password)


def _manager(target: SentinelTarget, timeouts: RedisTimeouts) -> Sentinel:
    from redis.asyncio.sentinel import Sentinel

    sentinel_kwargs: dict[str, Any] = {
        "socket_connect_timeout": timeouts.connect_s,
        "socket_timeout": timeouts.command_s,
    }
    if target.sentinel_password is not None:
        sentinel_kwargs["password"] = target.sentinel_password
    return Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=sentinel_kwargs
    )


async def discover_primary(target: SentinelTarget, timeouts: RedisTimeouts) -> tuple[str, int]:
    """The primary's address as the first sentinel that knows a healthy one reports it
    (asked afresh: a connection opened after a failover goes to the promoted replica).
    Raises BusUnavailable when no sentinel names one."""
    from redis.exceptions import RedisError

    manager = _manager(target, timeouts)
    try:
        host, port = await manager.discover_master(target.service)
    except (RedisError, OSError) as exc:
        raise BusUnavailable(f"no primary for {target.service!r} from the sentinels") from exc
    finally:
        for client in manager.sentinels:
            with contextlib.suppress(Exception):
                await client.aclose()
    return str(host), int(port)


def primary_client(
    target: SentinelTarget,
    timeouts: RedisTimeouts,
    *,
    blocks_for_s: float = 0.0,
    redis_class: Any = None,
    ride_out_s: float = 0.0,
) -> Any:
    """A redis-py client (``redis_class``, redis.asyncio.Redis by default) on the current
    primary: each new connection asks the sentinels, and a READONLY reply (a demoted
    primary) drops the connection so the next one asks again. With ``ride_out_s`` a
    command that meets a lost or refused connection is tried again, asking the sentinels
    each time, for about that long: until they have promoted a replica."""
    options = redis_py_options("redis://", timeouts, blocks_for_s=blocks_for_s)
    options.update(db=target.db, username=target.username, password=target.password)
    if ride_out_s > 0:
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError

        options["retry"] = Retry(ExponentialBackoff(cap=1.0, base=0.05), retry_attempts(ride_out_s))
        # A lost or refused connection (a primary gone) is tried again, a silent one
        # (a timeout) is not: that still fails after the command timeout.
        options["retry_on_error"] = [RedisConnectionError]
    kwargs: dict[str, Any] = {} if redis_class is None else {"redis_class": redis_class}
    return _manager(target, timeouts).master_for(target.service, **kwargs, **options)


def retry_attempts(ride_out_s: float, cap_s: float = 1.0, base_s: float = 0.05) -> int:
    """How many tries of an exponential backoff (``base_s`` doubling, at most ``cap_s``)
    add up to at least ``ride_out_s`` of waiting. Pure."""
    attempts, waited, delay = 0, 0.0, base_s
    while waited < ride_out_s:
        attempts += 1
        delay = min(cap_s, base_s * 2**attempts)
        waited += delay
    return attempts


async def close_primary_client(client: Any) -> None:
    """Close a :func:`primary_client` and the sentinel connections it asked through."""
    pool = client.connection_pool
    await client.aclose()
    for sentinel in getattr(getattr(pool, "sentinel_manager", None), "sentinels", []):
        with contextlib.suppress(Exception):
            await sentinel.aclose()


__all__ = [
    "DEFAULT_SENTINEL_PORT",
    "SCHEME",
    "SentinelTarget",
    "bus_url_for_display",
    "close_primary_client",
    "discover_primary",
    "is_sentinel_url",
    "parse_sentinel_url",
    "primary_client",
    "retry_attempts",
]
