"""Peer (b): python-socketio 5 with ``AsyncRedisManager``, as an ASGI app on the same
uvicorn stack as the edge (uvloop, httptools, websockets-sansio, no permessage-deflate).

    python bench/peers/sio_server.py --port P --redis redis://127.0.0.1:R/0

Clients open ``/socket.io/?EIO=4&transport=websocket`` and connect the default namespace
with ``{"room": "t0"}`` as auth: one room per user (tenant). The emitter is a separate
process (``AsyncRedisManager(write_only=True)``), as socket.io documents for external
producers.
"""

from __future__ import annotations

import argparse
import resource
from typing import Any

import socketio
import uvicorn


def build(redis_url: str) -> Any:
    manager = socketio.AsyncRedisManager(redis_url)
    sio = socketio.AsyncServer(
        async_mode="asgi",
        client_manager=manager,
        cors_allowed_origins=[],
        transports=["websocket"],
        ping_interval=20,
        ping_timeout=20,
        http_compression=False,
        compression_threshold=2**31,
    )

    @sio.event
    async def connect(sid: str, environ: dict[str, Any], auth: Any) -> None:
        room = (auth or {}).get("room", "t0")
        await sio.enter_room(sid, str(room))

    return socketio.ASGIApp(sio)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis", required=True)
    options = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    config = uvicorn.Config(
        build(options.redis),
        host="127.0.0.1",
        port=options.port,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_ping_interval=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        backlog=4096,
    )
    uvicorn.Server(config).run()
