"""Running the edge on uvicorn (websockets Sans-I/O), standalone or inside the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
import ssl
import threading
from collections.abc import Generator
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from canonical.errors import SettingsError
from canonical.protocol import MAX_FRAME_BYTES
from canonical.settings import GatewaySettings

from . import fastpath
from .app import EdgeState, build_app
from .errors import CLOSE_GOING_AWAY
from .guard import guarded


def uvicorn_config(app: Any, settings: GatewaySettings, **overrides: Any) -> uvicorn.Config:
    options = uvicorn_options(settings, **overrides)
    return uvicorn.Config(app, **guard_options(app, options, settings))


def guard_options(app: Any, options: dict[str, Any], settings: GatewaySettings) -> dict[str, Any]:
    """``options`` with the edge app's guard around the HTTP protocol."""
    state = getattr(getattr(app, "state", None), "edge", None)
    if not isinstance(state, EdgeState):
        return options
    # Whichever HTTP protocol runs (ours or uvicorn's stock one), a socket must finish
    # its request header in time, and an address may hold only so many unfinished.
    http = options["http"]
    protocol_class = (
        import_from_string(HTTP_PROTOCOLS.get(http, http)) if isinstance(http, str) else http
    )
    return {
        **options,
        "http": guarded(protocol_class, state.unauthenticated, settings.http_header_timeout_s),
    }


def uvicorn_options(settings: GatewaySettings, **overrides: Any) -> dict[str, Any]:
    """uvicorn's options for an edge, before its app exists (picklable: what uvicorn's
    process manager hands each worker)."""
    fastpath.configure(settings.fastpath)
    ssl: dict[str, Any] = {}
    if settings.ws_cert and settings.ws_key:
        ssl = {"ssl_certfile": str(settings.ws_cert), "ssl_keyfile": str(settings.ws_key)}
    options: dict[str, Any] = {
        "host": settings.ws_host,
        "port": settings.ws_port,
        # uvicorn's httptools and websockets-sansio protocols, with the opening
        # handshake parsed once (edge.fastpath), or uvicorn's stock ones.
        **fastpath.server_protocols(),
        # Larger than our 2 MiB frame limit so an oversize frame gets a `too_large`
        # error and the connection stays usable; beyond this uvicorn closes with 1009.
        "ws_max_size": 8 * MAX_FRAME_BYTES,
        "ws_ping_interval": settings.ws_ping_s,
        "ws_ping_timeout": settings.ws_ping_s,
        "ws_per_message_deflate": False,
        # No "server: uvicorn" on every response and upgrade: nothing to tell a scanner,
        # and one header less to build per connection. (Date stays: HTTP requires it.)
        "server_header": False,
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": 5,
        **ssl,
    }
    options.update(overrides)
    return options


# Connection set-ups allocate many container objects. At the default young threshold
# (700) a storm of 5,000 hellos ran ~800 young, ~70 middle and 5 full collections (a full
# one scans every live connection's objects): ~24 % of the edge's CPU (py-spy --native).
# Refcounting frees nearly all of it anyway; at 10,000: no full collection.
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Once the edge is built: keep the garbage collector off the hot path."""
    gc.freeze()  # start-up objects never need scanning again
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def check_tls(settings: GatewaySettings) -> None:
    """Raise :class:`SettingsError` now if the certificate and key cannot be loaded.

    uvicorn loads them only once the port is bound: a lone edge would die with a
    traceback, and the workers under uvicorn's manager would die young and be restarted for ever
    while the port accepts devices nobody serves.
    """
    if not (settings.ws_cert and settings.ws_key):
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(settings.ws_cert, settings.ws_key)
    except OSError as exc:  # ssl.SSLError is an OSError
        raise SettingsError(
            "ANDROID_WS_CERT/ANDROID_WS_KEY", f"cannot load the certificate and key ({exc})"
        ) from None


async def going_away(state: EdgeState, timeout: float = 2.0) -> None:
    """Close every device with 1001 (going away) and wait, bounded, for the sessions to end."""
    for conn in list(state.hub.conns.values()):
        conn.request_close(CLOSE_GOING_AWAY)
    for _ in range(int(timeout / 0.02)):
        if not state.hub.conns:
            return
        await asyncio.sleep(0.02)


class GracefulServer(uvicorn.Server):
    """uvicorn closes open WebSockets with 1012 on shutdown; devices get 1001 first."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = getattr(getattr(self.config.app, "state", None), "edge", None)
        if isinstance(state, EdgeState):
            for server in self.servers:
                server.close()
            await going_away(state)
        await super().shutdown(sockets)

    def request_exit(self) -> None:
        """Ask for the graceful shutdown a SIGTERM would start (from any thread: the main
        loop polls the flag)."""
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """uvicorn's SIGINT/SIGTERM, and a hang-up (the terminal or SSH session that ran
        the edge went away) as a graceful stop too: devices get 1001, not a dropped socket.
        Unlike uvicorn's signals it is not raised again afterwards: the edge exits 0."""
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        previous = signal.signal(signal.SIGHUP, self._hang_up)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGHUP, previous)

    def _hang_up(self, signum: int, frame: FrameType | None) -> None:
        self.should_exit = True


class EmbeddedServer(GracefulServer):
    """uvicorn inside another program's event loop: leave its signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_state(settings: GatewaySettings, bus: Any) -> EdgeState:
    return EdgeState(
        bus,
        settings.edge_id,
        allowed_origins=settings.origin_allowlist,
        send_queue_frames=settings.send_queue_frames,
        attachments_dir=settings.attachments_dir,
        max_upload_bytes=settings.max_upload_bytes,
        max_unauthenticated_per_address=settings.max_unauthenticated_per_address,
        body_idle_timeout_s=settings.http_body_idle_timeout_s,
    )


def bind_check(host: str, port: int) -> None:
    """Raise OSError now if the port cannot be bound, so start-up fails with a clear message."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


__all__ = [
    "EdgeState",
    "EmbeddedServer",
    "GracefulServer",
    "bind_check",
    "check_tls",
    "build_app",
    "going_away",
    "guard_options",
    "make_state",
    "uvicorn_config",
    "uvicorn_options",
]
