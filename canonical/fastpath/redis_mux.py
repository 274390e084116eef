"""One shared Redis connection with automatic pipelining, for the bus's non-blocking commands.

Why: redis-py's pool checks a connection out per command (an ``asyncio.Lock`` held across a
liveness probe) and, under hundreds of concurrent hellos, opens a connection per concurrent
caller. Here every command issued during one event-loop iteration goes out in a single
write on one connection, and replies are matched to callers in order (Redis answers each
connection in order). A pipeline's commands are written back to back, so MULTI/EXEC stays
atomic. Blocking reads (XREADGROUP BLOCK) and pub/sub must not use it: they would stall
everything queued behind them; they stay on redis-py.

No command here blocks, so a connection that owes replies and reads nothing for
``command_s`` is dead (a silent partition, a frozen server): it is dropped, its callers
get BusUnavailable, and the next command connects afresh. An idle connection is probed
with PING every ``health_check_s``, so a dead one is dropped before a caller meets it.

Measured (``bench/connections.py``, A/B with the plugin's batched hellos): iris set-ups
680–920 → 1,290–1,600/s, pheby 860–1,140 → 1,820–2,110/s. It relies on hiredis' ``Reader``
and ``pack_command`` and on redis-py's URL parser and TLS context (:func:`contract`);
the stock path is redis-py's asyncio client (``canonical.redis_stock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import hiredis
from redis.asyncio.connection import RedisSSLContext, parse_url
from redis.exceptions import ResponseError

from ..errors import BusUnavailable
from ..redis_timeouts import RedisTimeouts, keepalive_options
from ..sentinel import SentinelTarget, discover_primary, is_sentinel_url, parse_sentinel_url

Command = Sequence[str | bytes | int | float]
# One RESP command from its parts (hiredis' type hints say a 1-tuple; it takes any number).
pack_command: Any = hiredis.pack_command
# The error a replica answers a write with: the connection is to a demoted primary.
DEMOTED = "READONLY"


class _Wire(asyncio.Protocol):
    """The socket: packed commands out (one write per loop iteration), replies in, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeouts: RedisTimeouts) -> None:
        self.loop = loop
        self.timeouts = timeouts
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.out: list[bytes] = []
        self.flush_scheduled = False
        self.lost: BusUnavailable | None = None
        self.closed: asyncio.Future[None] = loop.create_future()
        # Last sign of life: bytes read, or the first command sent after an idle spell.
        self.last_progress = loop.time()
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_due = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        keepalive(transport, self.timeouts.health_check_s)
        self._arm_watchdog(self.timeouts.health_check_s)

    def send(self, commands: Sequence[Command]) -> list[asyncio.Future[Any]]:
        if self.lost is not None:
            raise self.lost
        if commands and not self.waiting:
            # Idle until now: the reply clock starts here, and the watchdog must look
            # at command_s from now, not at the end of a longer idle interval.
            self.last_progress = self.loop.time()
            if self._watchdog_due > self.last_progress + self.timeouts.command_s:
                self._arm_watchdog(self.timeouts.command_s)
        futures = []
        for command in commands:
            self.out.append(pack_command(tuple(command)))
            future = self.loop.create_future()
            self.waiting.append(future)
            futures.append(future)
        if commands and not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)
        return futures

    def _flush(self) -> None:
        self.flush_scheduled = False
        if self.out and self.lost is None and self.transport is not None:
            data = b"".join(self.out)
            self.out.clear()
            self.transport.write(data)

    def _arm_watchdog(self, delay: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog_due = self.loop.time() + delay
        self._watchdog = self.loop.call_later(delay, self._check_alive)

    def _check_alive(self) -> None:
        """Drop a connection that owes replies and has been silent for command_s; PING
        one that has been idle for health_check_s (its silence is then caught here)."""
        self._watchdog = None
        if self.lost is not None:
            return
        silent = self.loop.time() - self.last_progress
        verdict, delay = watchdog_verdict(bool(self.waiting), silent, self.timeouts)
        if verdict == "dead":
            self._abort(f"redis did not answer for {silent:.1f}s")
            return
        if verdict == "probe":
            self.send([("PING",)])  # its reply only counts as a sign of life
        self._arm_watchdog(delay)

    def data_received(self, data: bytes) -> None:
        self.last_progress = self.loop.time()
        self.reader.feed(data)
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                return self._abort(f"redis protocol error: {exc}")
            if reply is False:
                return
            if not self.waiting:
                return self._abort("redis sent a reply nobody asked for")
            future = self.waiting.popleft()
            if future.done():  # the caller was cancelled
                continue
            if isinstance(reply, ResponseError):
                if str(reply).startswith(DEMOTED):
                    # A primary demoted to a replica (a failover): the command did not
                    # run. Reconnect, through the sentinels, to whichever is primary now.
                    self.waiting.appendleft(future)
                    return self._abort(f"redis is no longer the primary ({reply})")
                future.set_exception(reply)
                future.exception()  # the caller gets it; not logged if it stopped waiting
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(BusUnavailable(f"redis connection lost ({exc or 'closed'})"))
        if not self.closed.done():
            self.closed.set_result(None)

    def _abort(self, why: str) -> None:
        # Replies can no longer be matched to callers: fail them all, drop the connection.
        self._fail(BusUnavailable(why))
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: BusUnavailable) -> None:
        if self.lost is None:
            self.lost = error
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.out.clear()
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)
                future.exception()  # the caller gets it; not logged if it stopped waiting


def watchdog_verdict(waiting: bool, silent_s: float, timeouts: RedisTimeouts) -> tuple[str, float]:
    """What a connection silent for ``silent_s`` is, and when to look again:
    ``dead`` (owes replies, silent for command_s), ``probe`` (idle for health_check_s:
    send a PING) or ``fine``."""
    if waiting:
        if silent_s >= timeouts.command_s:
            return "dead", 0.0
        return "fine", timeouts.command_s - silent_s
    if silent_s >= timeouts.health_check_s:
        return "probe", timeouts.command_s
    return "fine", timeouts.health_check_s - silent_s


P = TypeVar("P", bound=asyncio.Protocol)


class Endpoint:
    """Where and how to connect, from a redis:// rediss:// or unix:// URL (host, port,
    socket path, TLS, username/password, db), or a redis+sentinel:// one: then each
    connect first asks the sentinels where the primary is now."""

    def __init__(self, url: str, timeouts: RedisTimeouts | None = None) -> None:
        self.timeouts = timeouts or RedisTimeouts()
        self.sentinel: SentinelTarget | None = None
        if is_sentinel_url(url):
            self.sentinel = target = parse_sentinel_url(url)
            self.path: str | None = None
            self.host, self.port = target.sentinels[0]  # each connect asks where the primary is
            self.db = target.db
            self.username: str | None = target.username
            self.password: str | None = target.password
            self.timeout = self.timeouts.connect_s
            self.ssl = None
            return
        options: dict[str, Any] = dict(parse_url(url))
        self.path = options.get("path")
        self.host = str(options.get("host") or "localhost")
        self.port = int(options.get("port") or 6379)
        self.db = int(options.get("db") or 0)
        self.username = options.get("username")
        self.password = options.get("password")
        self.timeout = float(options.get("socket_connect_timeout") or self.timeouts.connect_s)
        self.ssl = _ssl_context(options) if url.startswith("rediss://") else None

    async def connect(self, factory: Callable[[], P]) -> P:
        """An open connection speaking ``factory``'s protocol; raises BusUnavailable."""
        loop = asyncio.get_running_loop()
        host, port = self.host, self.port
        if self.sentinel is not None:  # asked at every connect: a failover moves it
            host, port = await discover_primary(self.sentinel, self.timeouts)
        try:
            if self.path:
                opening = loop.create_unix_connection(factory, self.path)
            else:
                opening = loop.create_connection(
                    factory,
                    host,
                    port,
                    ssl=self.ssl,
                    server_hostname=host if self.ssl is not None else None,
                )
            _, protocol = await asyncio.wait_for(opening, self.timeout)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise BusUnavailable(f"cannot reach redis: {exc or type(exc).__name__}") from exc
        return protocol

    def auth(self) -> list[Command]:
        """The command that authenticates a new connection (none without a password)."""
        if self.password is None:
            return []
        if self.username:
            return [("AUTH", self.username, self.password)]
        return [("AUTH", self.password)]


def keepalive(transport: asyncio.BaseTransport, health_check_s: float) -> None:
    """TCP keep-alive on the health-check rhythm, so the kernel too drops a peer that
    vanished without a FIN (the default waits two hours before the first probe)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in keepalive_options(health_check_s).items():
                sock.setsockopt(socket.IPPROTO_TCP, option, value)


class RedisMux:
    """Lazily connected; reconnects on the next command after a failure. Connection
    trouble raises BusUnavailable; an error reply raises redis' ResponseError."""

    def __init__(self, url: str, timeouts: RedisTimeouts | None = None) -> None:
        self._endpoint = Endpoint(url, timeouts)
        self._wire: _Wire | None = None
        self._connecting: asyncio.Task[_Wire] | None = None

    async def execute(self, *command: str | bytes | int | float) -> Any:
        wire = await self._ready()
        return await wire.send([command])[0]

    def try_send(self, command: Command) -> asyncio.Future[Any] | None:
        """Send now, without awaiting, if the connection is up (in order with every command
        sent before); None when it is not (connecting, lost, or made on another loop)."""
        wire = self._wire
        if wire is None or wire.lost is not None or wire.loop is not asyncio.get_running_loop():
            return None
        return wire.send([command])[0]

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Replies in order; raises the first error reply once all have arrived."""
        results = await self.pipeline_settled(commands)
        first_error = next((r for r in results if isinstance(r, ResponseError)), None)
        if first_error is not None:
            raise first_error
        return results

    async def pipeline_settled(self, commands: Sequence[Command]) -> list[Any]:
        """Replies in order, an error reply in its place as a ResponseError (commands of
        different callers share a pipeline, and one's error is not another's)."""
        if not commands:
            return []
        wire = await self._ready()
        results: list[Any] = []
        for future in wire.send(commands):
            try:
                results.append(await future)
            except ResponseError as exc:
                results.append(exc)
        return results

    async def close(self) -> None:
        if self._connecting is not None:
            await asyncio.wait([self._connecting])  # its wire is closed below
        wire, self._wire = self._wire, None
        if wire is not None and wire.transport is not None:
            wire.transport.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(wire.closed), 1.0)

    async def _ready(self) -> _Wire:
        loop = asyncio.get_running_loop()
        wire = self._wire
        if wire is not None and wire.lost is None and wire.loop is loop:
            return wire
        if wire is not None and wire.loop is not loop:
            self._wire = None
            with contextlib.suppress(Exception):
                if wire.transport is not None:
                    wire.transport.close()
        # One connect for every caller waiting meanwhile; a cancelled caller leaves it running.
        task = self._connecting
        if task is None or task.get_loop() is not loop:
            task = self._connecting = loop.create_task(self._open(loop), name="hdg-redis-connect")
            task.add_done_callback(self._opened)
        return await asyncio.shield(task)

    def _opened(self, task: asyncio.Task[_Wire]) -> None:
        if self._connecting is task:
            self._connecting = None
        if not task.cancelled() and task.exception() is None:
            self._wire = task.result()

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Wire:
        endpoint = self._endpoint
        wire = await endpoint.connect(lambda: _Wire(loop, endpoint.timeouts))
        setup = endpoint.auth()
        if endpoint.db:
            setup.append(("SELECT", endpoint.db))
        if endpoint.sentinel is not None:
            # The sentinels' answer may be a moment old: make sure this is the primary.
            setup.append(("ROLE",))
        reply: Any = None
        for future in wire.send(setup):
            try:
                reply = await future
            except ResponseError as exc:  # a wrong password or db: as unreachable as down
                if wire.transport is not None:
                    wire.transport.close()
                raise BusUnavailable(f"redis refused the connection set-up: {exc}") from exc
        if endpoint.sentinel is not None and not (
            isinstance(reply, list) and reply[:1] == [b"master"]
        ):
            if wire.transport is not None:
                wire.transport.close()
            raise BusUnavailable("the address the sentinels gave is not the primary (yet)")
        return wire


def _ssl_context(options: dict[str, Any]) -> ssl.SSLContext:
    """The TLS context redis-py builds from the same URL options (same defaults)."""
    return RedisSSLContext(
        keyfile=options.get("ssl_keyfile"),
        certfile=options.get("ssl_certfile"),
        cert_reqs=options.get("ssl_cert_reqs", "required"),
        ca_certs=options.get("ssl_ca_certs"),
        check_hostname=bool(options.get("ssl_check_hostname", False)),
    ).get()


def hiredis_contract() -> str | None:
    """None when hiredis' ``Reader`` and ``pack_command`` behave as the wires here use them:
    a reader made with ``replyError``, fed bytes, hands out replies (an error reply as that
    class) and False when it needs more; ``pack_command`` packs any number of parts."""
    for name in ("Reader", "pack_command", "ProtocolError"):
        if not hasattr(hiredis, name):
            return f"hiredis.{name} is missing"
    try:
        reader = hiredis.Reader(replyError=ResponseError)
        reader.feed(b"-ERR no\r\n*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n:1\r\n+OK")
        replies = [reader.gets(), reader.gets(), reader.gets()]
        packed = hiredis.pack_command(("SET", "k", 1, 1.5, b"v"))  # type: ignore[arg-type]
    except (TypeError, AttributeError) as exc:
        return f"hiredis' Reader(replyError=...).feed/gets or pack_command changed ({exc})"
    if not (
        isinstance(replies[0], ResponseError)
        and str(replies[0]) == "ERR no"
        and replies[1] == [b"message", b"c", 1]
        and replies[2] is False
    ):
        return f"hiredis.Reader replies are not as expected: {replies!r}"
    if packed != b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n$3\r\n1.5\r\n$1\r\nv\r\n":
        return f"hiredis.pack_command packs differently: {packed!r}"
    return None


def contract() -> str | None:
    """None when hiredis and redis-py's ``parse_url`` and ``RedisSSLContext`` are as
    :class:`Endpoint` and :class:`RedisMux` use them; else what is not."""
    problem = hiredis_contract()
    if problem is not None:
        return problem
    import redis.asyncio.connection as connection  # looked up now: what is installed

    parse = getattr(connection, "parse_url", None)
    context = getattr(connection, "RedisSSLContext", None)
    if parse is None or context is None:
        return "redis.asyncio.connection lacks parse_url or RedisSSLContext"
    options = parse("rediss://user:secret@host:6380/2?ssl_cert_reqs=none")
    wanted = {"host": "host", "port": 6380, "db": 2, "username": "user", "password": "secret"}
    got = {key: options.get(key) for key in wanted}
    if got != wanted or options.get("ssl_cert_reqs") != "none":
        return f"redis.asyncio.connection.parse_url returns {options!r}"
    if "path" not in parse("unix:///tmp/redis.sock"):
        return "redis.asyncio.connection.parse_url has no path for a unix:// URL"
    params = inspect.signature(context).parameters
    missing = {"keyfile", "certfile", "cert_reqs", "ca_certs", "check_hostname"} - set(params)
    if missing or not callable(getattr(context, "get", None)):
        return f"redis.asyncio.connection.RedisSSLContext lacks {sorted(missing) or ['get']}"
    return None


__all__ = [
    "DEMOTED",
    "Command",
    "Endpoint",
    "RedisMux",
    "contract",
    "hiredis_contract",
    "keepalive",
    "pack_command",
    "watchdog_verdict",
]
