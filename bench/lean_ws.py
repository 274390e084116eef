"""The lean device client of the benchmarks: a minimal WebSocket client (``LeanWs``,
``lean_connect``) that many thousands of devices in one process can afford, the iris
``hello`` they send, and bounded concurrency for connecting them.

No project code: devices speak the wire protocol only.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.host import Json

_UPGRADE = (
    "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def client_frame(payload: bytes, opcode: int = 1) -> bytes:
    """A masked client frame. The all-zero mask leaves the payload as it is (RFC 6455 lets
    any key through; servers unmask with it), so no per-byte work in Python."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + b"\x00\x00\x00\x00" + payload


class LeanWs(asyncio.Protocol):
    """A minimal WebSocket client: handshake, then text frames to ``on_text(self, payload,
    now_ns)``. Answers pings; never copies more than one partial frame."""

    __slots__ = (
        "transport",
        "opened",
        "closed",
        "_buf",
        "_upgraded",
        "_request",
        "on_text",
        "tag",
        "close_code",
    )

    def __init__(self, host: str, path: str, on_text: Callable[[LeanWs, bytes, int], None]):
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened = loop.create_future()
        self.closed = loop.create_future()
        self._buf = b""
        self._upgraded = False
        self._request = _UPGRADE.format(path=path, host=host).encode()
        self.on_text = on_text
        self.tag: Any = None
        self.close_code: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        transport.write(self._request)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("closed before the handshake"))
        if not self.closed.done():
            self.closed.set_result(self.close_code)

    def send_text(self, text: str | bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            data = text.encode() if isinstance(text, str) else text
            self.transport.write(client_frame(data))

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(client_frame(struct.pack("!H", 1000), opcode=8))
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if self._buf:
            data = self._buf + data
            self._buf = b""
        if not self._upgraded:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self._buf = data
                return
            if not data.startswith(b"HTTP/1.1 101"):
                if not self.opened.done():
                    self.opened.set_exception(
                        ConnectionError(data[: data.find(b"\r\n")].decode(errors="replace"))
                    )
                self.transport.close()  # type: ignore[union-attr]
                return
            self._upgraded = True
            if not self.opened.done():
                self.opened.set_result(None)
            data = data[end + 4 :]
        i = 0
        n = len(data)
        on_text = self.on_text
        while n - i >= 2:
            b0 = data[i]
            length = data[i + 1] & 0x7F
            if length < 126:
                start = i + 2
            elif length == 126:
                if n - i < 4:
                    break
                length = (data[i + 2] << 8) | data[i + 3]
                start = i + 4
            else:
                if n - i < 10:
                    break
                length = int.from_bytes(data[i + 2 : i + 10], "big")
                start = i + 10
            end = start + length
            if end > n:
                break
            opcode = b0 & 0x0F
            if opcode == 1 or opcode == 2:
                on_text(self, data[start:end], now)
            elif opcode == 9:
                self.transport.write(client_frame(data[start:end], opcode=10))  # type: ignore[union-attr]
            elif opcode == 8:
                if length >= 2:
                    self.close_code = (data[start] << 8) | data[start + 1]
                self.transport.close()  # type: ignore[union-attr]
                return
            i = end
        if i < n:
            self._buf = data[i:]


async def lean_connect(
    url: str, on_text: Callable[[LeanWs, bytes, int], None], timeout: float = 10.0, tag: Any = None
) -> LeanWs:
    """ws://host:port/path → an open LeanWs (``tag`` is set before any frame arrives)."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    loop = asyncio.get_running_loop()

    def factory() -> LeanWs:
        proto = LeanWs(hostport, "/" + path, on_text)
        proto.tag = tag
        return proto

    # asyncio.timeout, not wait_for: wait_for wraps each await in a task of its own, a
    # cost the bench's devices would add to every set-up they measure.
    async with asyncio.timeout(timeout):
        _, proto = await loop.create_connection(factory, host, int(port))
    async with asyncio.timeout(timeout):
        await proto.opened
    return proto


async def bounded_gather(
    factories: Iterable[Callable[[], Any]], concurrency: int, deadline: float
) -> list[Any]:
    """Run coroutine factories with at most ``concurrency`` in flight; stop starting new
    ones at ``deadline`` (monotonic). Exceptions are returned, not raised."""
    sem = asyncio.Semaphore(concurrency)
    results: list[Any] = []

    async def one(factory: Callable[[], Any]) -> Any:
        async with sem:
            if time.monotonic() > deadline:
                return TimeoutError("deadline passed before start")
            try:
                return await factory()
            except Exception as exc:
                return exc

    results = await asyncio.gather(*(one(f) for f in factories))
    return results


def iris_hello(token: str, device_id: str) -> Json:
    """An iris ``hello`` (no cursor) of a streaming bench device."""
    return {
        "type": "hello",
        "token": token,
        "device_id": device_id,
        "device_name": "bench",
        "caps": ["streaming"],
        "version": 1,
    }
