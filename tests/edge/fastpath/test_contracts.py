"""edge.fastpath: each contract check holds on the installed uvicorn and websockets and
fails when an internal it relies on is missing or changed; a real edge whose check fails
(or with ANDROID_FASTPATH=off) serves devices on uvicorn's stock protocols and ASGI sends,
and says so once."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
import websockets.server
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.server import ServerProtocol

from canonical.client import DeviceClient
from canonical.fastpath.registry import verdict
from canonical.memory_bus import MemoryBus
from canonical.settings import load_settings
from edge import fastpath
from edge.app import EdgeState, build_app
from edge.fastpath import protocols, wire
from edge.fastpath.protocols import EdgeHttpProtocol, EdgeWebSocketProtocol
from edge.fastpath.wire import UvicornWire
from edge.server import EmbeddedServer, make_state, uvicorn_config
from tests.edge.dialect_events import a_user_echo
from tests.harness.processes import free_port

TOKEN = "fastpath-token-" + "f" * 30
TENANT = "tenant-f"


@pytest.mark.parametrize("name", ["protocols", "wire"])
def test_each_contract_holds_on_the_installed_libraries(name: str) -> None:
    assert verdict(fastpath.REGISTRY.pieces[name]) is None


# --------------------------------------------------------------------------- protocols


def test_the_protocols_contract_fails_on_a_uvicorn_release_not_verified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(uvicorn, "__version__", "0.56.0")
    assert "uvicorn 0.56.0 is not a verified release" in str(protocols.contract())


@pytest.mark.parametrize(
    ("cls", "name"),
    [
        (HttpToolsProtocol, "handle_websocket_upgrade"),
        (WebSocketsSansIOProtocol, "run_asgi"),
        (WebSocketsSansIOProtocol, "on_task_complete"),
        (WebSocketsSansIOProtocol, "start_keepalive"),
    ],
)
def test_the_protocols_contract_fails_when_a_method_it_calls_is_gone(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str
) -> None:
    monkeypatch.delattr(cls, name)
    assert f"{cls.__name__}.{name} is missing" in str(protocols.contract())


def test_the_protocols_contract_fails_when_uvicorn_renames_websocket_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # uvicorn's own __init__ as a later release might have it: `frames` renamed.
    stock = WebSocketsSansIOProtocol.__init__
    code = stock.__code__
    names = tuple("fragments" if name == "frames" else name for name in code.co_names)
    renamed = types.FunctionType(
        code.replace(co_names=names), stock.__globals__, "__init__", stock.__defaults__
    )
    monkeypatch.setattr(WebSocketsSansIOProtocol, "__init__", renamed)
    assert "__init__ differs in ['fragments', 'frames']" in str(protocols.contract())


def test_the_protocols_contract_fails_when_a_constructor_takes_other_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def init(self: Any, config: Any, server_state: Any, app_state: Any, loop: Any = None) -> None:
        raise AssertionError("never constructed")

    monkeypatch.setattr(HttpToolsProtocol, "__init__", init)
    assert "HttpToolsProtocol.__init__ takes" in str(protocols.contract())


def test_the_protocols_contract_fails_when_the_http_protocol_stops_keeping_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def on_message_begin(self: Any) -> None:
        self.headers, self.scope = [], {}  # no url: the upgrade could not be answered

    monkeypatch.setattr(HttpToolsProtocol, "on_message_begin", on_message_begin)
    assert "no longer sets ['url']" in str(protocols.contract())


def test_the_protocols_contract_fails_when_websockets_server_protocol_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Renamed:
        def __init__(self, *, max_message_size: int | None = None) -> None:
            self.max_message_size = max_message_size

    monkeypatch.setattr(websockets.server, "ServerProtocol", Renamed)
    assert "ServerProtocol takes" in str(protocols.contract())


class WithoutExtensions(ServerProtocol):
    """websockets' ServerProtocol as a release without its ``extensions`` list would be."""

    @functools.wraps(ServerProtocol.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.extensions


# --------------------------------------------------------------------------- wire


def test_the_wire_contract_fails_when_uvicorns_send_stops_checking_the_closing_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def send(self: Any, message: Any) -> None:
        self.transport.write(message["bytes"])

    monkeypatch.setattr(WebSocketsSansIOProtocol, "send", send)
    assert "no longer checks close_sent" in str(wire.contract())


def test_the_wire_contract_fails_when_the_accepted_request_is_kept_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stock = WebSocketsSansIOProtocol.handle_connect

    def handle_connect(self: Any, event: Any) -> None:
        stock(self, event)  # request and response set somewhere else now

    monkeypatch.setattr(WebSocketsSansIOProtocol, "handle_connect", handle_connect)
    assert "handle_connect no longer sets" in str(wire.contract())


def test_the_wire_contract_fails_when_websockets_keeps_no_extensions_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(websockets.server, "ServerProtocol", WithoutExtensions)
    assert "no extensions list" in str(wire.contract())
    assert protocols.contract() is None  # the handshake's fast path does not read them


# --------------------------------------------------------------------------- the fall-back


@pytest.fixture
def fresh_decision(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The edge registry decides again, under this test's environment and patches (and
    once more, as the process had it, after the patches are undone)."""
    monkeypatch.delenv("ANDROID_FASTPATH", raising=False)
    fastpath.REGISTRY.reset()
    yield
    fastpath.REGISTRY.reset()


@dataclass
class Edge:
    url: str
    port: int
    state: EdgeState
    server: EmbeddedServer
    bus: MemoryBus


@pytest.fixture
async def start_edge() -> AsyncIterator[Any]:
    started: list[tuple[EmbeddedServer, asyncio.Task[None]]] = []

    async def start() -> Edge:
        bus = MemoryBus()
        await bus.register_tenant(TENANT, TOKEN)
        port = free_port()
        settings = load_settings({"port": port, "host": "127.0.0.1"})
        state = make_state(settings, bus)
        server = EmbeddedServer(uvicorn_config(build_app(state), settings))
        task = asyncio.create_task(server.serve())
        started.append((server, task))
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.01)
        return Edge(f"ws://127.0.0.1:{port}/ws", port, state, server, bus)

    yield start
    for server, task in started:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@dataclass
class Served:
    http: type
    ws: type
    wire: type | None


async def serve_a_device(edge: Edge) -> Served:
    """A keep-alive HTTP request and a pheby device that gets an event: which classes
    served them."""
    reader, writer = await asyncio.open_connection("127.0.0.1", edge.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: edge\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    client = await DeviceClient(edge.url).connect()
    try:
        assert (await client.hello_pheby(TOKEN))["type"] == "ready"
        event = {**a_user_echo(), "role": "assistant", "kind": "final"}
        event.update(cursor=1, message_id="a-1", text="through whichever path")
        await edge.bus.publish(TENANT, json.dumps(event).encode())
        got = await client.wait_for(lambda f: f.get("message_id") == "a-1")
        assert got["text"] == "through whichever path"
        [session] = edge.state.sessions
        http = {
            type(p)
            for p in edge.server.server_state.connections
            if isinstance(p, HttpToolsProtocol)
        }
        ws = {type(p) for p in edge.server.server_state.connections} - http
        [http_class], [ws_class] = http, ws
        return Served(http_class, ws_class, None if session.wire is None else type(session.wire))
    finally:
        await client.close()
        writer.close()


def fastpath_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "hdg.fastpath" and r.levelno == level
    ]


async def test_an_edge_runs_its_fast_paths_when_every_contract_holds(
    fresh_decision: None, start_edge: Any, caplog: pytest.LogCaptureFixture
) -> None:
    served = await serve_a_device(await start_edge())
    assert served == Served(EdgeHttpProtocol, EdgeWebSocketProtocol, UvicornWire)
    assert not fastpath_lines(caplog, logging.WARNING)


async def test_an_edge_on_an_unverified_uvicorn_runs_the_stock_protocols_and_says_so_once(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    start_edge: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(uvicorn, "__version__", "0.99.0")
    first = await serve_a_device(await start_edge())
    second = await serve_a_device(await start_edge())  # decided once: not logged again
    assert first == second == Served(HttpToolsProtocol, WebSocketsSansIOProtocol, UvicornWire)
    [line] = fastpath_lines(caplog, logging.WARNING)
    assert "edge.protocols off" in line and "uvicorn 0.99.0" in line
    assert "not a verified release" in line


async def test_an_edge_whose_uvicorn_fails_the_wire_contract_sends_through_asgi(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    start_edge: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(websockets.server, "ServerProtocol", WithoutExtensions)
    served = await serve_a_device(await start_edge())
    assert served == Served(EdgeHttpProtocol, EdgeWebSocketProtocol, None)
    [line] = fastpath_lines(caplog, logging.WARNING)
    assert "edge.wire off" in line and f"uvicorn {uvicorn.__version__}" in line


async def test_android_fastpath_off_gives_an_edge_every_stock_path_without_a_warning(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    start_edge: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="hdg.fastpath")
    monkeypatch.setenv("ANDROID_FASTPATH", "off")
    served = await serve_a_device(await start_edge())
    assert served == Served(HttpToolsProtocol, WebSocketsSansIOProtocol, None)
    assert fastpath.server_protocols() == {"http": "httptools", "ws": "websockets-sansio"}
    assert not fastpath_lines(caplog, logging.WARNING)
    [line] = fastpath_lines(caplog, logging.INFO)
    assert "ANDROID_FASTPATH=off" in line


async def test_an_edge_whose_fast_paths_cannot_even_be_imported_serves_on_the_stock_paths(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    start_edge: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # uvicorn without httptools, say: the modules' own imports fail.
    monkeypatch.setitem(sys.modules, "edge.fastpath.protocols", None)
    monkeypatch.setitem(sys.modules, "edge.fastpath.wire", None)
    served = await serve_a_device(await start_edge())
    assert served == Served(HttpToolsProtocol, WebSocketsSansIOProtocol, None)
    lines = fastpath_lines(caplog, logging.WARNING)
    assert len(lines) == 2 and all("import of" in line for line in lines)
