"""The edge's ASGI app: `/ws` for both dialects, `/healthz`, `/readyz`, the web client
(`/app/`), on one port."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from canonical.bus import Bus
from canonical.protocol import new_id

from . import metrics, web
from .attachments import AttachmentStore
from .attachments import routes as attachment_routes
from .errors import CLOSE_UNAVAILABLE
from .fastpath import wire_for
from .guard import Unauthenticated, guarded_protocol
from .hub import DIALECTS, Hub, encode
from .media import MediaFrames
from .session import DeviceSession

log = logging.getLogger("hdg.edge")


class EdgeState:
    def __init__(
        self,
        bus: Bus,
        edge_id: str | None = None,
        *,
        allowed_origins: frozenset[str] = frozenset(),
        send_queue_frames: int = 1024,
        attachments_dir: Path | None = None,
        max_upload_bytes: int = 64 * 1024 * 1024,
        max_unauthenticated_per_address: int = 64,
        body_idle_timeout_s: float = 30.0,
    ) -> None:
        self.bus = bus
        self.edge_id = edge_id or new_id(6)
        self.hub = Hub(bus, self.edge_id)
        self.allowed_origins = allowed_origins
        self.send_queue_frames = send_queue_frames
        self.sessions: set[DeviceSession] = set()
        # Attachments: HTTP uploads/downloads and iris media frames, on shared storage.
        if attachments_dir is None:
            log.warning("attachments are disabled on this edge: ANDROID_ATTACHMENTS_DIR is not set")
        self.attachments = AttachmentStore(
            self.hub, attachments_dir, max_upload_bytes, body_idle_timeout_s
        )
        # Sockets per source address not past their request header or hello (edge.guard).
        self.unauthenticated = Unauthenticated(max_unauthenticated_per_address)
        self.hub.media = MediaFrames(self.attachments)


class EdgeApp:
    """`/ws` straight to a device session, everything else (HTTP, lifespan) to Starlette.

    A device socket lives for hours: routed through Starlette it would keep the router's
    and both middlewares' coroutine frames alive for as long (~4.5 KiB a connection).
    """

    def __init__(self, http: Starlette, state: EdgeState) -> None:
        self.http = http
        self.state = http.state  # edge.server.GracefulServer finds the EdgeState here
        self._edge = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] == "/ws":
            await self._device(scope, receive, send)
        elif scope["type"] == "http" and (guard := guarded_protocol(send)) is not None:
            # The connection's next request header is due once this response is out.
            guard.request_started()
            try:
                await self.http(scope, receive, send)
            finally:
                guard.request_finished()
        else:
            await self.http(scope, receive, send)

    async def _device(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self._edge
        ws = WebSocket(scope, receive, send)
        origin = _header(scope, b"origin")
        if (
            origin
            and state.allowed_origins
            and origin not in state.allowed_origins
            and not same_origin(origin, _header(scope, b"host"))
        ):
            await ws.close(code=1008)
            return
        # Until its hello succeeds a socket holds one of its address's places (edge.guard).
        client = scope.get("client")
        ticket = state.unauthenticated.ticket(str(client[0]) if client else "unknown")
        if ticket is None:
            metrics.UNAUTHENTICATED_REFUSED.inc()
            await ws.accept()
            await ws.send_text(
                encode(
                    DIALECTS["pheby"].error_frame(
                        "rate_limited", "too many unauthenticated connections from this address"
                    )
                )
            )
            await ws.close(CLOSE_UNAVAILABLE)
            return
        session = DeviceSession(
            ws,
            state.hub,
            send_queue_frames=state.send_queue_frames,
            wire=wire_for(send),
            on_hello=ticket.release,
        )
        state.sessions.add(session)
        try:
            await session.run()
        finally:
            ticket.release()
            state.sessions.discard(session)


def same_origin(origin: str, host: str | None) -> bool:
    """The page was served by this very host (the web client on `/app/`). A browser
    always sends the host it dialled, and a page of another site cannot forge it, so
    comparing the Origin's authority with Host is enough; the scheme is left out because
    a TLS-terminating proxy shows the edge `ws` for an `https` page."""
    if not host:
        return False
    scheme, sep, authority = origin.partition("://")
    if not sep or scheme not in ("http", "https"):
        return False
    default = "443" if scheme == "https" else "80"
    return _authority(authority, default) == _authority(host, default)


def _authority(value: str, default_port: str) -> str:
    value = value.strip().lower()
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and not host.endswith(":"):  # "[::1]:8080" or "a:80"
        return value if port != default_port else host
    return value


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None


@dataclass(frozen=True)
class WorkerParts:
    """What one of several workers adds to its app (edge/workers.py): every worker's
    metrics in its scrape, and its lifespan's extra duties."""

    shared: metrics.SharedFigures
    metrics_dir: str
    lifespan: Callable[[EdgeState], contextlib.AbstractAsyncContextManager[None]]


def build_app(
    state: EdgeState, *, own_bus: bool = False, worker: WorkerParts | None = None
) -> EdgeApp:

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> JSONResponse:
        bus_ok = await state.bus.ping()
        body: dict[str, Any] = {
            "bus": bus_ok,
            "edge_id": state.edge_id,
            "connections": len(state.hub.conns),
        }
        return JSONResponse(body, status_code=200 if bus_ok else 503)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.hub.start()
        try:
            async with worker.lifespan(state) if worker is not None else contextlib.nullcontext():
                yield
        finally:
            for conn in list(state.hub.conns.values()):
                conn.request_close(1001)
            await state.hub.stop()
            if own_bus:
                await state.bus.close()

    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route(
                "/metrics",
                metrics.endpoint(
                    state,
                    worker.shared if worker is not None else None,
                    worker.metrics_dir if worker is not None else None,
                ),
            ),
            *attachment_routes(state.attachments),
            *web.routes(),
        ],
        lifespan=lifespan,
    )
    app.state.edge = state  # edge.server.GracefulServer closes devices with 1001 first
    return EdgeApp(app, state)
