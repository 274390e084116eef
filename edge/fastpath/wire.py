"""Frames written straight to uvicorn's websockets-sansio socket, past websockets' own send.

Measured (``bench/fanout.py``, same run): per delivery the ASGI chain (Starlette send,
uvicorn send, websockets' frame serialisation, one ``str.encode`` per device) cost
1.39× raw websockets' CPU; writing each event's frame once per dialect (``edge.wire``)
straight to the transport brought N = 100 to 6.7 µs per delivery against raw's 7.1 µs.

``UvicornWire`` writes to a ``WebSocketsSansIOProtocol``'s transport, honouring that
protocol's flow control and closing state: the attributes its own ``send`` checks, which
:func:`contract` verifies uvicorn and websockets still have. Anything else (another ASGI
server, a test socket) keeps the plain ASGI path: ``wire_for`` returns None for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import websockets.server
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from canonical.fastpath.registry import assigned

from ..errors import WireClosed

_SANSIO_MODULE = "uvicorn.protocols.websockets.websockets_sansio_impl"
# What UvicornWire reads and writes on the protocol, and which of its methods sets each.
_STATE = frozenset(("transport", "writable", "close_sent", "disconnected", "conn"))
_HANDSHAKE = frozenset(("handshake_complete", "request", "response", "scope"))


class UvicornWire:
    """Direct writes to a ``uvicorn.protocols.websockets.websockets_sansio_impl``
    connection. Its attributes read here (``transport``, ``writable``, ``close_sent``,
    ``disconnected``) are the ones its own ``send`` checks before writing a frame."""

    __slots__ = ("_proto",)

    def __init__(self, proto: Any) -> None:
        self._proto = proto

    def write(self, frame: bytes) -> bool:
        proto = self._proto
        if proto.close_sent or proto.disconnected:
            raise WireClosed("the socket is closing")
        if not proto.writable.is_set():
            return False
        proto.transport.write(frame)
        return True

    def drained(self) -> Awaitable[Any]:
        return self._proto.writable.wait()  # type: ignore[no-any-return]

    def release_handshake(self) -> None:
        """Drop the upgrade request, response and header list uvicorn keeps for the
        socket's lifetime (~3 KiB a connection): once the socket is accepted nothing
        reads them again (uvicorn's later log lines use the path, not the headers)."""
        proto = self._proto
        if proto.handshake_complete:
            proto.request = None
            proto.response = None
            proto.scope["headers"] = []


_WIRED: set[type] = set()  # protocol classes found to be uvicorn's websockets-sansio


def wire_for(send: Callable[..., Any]) -> UvicornWire | None:
    """The direct writer for an ASGI ``send``, when it is uvicorn's websockets-sansio
    protocol without extensions (a negotiated permessage-deflate would need per-socket
    compression), else None."""
    proto = getattr(send, "__self__", None)
    if proto is None:
        return None
    kind = type(proto)
    if kind not in _WIRED:
        if not any(
            base.__name__ == "WebSocketsSansIOProtocol" and base.__module__ == _SANSIO_MODULE
            for base in kind.__mro__  # stock, or edge.fastpath.protocols' subclass
        ) or not all(hasattr(proto, name) for name in ("transport", "writable", "close_sent")):
            return None
        _WIRED.add(kind)  # its __init__ sets those attributes on every instance
    conn = getattr(proto, "conn", None)
    if conn is None or conn.extensions:
        return None
    return UvicornWire(proto)


def contract() -> str | None:
    """None when uvicorn's websockets-sansio protocol and websockets' ServerProtocol have
    what ``UvicornWire`` and ``wire_for`` use; else what is missing."""
    stock = WebSocketsSansIOProtocol
    if stock.__module__ != _SANSIO_MODULE:
        return f"WebSocketsSansIOProtocol moved to {stock.__module__}"
    missing = _STATE - assigned(stock.__init__)
    if missing:
        return f"WebSocketsSansIOProtocol.__init__ no longer sets {sorted(missing)}"
    missing = _HANDSHAKE - assigned(stock.handle_connect)
    if missing:
        return f"WebSocketsSansIOProtocol.handle_connect no longer sets {sorted(missing)}"
    # Its own send must still check the state a direct write checks (else the meaning of
    # those flags has changed).
    read_by_send = set(stock.send.__code__.co_names)
    if not {"close_sent", "disconnected", "writable", "transport"} <= read_by_send:
        return "WebSocketsSansIOProtocol.send no longer checks close_sent/writable"
    if not isinstance(getattr(websockets.server.ServerProtocol(), "extensions", None), list):
        return "websockets' ServerProtocol has no extensions list"
    return None
