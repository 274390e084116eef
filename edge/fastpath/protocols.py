"""uvicorn's httptools and websockets-sansio protocols, with the opening handshake done once.

Stock uvicorn parses an upgrade request with httptools, writes it back out as bytes, and
has websockets parse and check it again before building the 101 response header by
header. ``EdgeHttpProtocol`` recognises the common, valid upgrade in what httptools
already parsed (``edge.fastpath.handshake``) and hands it to ``EdgeWebSocketProtocol``, which
answers it straight away; every other upgrade takes uvicorn's own upgrade code unchanged.
After the 101 the socket is uvicorn's websockets-sansio protocol on websockets'
``ServerProtocol``, unchanged: framing, pings, flow control, closing and shutdown are
theirs.

Measured (``bench/connections.py``, py-spy): the stock handshake was about a third of an
edge's CPU per device set-up, the difference between ~2,450 and ~3,200 iris set-ups/s on
two cores (docs/performance.md).

Both classes copy and lean on attributes of uvicorn's classes, so they run only on the
uvicorn releases tests/edge/fastpath/test_protocols.py verified (``VERIFIED_UVICORN``)
and only while :func:`contract` finds every attribute, method and signature they touch;
otherwise ``edge.fastpath`` gives uvicorn its stock protocols by name.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Literal
from urllib.parse import unquote

import uvicorn
from uvicorn.config import Config
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import FlowControl

# uvicorn[standard] brings httptools; without it the contract fails and the edge runs
# uvicorn's stock protocols (edge.fastpath).
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import (
    ClientDisconnected,
    get_client_addr,
    get_local_addr,
    get_path_with_query_string,
    get_remote_addr,
    is_ssl,
)
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.datastructures import Headers
from websockets.http11 import Response
from websockets.protocol import State
from websockets.server import ServerProtocol

from canonical.fastpath.registry import assigned

from .handshake import plain_upgrade_accept, switching_protocols

# The loggers uvicorn's protocols look up on every connection (getLogger takes a lock).
_ERROR_LOG = logging.getLogger("uvicorn.error")


class EdgeWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets-sansio protocol that accepts a plain valid upgrade itself."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        # uvicorn's __init__, less two logger look-ups and the ServerProtocol: that one is
        # made by open() already open, or by connection_made() (test_protocols checks the
        # attributes are the same as stock's).
        if not config.loaded:
            config.load()  # pragma: no cover
        self.config = config
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.logger = _ERROR_LOG
        self.root_path = config.root_path
        self.asgi_version = config.asgi_version
        self.app_state = app_state
        self.connections = server_state.connections
        self.tasks = server_state.tasks
        self.default_headers = server_state.default_headers
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.server: tuple[str, int | None] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme: Literal["wss", "ws"] = None  # type: ignore[assignment]
        self.queue = asyncio.Queue()
        self.handshake_initiated = False
        self.handshake_complete = False
        self.close_sent = False
        self.disconnected = False
        self.close_timer = None
        self.close_timeout = 10.0
        self.initial_response = None
        self.conn: ServerProtocol = None  # type: ignore[assignment]
        self.read_paused = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.ping_interval = config.ws_ping_interval
        self.ping_timeout = config.ws_ping_timeout
        self.ping_timer = None
        self.pong_timer = None
        self.pending_ping_payload = None
        self.ping_sent_at = 0.0
        self.last_ping_rtt = 0.0
        self.frames = []
        self.curr_msg_data_type = "bytes"
        # The fast path's Sec-WebSocket-Accept until the 101 is sent (None: stock path).
        self._accept: bytes | None = None

    def _server_protocol(self, state: State) -> ServerProtocol:
        return ServerProtocol(
            max_size=self.config.ws_max_size,
            logger=_ERROR_LOG,
            state=state,
        )

    def adopt(
        self,
        transport: asyncio.Transport,
        server: tuple[str, int | None] | None,
        client: tuple[str, int] | None,
        scheme: Literal["wss", "ws"],
    ) -> None:
        """``connection_made`` with the addresses the HTTP protocol already read."""
        self.connections.add(self)
        self.transport = transport
        self.server = server
        self.client = client
        self.scheme = scheme

    def open(self, accept: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """Start the app for a plain valid upgrade (``plain_upgrade_accept`` gave ``accept``),
        as uvicorn's handle_connect does; the 101 goes out when the app accepts."""
        self.conn = self._server_protocol(State.OPEN)
        self._accept = accept
        self.handshake_initiated = True
        self.request = None  # type: ignore[assignment]  # (stock: kept for the socket's life)
        self.response = None  # type: ignore[assignment]
        # The scope uvicorn's handle_connect builds (httptools leaves no whitespace around
        # values, so these headers are what websockets' parser would have produced).
        raw_path, _, query_string = target.decode("ascii").partition("?")
        self.scope = {
            "type": "websocket",
            "asgi": {"version": self.asgi_version, "spec_version": "2.4"},
            "http_version": "1.1",
            "scheme": self.scheme,
            "server": self.server,
            "client": self.client,
            "root_path": self.root_path,
            "path": self.root_path + unquote(raw_path),
            "raw_path": self.root_path.encode("ascii") + raw_path.encode("ascii"),
            "query_string": query_string.encode("ascii"),
            "headers": headers,
            "subprotocols": [],
            "state": self.app_state.copy(),
            "extensions": {"websocket.http.response": {}},
        }
        self.queue.put_nowait({"type": "websocket.connect"})
        task = self.loop.create_task(self.run_asgi())
        task.add_done_callback(self.on_task_complete)
        self.tasks.add(task)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvicorn's own upgrade code (any request but a plain valid one): the stock path.
        self.conn = self._server_protocol(State.CONNECTING)
        super().connection_made(transport)

    async def send(self, message: Any) -> None:
        if (
            self._accept is not None
            and message["type"] == "websocket.accept"
            and not self.handshake_complete
            and self.initial_response is None
        ):
            await self._send_accept(message, self._accept)
        else:
            await super().send(message)

    async def _send_accept(self, message: Any, accept: bytes) -> None:
        """uvicorn's ``websocket.accept`` branch, with the response written directly."""
        await self.writable.wait()
        if self.disconnected:
            raise ClientDisconnected()
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info(
                '%s - "WebSocket %s" [accepted]',
                get_client_addr(self.scope),
                get_path_with_query_string(self.scope),
            )
        extra = message.get("headers")
        subprotocol = message.get("subprotocol")
        if extra or subprotocol:
            data = self._response(accept, list(extra or []), subprotocol)
        else:
            data = switching_protocols(accept, self.default_headers)
        if not self.transport.is_closing():
            self._accept = None
            self.handshake_complete = True
            self.transport.write(data)
            self.start_keepalive()

    def _response(
        self, accept: bytes, extra: list[tuple[bytes, bytes]], subprotocol: str | None
    ) -> bytes:
        """The 101 built the way websockets and uvicorn build it, for accepts that add
        headers or a subprotocol (the edge sends neither)."""
        headers = Headers()
        headers["Upgrade"] = "websocket"
        headers["Connection"] = "Upgrade"
        headers["Sec-WebSocket-Accept"] = accept.decode("ascii")
        headers.update(
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in self.default_headers + extra
        )
        if subprotocol:
            headers["Sec-WebSocket-Protocol"] = subprotocol
        return Response(101, "Switching Protocols", headers).serialize()


def local_addr(transport: asyncio.Transport) -> tuple[str, int | None] | None:
    """uvicorn's ``get_local_addr`` from the address the transport already holds.

    uvicorn asks the transport for a socket object and calls ``getsockname()`` on it: under
    uvloop that builds a ``socket.socket`` per call (and a system call), about 3 % of an
    edge's CPU per device set-up.
    """
    info = transport.get_extra_info("sockname")
    if isinstance(info, tuple) and len(info) >= 2:  # AF_INET (2) or AF_INET6 (4 items)
        return (str(info[0]), int(info[1]))
    if isinstance(info, str):  # a Unix socket's path
        return (info, None)
    return get_local_addr(transport)  # anything else: uvicorn's own way


class EdgeHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, handing an upgrade over already parsed."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # uvicorn's, with the local address read from the transport (local_addr).
        self.connections.add(self)
        self.transport = transport
        self.flow = FlowControl(transport)
        self.server = local_addr(transport)
        self.client = get_remote_addr(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection made", prefix)

    def handle_websocket_upgrade(self) -> None:
        protocol_class = self.ws_protocol_class
        accept = None
        if not self.config.ws_per_message_deflate:  # no extension to negotiate
            accept = plain_upgrade_accept(self.scope["method"].encode(), self.url, self.headers)
        if (
            accept is None
            or protocol_class is None
            or not issubclass(protocol_class, EdgeWebSocketProtocol)
        ):
            super().handle_websocket_upgrade()  # websockets parses and decides
            return
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sUpgrading to WebSocket", prefix)
        self.connections.discard(self)
        protocol = protocol_class(
            config=self.config, server_state=self.server_state, app_state=self.app_state
        )
        protocol.adopt(
            self.transport, self.server, self.client, "wss" if self.scheme == "https" else "ws"
        )
        self.transport.set_protocol(protocol)
        protocol.open(accept, self.url, self.headers)


# The uvicorn releases these subclasses were checked against (tests/edge/fastpath/
# test_protocols.py compares both paths' answers byte for byte). Under any other, the edge
# runs uvicorn's stock protocols: slower set-ups, same behaviour.
VERIFIED_UVICORN = ("0.55.",)


def contract(version: str | None = None) -> str | None:
    """None when uvicorn (``version``: the installed one) is a verified release and its
    protocol classes still have every attribute, method and signature the subclasses here
    copy or call; else what is not."""
    version = uvicorn.__version__ if version is None else version
    if not version.startswith(VERIFIED_UVICORN):
        return f"uvicorn {version} is not a verified release ({', '.join(VERIFIED_UVICORN)}x)"
    stock_ws, stock_http = WebSocketsSansIOProtocol, HttpToolsProtocol
    params = ("config", "server_state", "app_state", "_loop")
    for cls in (stock_ws, stock_http):
        got = tuple(inspect.signature(cls.__init__).parameters)[1:]
        if got != params:
            return f"{cls.__name__}.__init__ takes {got}, not {params}"
    # The websockets protocol's __init__ is copied: same state, plus the fast path's own.
    ours = assigned(EdgeWebSocketProtocol.__init__) - {"_accept"}
    differ = ours ^ assigned(stock_ws.__init__)
    if differ:
        return f"WebSocketsSansIOProtocol.__init__ differs in {sorted(differ)}"
    if assigned(EdgeWebSocketProtocol.adopt) != assigned(stock_ws.connection_made):
        return "WebSocketsSansIOProtocol.connection_made sets other attributes"
    if assigned(EdgeHttpProtocol.connection_made) != assigned(stock_http.connection_made):
        return "HttpToolsProtocol.connection_made sets other attributes"
    # What the upgrade reads of the HTTP protocol, and the websockets protocol's methods
    # open() and send() call.
    http_state = assigned(stock_http.__init__) | assigned(stock_http.on_message_begin)
    missing = {"config", "server_state", "app_state", "ws_protocol_class", "logger"}
    missing |= {"connections", "url", "headers", "scope"}
    missing -= http_state
    if missing:
        return f"HttpToolsProtocol no longer sets {sorted(missing)}"
    if not {"request", "response", "scope"} <= assigned(stock_ws.handle_connect):
        return "WebSocketsSansIOProtocol.handle_connect sets other attributes"
    for cls, names in (
        (stock_http, ("handle_websocket_upgrade",)),
        (stock_ws, ("run_asgi", "on_task_complete", "send", "start_keepalive")),
    ):
        for name in names:
            if not callable(getattr(cls, name, None)):
                return f"{cls.__name__}.{name} is missing"
    import websockets.server  # looked up now: what is installed

    protocol_params = set(inspect.signature(websockets.server.ServerProtocol).parameters)
    if not {"max_size", "logger", "state"} <= protocol_params:
        return f"websockets' ServerProtocol takes {sorted(protocol_params)}"
    if not (hasattr(State, "OPEN") and hasattr(State, "CONNECTING")):
        return "websockets.protocol.State lacks OPEN or CONNECTING"
    return None


__all__ = [
    "VERIFIED_UVICORN",
    "EdgeHttpProtocol",
    "EdgeWebSocketProtocol",
    "contract",
    "local_addr",
]
