"""Frames written straight to the socket: each event framed once, shared by every device.

An ASGI ``websocket.send`` costs a dict, an awaited chain (Starlette → uvicorn →
websockets), one ``str.encode`` and one frame serialisation per device. A broadcast does
not need any of that per device: a server-to-client text frame is unmasked, so the same
bytes fit every connection. ``OutFrame`` frames a payload once (lazily, on first use);
``UvicornWire`` writes it to uvicorn's websockets-sansio transport, honouring that
protocol's flow control and closing state. Anything else (another ASGI server, a test
socket) keeps the plain ASGI path: ``wire_for`` returns None for it.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .errors import WireClosed

_OP_TEXT = 0x81  # FIN + text
_OP_BINARY = 0x82  # FIN + binary


def ws_frame(payload: bytes, opcode: int = _OP_TEXT) -> bytes:
    """One unfragmented, unmasked (server-to-client) WebSocket frame, RFC 6455 §5.2."""
    size = len(payload)
    if size < 126:
        return bytes((opcode, size)) + payload
    if size < 65536:
        return struct.pack("!BBH", opcode, 126, size) + payload
    return struct.pack("!BBQ", opcode, 127, size) + payload


class OutFrame:
    """One encoded frame for every connection of a dialect (text, and its wire bytes)."""

    __slots__ = ("_wire", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._wire: bytes | None = None

    @property
    def wire(self) -> bytes:
        wire = self._wire
        if wire is None:
            wire = self._wire = ws_frame(self.text.encode())
        return wire


class Wire(Protocol):
    def write(self, frame: bytes) -> bool:
        """Write a whole frame now and return True, or return False while the socket's
        buffer is over its high-water mark (call ``drained`` and retry). Raises
        WireClosed once the socket is closing."""

    def drained(self) -> Awaitable[Any]:
        """Until the socket takes writes again (or is gone)."""


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
            base.__name__ == "WebSocketsSansIOProtocol"
            and base.__module__ == "uvicorn.protocols.websockets.websockets_sansio_impl"
            for base in kind.__mro__  # stock, or edge.protocols' subclass
        ) or not all(hasattr(proto, name) for name in ("transport", "writable", "close_sent")):
            return None
        _WIRED.add(kind)  # its __init__ sets those attributes on every instance
    conn = getattr(proto, "conn", None)
    if conn is None or conn.extensions:
        return None
    return UvicornWire(proto)
