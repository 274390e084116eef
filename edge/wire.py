"""Frames written straight to the socket: each event framed once, shared by every device.

An ASGI ``websocket.send`` costs a dict, an awaited chain (Starlette → uvicorn →
websockets), one ``str.encode`` and one frame serialisation per device. A broadcast does
not need any of that per device: a server-to-client text frame is unmasked, so the same
bytes fit every connection. ``OutFrame`` frames a payload once (lazily, on first use);
a :class:`Wire` writes it to the socket (``edge.fastpath.wire``, on uvicorn's
websockets-sansio protocol). Without one (that fast path off, another ASGI server, a test
socket) a connection keeps the plain ASGI path.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from typing import Any, Protocol

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
