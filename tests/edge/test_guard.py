"""edge.guard: a socket must finish its request header in time, and one address may hold
only so many sockets not past their header or hello; on the edge's fast protocols and on
uvicorn's stock ones alike."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import uvloop

from canonical.client import DeviceClient
from canonical.memory_bus import MemoryBus
from canonical.settings import load_settings
from edge.app import EdgeState, build_app
from edge.errors import CLOSE_UNAVAILABLE
from edge.fastpath.protocols import EdgeHttpProtocol, HttpToolsProtocol
from edge.guard import GuardedHttp, Unauthenticated
from edge.server import EmbeddedServer, make_state, uvicorn_config
from tests.harness.processes import free_port

TOKEN = "guard-token-" + "g" * 30
TENANT = "tenant-g"
CAP = 3
HEADER_TIMEOUT = 0.6
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: edge\r\n"  # no blank line: never complete
UPGRADE = (
    b"GET /ws HTTP/1.1\r\nHost: edge\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


@dataclass
class Edge:
    port: int
    state: EdgeState
    server: EmbeddedServer
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


@pytest.fixture(params=["fast", "stock"])
async def edge(request: pytest.FixtureRequest) -> AsyncIterator[Edge]:
    async with running_edge(stock=request.param == "stock") as started:
        yield started


@contextlib.asynccontextmanager
async def running_edge(*, stock: bool) -> AsyncIterator[Edge]:
    bus = MemoryBus()
    await bus.register_tenant(TENANT, TOKEN)
    port = free_port()
    settings = load_settings(
        {
            "port": port,
            "host": "127.0.0.1",
            "http_header_timeout_s": HEADER_TIMEOUT,
            "max_unauthenticated_per_address": CAP,
        }
    )
    state = make_state(settings, bus)
    protocols = {"http": "httptools", "ws": "websockets-sansio"} if stock else {}
    config = uvicorn_config(build_app(state), settings, **protocols)
    server = EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    edge = Edge(port, state, server)
    try:
        yield edge
    finally:
        for writer in edge.writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def opened(edge: Edge, source: str = "127.0.0.1", first: bytes = b"") -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", edge.port, local_addr=(source, 0))
    edge.writers.append(writer)
    if first:
        writer.write(first)
        await writer.drain()
    return reader


async def healthz(edge: Edge, source: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", edge.port, local_addr=(source, 0))
    edge.writers.append(writer)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n")
    return await asyncio.wait_for(reader.read(), 5)


async def test_both_protocol_paths_are_guarded(edge: Edge, request: pytest.FixtureRequest) -> None:
    await opened(edge)
    for _ in range(100):
        if edge.server.server_state.connections:
            break
        await asyncio.sleep(0.01)
    (proto,) = edge.server.server_state.connections
    expected = EdgeHttpProtocol if "fast" in request.node.callspec.id else HttpToolsProtocol
    assert type(proto) is expected
    # uvicorn keeps its own protocol; the transport reports to the guard around it.
    assert isinstance(proto.transport.get_protocol(), GuardedHttp)


async def test_an_unfinished_request_header_is_cut_after_the_header_timeout(edge: Edge) -> None:
    started = time.monotonic()
    reader = await opened(edge, first=PARTIAL)
    answer = await asyncio.wait_for(reader.read(), 5)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert HEADER_TIMEOUT * 0.8 <= time.monotonic() - started < HEADER_TIMEOUT + 2
    assert edge.state.unauthenticated.count("127.0.0.1") == 0


async def test_a_kept_alive_connection_must_send_its_next_header_in_time(edge: Edge) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", edge.port)
    edge.writers.append(writer)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"ok"), 5)
    assert first.startswith(b"HTTP/1.1 200 ")
    writer.write(PARTIAL)  # a second request, never finished: uvicorn alone waits for ever
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 408 ")


async def test_one_address_cannot_hold_more_unfinished_sockets_than_the_cap(edge: Edge) -> None:
    stalled = [await opened(edge, first=PARTIAL) for _ in range(CAP)]
    await asyncio.sleep(0.05)
    assert edge.state.unauthenticated.count("127.0.0.1") == CAP
    # One more from that address is refused at once, before uvicorn reads it.
    refused = await healthz(edge, "127.0.0.1")
    assert refused.startswith(b"HTTP/1.1 429 "), refused
    # Another address is served, HTTP and devices alike.
    assert (await healthz(edge, "127.0.0.2")).startswith(b"HTTP/1.1 200 ")
    device = await DeviceClient(edge.url).connect(local_addr=("127.0.0.2", 0))
    assert (await device.hello_pheby(TOKEN))["type"] == "ready"
    await device.close()
    # The stalled ones are cut by the header timeout, and the address is served again.
    for reader in stalled:
        assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 408 ")
    assert (await healthz(edge, "127.0.0.1")).startswith(b"HTTP/1.1 200 ")


async def test_websockets_count_until_their_hello(edge: Edge) -> None:
    waiting = [await DeviceClient(edge.url).connect() for _ in range(CAP)]
    await asyncio.sleep(0.1)
    assert edge.state.unauthenticated.count("127.0.0.1") == CAP
    assert (await healthz(edge, "127.0.0.1")).startswith(b"HTTP/1.1 429 ")
    # A hello frees its socket's place: the address may open another.
    assert (await waiting[0].hello_pheby(TOKEN))["type"] == "ready"
    assert edge.state.unauthenticated.count("127.0.0.1") == CAP - 1
    assert (await healthz(edge, "127.0.0.1")).startswith(b"HTTP/1.1 200 ")
    for client in waiting:
        await client.close()
    for _ in range(100):
        if edge.state.unauthenticated.count("127.0.0.1") == 0:
            break
        await asyncio.sleep(0.02)
    assert edge.state.unauthenticated.count("127.0.0.1") == 0


async def test_a_websocket_over_its_addresss_cap_is_told_why(edge: Edge) -> None:
    # Behind a trusted proxy (uvicorn's default: 127.0.0.1) the device's address is the
    # forwarded one: its places are counted by the app, which refuses with a reason.
    held = [edge.state.unauthenticated.ticket("10.9.9.9") for _ in range(CAP)]
    client = await DeviceClient(edge.url).connect(
        additional_headers={"X-Forwarded-For": "10.9.9.9"}
    )
    error = await client.wait_type("error")
    assert error["error"]["code"] == "rate_limited"
    assert await client.wait_closed() == CLOSE_UNAVAILABLE
    for ticket in held:
        assert ticket is not None
        ticket.release()
    assert edge.state.unauthenticated.count("10.9.9.9") == 0


@pytest.mark.parametrize("stock", [False, True], ids=["fast", "stock"])
def test_the_guard_works_on_uvloop_whose_transports_are_not_asyncios(stock: bool) -> None:
    """Standalone edges run uvloop; the tests above run the embedded edge's asyncio loop."""

    async def scenario() -> None:
        async with running_edge(stock=stock) as edge:
            stalled = [await opened(edge, first=PARTIAL) for _ in range(CAP)]
            assert (await healthz(edge, "127.0.0.1")).startswith(b"HTTP/1.1 429 ")
            assert (await healthz(edge, "127.0.0.2")).startswith(b"HTTP/1.1 200 ")
            device = await DeviceClient(edge.url).connect(local_addr=("127.0.0.2", 0))
            assert (await device.hello_pheby(TOKEN))["type"] == "ready"
            await device.close()
            for reader in stalled:
                assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 408 ")
            await test_a_kept_alive_connection_must_send_its_next_header_in_time(edge)
            assert edge.state.unauthenticated.count("127.0.0.1") == 0

    uvloop.run(scenario())


def test_places_are_counted_per_address_and_released_once() -> None:
    guard = Unauthenticated(2)
    first, second = guard.ticket("a"), guard.ticket("a")
    assert first is not None and second is not None
    assert guard.ticket("a") is None and guard.ticket("b") is not None
    first.release()
    first.release()  # once only
    assert guard.count("a") == 1
    second.release()
    assert guard.count("a") == 0
    kept = guard.hold("a")  # a kept-alive socket between requests counts even over the cap
    guard.hold("a")
    assert guard.count("a") == 2
    kept.release()
    assert guard.count("a") == 1
