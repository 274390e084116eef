"""edge.wire and edge.fastpath.wire: events framed once and written straight to uvicorn's websockets-sansio socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from canonical.client import DeviceClient
from canonical.memory_bus import MemoryBus
from canonical.settings import load_settings
from edge.app import EdgeState, build_app
from edge.errors import WireClosed
from edge.fastpath.wire import UvicornWire, wire_for
from edge.server import EmbeddedServer, make_state, uvicorn_config
from edge.wire import OutFrame, ws_frame
from tests.edge.dialect_events import a_user_echo
from tests.harness.processes import free_port

TOKEN = "wire-token-" + "w" * 30
TENANT = "tenant-w"


def parse(data: bytes) -> Frame:
    """Read one server frame back with websockets' own parser (as a client would)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    parser = Frame.parse(reader.read_exact, mask=False)
    try:
        next(parser)
    except StopIteration as done:
        assert reader.at_eof(), "bytes left after the frame"
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("the frame was incomplete")


SIZES = st.one_of(st.sampled_from([0, 1, 125, 126, 127, 65535, 65536, 70000]), st.integers(0, 3000))


@given(SIZES, st.sampled_from(["a", "é", "✓"]))
def test_a_framed_payload_reads_back_as_the_same_text_frame(size: int, char: str) -> None:
    text = char * size
    frame = parse(OutFrame(text).wire)
    assert frame.opcode is Opcode.TEXT and frame.fin
    assert bytes(frame.data).decode() == text


def test_a_binary_frame_reads_back_as_binary() -> None:
    frame = parse(ws_frame(b"\x00\x01" * 100, 0x82))
    assert frame.opcode is Opcode.BINARY and bytes(frame.data) == b"\x00\x01" * 100


def test_an_event_is_framed_once_whatever_the_number_of_devices() -> None:
    out = OutFrame('{"type":"pong"}')
    assert out.wire is out.wire


class _Event:
    def __init__(self, is_set: bool) -> None:
        self._set = is_set

    def is_set(self) -> bool:
        return self._set


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _Proto:
    """The attributes of uvicorn's protocol that UvicornWire reads."""

    def __init__(self, writable: bool = True) -> None:
        self.transport = _Transport()
        self.writable = _Event(writable)
        self.close_sent = False
        self.disconnected = False


def test_a_paused_socket_takes_no_write_and_a_closing_one_refuses_it() -> None:
    proto = _Proto(writable=False)
    wire = UvicornWire(proto)
    assert wire.write(b"x") is False and proto.transport.written == []
    proto.writable = _Event(True)
    assert wire.write(b"x") is True and proto.transport.written == [b"x"]
    proto.close_sent = True
    with pytest.raises(WireClosed):
        wire.write(b"y")


def test_only_uvicorns_sansio_protocol_gets_a_direct_wire() -> None:
    async def plain_send(message: Any) -> None:
        return None

    assert wire_for(plain_send) is None
    assert wire_for(_Proto().transport.write) is None


@dataclass
class Edge:
    url: str
    state: EdgeState
    bus: MemoryBus


@pytest.fixture
async def edge() -> AsyncIterator[Edge]:
    bus = MemoryBus()
    await bus.register_tenant(TENANT, TOKEN)
    port = free_port()
    settings = load_settings({"port": port, "host": "127.0.0.1"})
    state = make_state(settings, bus)
    server = EmbeddedServer(uvicorn_config(build_app(state), settings))
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield Edge(f"ws://127.0.0.1:{port}/ws", state, bus)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def test_devices_on_uvicorn_get_events_of_every_frame_length_through_the_direct_wire(
    edge: Edge,
) -> None:
    clients = [await DeviceClient(edge.url).connect() for _ in range(3)]
    for client in clients:
        assert (await client.hello_pheby(TOKEN))["type"] == "ready"
    sessions = list(edge.state.sessions)
    assert len(sessions) == 3
    assert all(isinstance(session.wire, UvicornWire) for session in sessions)
    # The handshake's request and headers are not kept for the socket's lifetime.
    protos = [session.wire._proto for session in sessions if session.wire is not None]
    assert all(proto.request is None and proto.scope["headers"] == [] for proto in protos)
    texts = ["short", "é" * 60000, "x" * 70000]  # 7-bit, 16-bit and 64-bit lengths
    for cursor, text in enumerate(texts, start=1):
        event = {**a_user_echo(), "role": "assistant", "kind": "final"}
        event.update(cursor=cursor, message_id=f"a-{cursor}", text=text)
        await edge.bus.publish(TENANT, json.dumps(event).encode())
    for client in clients:
        await client.wait_for(lambda f: f.get("message_id") == f"a-{len(texts)}")
        got = [f for f in client.frames if f.get("type") == "message.complete"]
        assert [(f["message_id"], f["text"]) for f in got] == [
            (f"a-{n}", text) for n, text in enumerate(texts, start=1)
        ]
        await client.close()
