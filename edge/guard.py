"""Sockets that have not shown who they are yet: bounded per address and in time.

Before its request header is complete, or (a WebSocket) before its hello, a socket costs
the edge a file descriptor and anyone can open one. Without limits a few hundred sockets
that never finish their request hold the edge's descriptors for ever, and no device, nor
``/healthz``, gets in. So:

- each source address may hold at most ``cap`` such sockets (``Unauthenticated``); one
  more is answered 429 and closed at once, before uvicorn sees it;
- a request header must be complete within ``header_timeout`` of the connection, or of
  the previous response on a kept-alive connection (``GuardedHttp``); otherwise 408 and
  the socket is closed;
- a WebSocket counts from its upgrade until its hello succeeds (``edge.app``; the hello
  itself is due within 10 s, ``edge.session``).

``GuardedHttp`` wraps whatever HTTP protocol uvicorn runs (the edge's fast path or
uvicorn's stock one) and only watches bytes go by until the blank line that ends a header:
it needs nothing of uvicorn's internals. Once a socket upgrades to a WebSocket it leaves
the transport, so frames never pass through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from . import metrics

log = logging.getLogger("hdg.edge.guard")

_END_OF_HEADER = b"\r\n\r\n"
_TOO_MANY = (
    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\ncontent-length: 50\r\n"
    b"connection: close\r\n\r\ntoo many unfinished connections from this address\n"
)
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 36\r\n"
    b"connection: close\r\n\r\nthe request header came too slowly\n"
)


class Unauthenticated:
    """How many sockets each source address holds that are not past their request
    header or their hello; at most ``cap`` each."""

    __slots__ = ("_counts", "cap")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._counts: dict[str, int] = {}

    def admit(self, host: str) -> bool:
        count = self._counts.get(host, 0)
        if count >= self.cap:
            return False
        self._counts[host] = count + 1
        return True

    def release(self, host: str) -> None:
        count = self._counts.get(host, 0) - 1
        if count > 0:
            self._counts[host] = count
        else:
            self._counts.pop(host, None)

    def count(self, host: str) -> int:
        return self._counts.get(host, 0)

    def ticket(self, host: str) -> Ticket | None:
        """A released-once hold on one of ``host``'s places, or None when it has none left."""
        return Ticket(self, host) if self.admit(host) else None

    def hold(self, host: str) -> Ticket:
        """A place for a socket already open (a kept-alive connection between requests):
        counted even beyond the cap, so new sockets of the address wait for it."""
        self._counts[host] = self._counts.get(host, 0) + 1
        return Ticket(self, host)


class Ticket:
    __slots__ = ("_guard", "host")

    def __init__(self, guard: Unauthenticated, host: str) -> None:
        self._guard: Unauthenticated | None = guard
        self.host = host

    def release(self) -> None:
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.release(self.host)


class GuardedHttp(asyncio.Protocol):
    """An HTTP protocol of uvicorn's, with the header timeout and the per-address cap."""

    __slots__ = (
        "_ticket",
        "_tail",
        "_timer",
        "guard",
        "inner",
        "loop",
        "refused",
        "serving",
        "timeout",
        "transport",
    )

    def __init__(
        self,
        inner: asyncio.Protocol,
        guard: Unauthenticated,
        timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.inner = inner
        self.guard = guard
        self.timeout = timeout
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.refused = False
        self.serving = 0  # requests of this connection in the app
        self._ticket: Ticket | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen, for a blank line split across reads

    @property
    def waiting(self) -> bool:
        """Whether a request header is due (the timer runs)."""
        return self._timer is not None

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, only alike.)
        self.transport = transport = cast(asyncio.Transport, base)
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else None  # (Unix socket: no)
        if host is not None:
            self._ticket = self.guard.ticket(host)
            if self._ticket is None:
                self.refused = True
                metrics.UNAUTHENTICATED_REFUSED.inc()
                transport.write(_TOO_MANY)
                transport.close()
                return
        self._timer = self.loop.call_later(self.timeout, self._expired)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._timer is None:
            if not self.refused:
                self.inner.data_received(data)
            return
        seen = self._tail + data[:3]
        ended = _END_OF_HEADER in data or _END_OF_HEADER in seen
        self._tail = data[-3:] if len(data) >= 3 else seen[-3:]
        self.inner.data_received(data)
        if ended:
            self.header_done()

    def header_done(self) -> None:
        """The request header is in (or the app has the request): no timer, no place."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._tail = b""
        if self._ticket is not None:
            self._ticket.release()
            self._ticket = None

    def request_started(self) -> None:
        self.serving += 1
        self.header_done()

    def request_finished(self) -> None:
        """The response is out: the next request's header is due within the timeout."""
        self.serving -= 1
        transport = self.transport
        if self.serving or transport is None or transport.is_closing():
            return
        if transport.get_protocol() is not self:  # pragma: no cover (upgraded meanwhile)
            return
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self._ticket = self.guard.hold(str(peer[0]))
        self._timer = self.loop.call_later(self.timeout, self._expired)

    def _expired(self) -> None:
        self._timer = None
        transport = self.transport
        if self._ticket is not None:
            self._ticket.release()
            self._ticket = None
        if transport is None or transport.is_closing() or self.serving:
            return
        if transport.get_protocol() is not self:  # upgraded: the WebSocket counts itself
            return
        metrics.SLOW_REQUESTS.labels("header").inc()
        transport.write(_TIMED_OUT)
        transport.close()

    def eof_received(self) -> bool | None:
        if self.refused:
            return None
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ticket is not None:
            self._ticket.release()
            self._ticket = None
        if not self.refused:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def guarded(
    protocol_class: Callable[..., asyncio.Protocol], guard: Unauthenticated, timeout: float
) -> Callable[..., asyncio.Protocol]:
    """A uvicorn ``http`` protocol factory: ``protocol_class``'s instances, guarded."""

    def create(
        config: Any,
        server_state: Any,
        app_state: Any,
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> asyncio.Protocol:
        loop = _loop or asyncio.get_running_loop()
        inner = protocol_class(
            config=config, server_state=server_state, app_state=app_state, _loop=_loop
        )
        return GuardedHttp(inner, guard, timeout, loop)

    return create


def guarded_protocol(send: Any) -> GuardedHttp | None:
    """The guard of the HTTP connection an ASGI ``send`` answers on (uvicorn's request
    cycle keeps its transport), or None (another server, a WebSocket)."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    get_protocol = getattr(transport, "get_protocol", None)
    protocol = get_protocol() if get_protocol is not None else None
    return protocol if isinstance(protocol, GuardedHttp) else None


__all__ = ["GuardedHttp", "Ticket", "Unauthenticated", "guarded", "guarded_protocol"]
