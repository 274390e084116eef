"""edge.fastpath.protocols: uvicorn with the edge's protocols answers every handshake as stock uvicorn
does, byte for byte, and a socket opened on the fast path is websockets' afterwards."""

from __future__ import annotations

import asyncio
import base64
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.asyncio.client import connect

from edge.fastpath import server_protocols
from edge.fastpath.protocols import EdgeHttpProtocol, EdgeWebSocketProtocol, contract
from edge.server import EmbeddedServer
from tests.harness.processes import free_port


@dataclass
class Recorder:
    scopes: list[dict[str, Any]] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Echoes text frames; /refuse closes before accepting, /extra accepts with a header."""
        if scope["type"] != "websocket":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        self.scopes.append(scope)
        await receive()  # websocket.connect
        if scope["path"] == "/refuse":
            await send({"type": "websocket.close", "code": 1008})
            return
        accept: dict[str, Any] = {"type": "websocket.accept"}
        if scope["path"] == "/extra":
            accept["headers"] = [(b"X-Extra", b"1")]
        await send(accept)
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                self.closed.append(message["code"])
                return
            await send({"type": "websocket.send", "text": "echo:" + message["text"]})


@dataclass
class Servers:
    stock: int
    ours: int
    stock_app: Recorder
    our_app: Recorder
    our_server: EmbeddedServer


async def serve(app: Recorder, **protocols: Any) -> tuple[EmbeddedServer, asyncio.Task[None], int]:
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        log_level="warning",
        ws_per_message_deflate=False,
        ws_ping_interval=0.2,
        ws_ping_timeout=5.0,
        **protocols,
    )
    server = EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    return server, task, port


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    stock_app, our_app = Recorder(), Recorder()
    stock, stock_task, stock_port = await serve(stock_app, http="httptools", ws="websockets-sansio")
    ours, our_task, our_port = await serve(our_app, **server_protocols())
    try:
        yield Servers(stock_port, our_port, stock_app, our_app, ours)
    finally:
        for server, task in ((stock, stock_task), (ours, our_task)):
            server.should_exit = True
            await asyncio.wait_for(task, 15)


async def exchange(port: int, request: bytes) -> bytes:
    """Send a raw request; the response head (a 101), or everything until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    if not head.startswith(b"HTTP/1.1 101 "):
        head += await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return head


def undated(response: bytes) -> bytes:
    return re.sub(rb"(?im)^date: [^\r]*\r\n", b"date: -\r\n", response)


def upgrade(path: bytes = b"/ws", *extra: bytes, key: bytes | None = None) -> bytes:
    key = key or base64.b64encode(os.urandom(16))
    lines = [
        b"GET " + path + b" HTTP/1.1",
        b"Host: 127.0.0.1",
        b"Upgrade: websocket",
        b"Connection: Upgrade",
        b"Sec-WebSocket-Key: " + key,
        b"Sec-WebSocket-Version: 13",
        *extra,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
REQUESTS = {
    "a plain upgrade (fast path)": upgrade(key=KEY),
    "an offer of permessage-deflate, which the edge declines (fast path)": upgrade(
        b"/ws?device=1", b"Sec-WebSocket-Extensions: permessage-deflate", key=KEY
    ),
    "a subprotocol offer": upgrade(b"/ws", b"Sec-WebSocket-Protocol: chat", key=KEY),
    "version 8": upgrade(key=KEY).replace(b"Version: 13", b"Version: 8"),
    "a 15-byte key": upgrade(key=base64.b64encode(b"k" * 15)),
    "a key that is not base64": upgrade(key=b"not*base64*at*all*******"),
    "two keys": upgrade(b"/ws", b"Sec-WebSocket-Key: " + KEY, key=KEY),
    "no Connection: upgrade": upgrade(key=KEY).replace(
        b"Connection: Upgrade", b"Connection: close"
    ),
    "an app that refuses before accepting": upgrade(b"/refuse", key=KEY),
    "an app that accepts with a header of its own": upgrade(b"/extra", key=KEY),
}


@pytest.mark.parametrize("name", list(REQUESTS))
async def test_every_handshake_is_answered_byte_for_byte_as_stock_uvicorn_answers_it(
    servers: Servers, name: str
) -> None:
    request = REQUESTS[name]
    stock = await exchange(servers.stock, request)
    ours = await exchange(servers.ours, request)
    assert undated(ours) == undated(stock)


async def test_the_app_sees_the_same_scope_after_a_fast_handshake(servers: Servers) -> None:
    request = upgrade(b"/ws?device=1&x=%20y", b"Origin: https://app.example", key=KEY)
    assert (await exchange(servers.stock, request)).startswith(b"HTTP/1.1 101 ")
    assert (await exchange(servers.ours, request)).startswith(b"HTTP/1.1 101 ")
    for _ in range(100):
        if servers.stock_app.scopes and servers.our_app.scopes:
            break
        await asyncio.sleep(0.01)

    def comparable(scope: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in scope.items() if k not in ("client", "server", "state")}

    stock, ours = servers.stock_app.scopes[0], servers.our_app.scopes[0]
    assert comparable(ours) == comparable(stock)
    assert ours["client"][0] == "127.0.0.1" and ours["server"][0] == "127.0.0.1"
    assert ours["path"] == "/ws" and ours["query_string"] == b"device=1&x=%20y"


async def test_a_fast_opened_socket_echoes_answers_pings_and_closes_cleanly(
    servers: Servers,
) -> None:
    async with connect(f"ws://127.0.0.1:{servers.ours}/ws") as ws:
        await ws.send("one")
        assert await ws.recv() == "echo:one"
        # It was the fast path: websockets never parsed a request for this socket.
        (proto,) = servers.our_server.server_state.connections
        assert isinstance(proto, EdgeWebSocketProtocol) and proto.request is None
        await asyncio.wait_for(await ws.ping(), 5)  # the client's ping, our pong
        await asyncio.sleep(0.5)  # the server's keep-alive pings (every 0.2 s) answered
        await ws.send("two")
        assert await ws.recv() == "echo:two"
    for _ in range(100):
        if servers.our_app.closed:
            break
        await asyncio.sleep(0.01)
    assert servers.our_app.closed == [1000]


async def test_the_edges_protocols_are_uvicorns_with_the_same_state() -> None:
    config = uvicorn.Config(Recorder(), **server_protocols())
    config.load()
    assert config.http_protocol_class is EdgeHttpProtocol
    assert config.ws_protocol_class is EdgeWebSocketProtocol
    state = ServerState()
    stock = WebSocketsSansIOProtocol(config, state, {})
    ours = EdgeWebSocketProtocol(config, state, {})
    # Every attribute uvicorn's own methods may read is set (a new one in a later uvicorn
    # fails here, not in production).
    assert set(vars(ours)) - {"_accept"} == set(vars(stock))


def test_the_installed_uvicorn_is_one_the_fast_handshake_was_verified_on() -> None:
    # A new uvicorn release: rerun this file against it, then add it to VERIFIED_UVICORN.
    assert contract() is None, f"uvicorn {uvicorn.__version__}: {contract()}"


def test_an_unverified_uvicorn_release_fails_the_contract() -> None:
    assert "0.56.0 is not a verified release" in str(contract("0.56.0"))
    assert contract("1.0.0") is not None
    assert contract("0.55.0") is None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_the_local_address_is_the_one_uvicorn_would_read(host: str, loop_kind: str) -> None:
    import uvloop
    from uvicorn.protocols.utils import get_local_addr

    from edge.fastpath.protocols import local_addr

    async def both() -> tuple[Any, Any]:
        made: asyncio.Future[asyncio.Transport] = asyncio.get_running_loop().create_future()

        class Accept(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                made.set_result(transport)  # type: ignore[arg-type]

        server = await asyncio.get_running_loop().create_server(Accept, host, 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(host, port)
        transport = await asyncio.wait_for(made, 5)
        try:
            return local_addr(transport), get_local_addr(transport)
        finally:
            writer.close()
            transport.close()
            server.close()
            await server.wait_closed()

    runner = uvloop.run if loop_kind == "uvloop" else asyncio.run
    ours, uvicorns = runner(both())
    assert ours == uvicorns and ours[0] == host


def masked_text(text: str) -> bytes:
    """A client's text frame (RFC 6455 §5.3: masked)."""
    from websockets.frames import Frame, Opcode

    return Frame(Opcode.TEXT, text.encode()).serialize(mask=True, extensions=[])


async def first_reply_after_an_eager_frame(port: int) -> bytes:
    """Send a text frame right behind the upgrade, before the 101 is read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(upgrade(key=KEY))
    await writer.drain()
    await asyncio.sleep(0.01)  # a separate segment: not dropped with the request's tail
    writer.write(masked_text("eager"))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    frame = await asyncio.wait_for(reader.readexactly(2 + len("echo:eager")), 5)
    writer.close()
    return undated(head) + frame


async def test_a_frame_sent_before_the_101_arrives_reaches_the_app_as_on_stock(
    servers: Servers,
) -> None:
    stock = await first_reply_after_an_eager_frame(servers.stock)
    ours = await first_reply_after_an_eager_frame(servers.ours)
    assert ours == stock
    assert ours.endswith(b"echo:eager")
