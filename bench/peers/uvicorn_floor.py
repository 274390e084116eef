"""The uvicorn floor: what any gateway on this project's required server stack pays per
connection before doing anything of its own.

    python bench/peers/uvicorn_floor.py --port P

uvicorn with the edge's own options (``edge.server.uvicorn_config``: uvloop, httptools,
``ws="websockets-sansio"`` as uvicorn ships them, not the edge's ``edge.fastpath.protocols``, the
edge's frame-size cap and keep-alive pings,
permessage-deflate off) serving a bare ASGI app: accept the WebSocket, read one text frame,
answer ``{"type":"hello.ack"}``, hold the socket until the device goes. No auth, no Redis,
no Starlette, no session objects. ``connections.py`` measures it beside our edge, so the
difference is what our own code costs per set-up and per idle connection.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvicorn

from bench.host import raise_nofile

ACK = '{"type":"hello.ack"}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"]
            await send({"type": kind + ".complete"})  # startup / shutdown
            if kind == "lifespan.shutdown":
                return
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    message = await receive()
    if message["type"] != "websocket.receive":
        return
    await send({"type": "websocket.send", "text": ACK})
    while (await receive())["type"] != "websocket.disconnect":
        pass


def config(port: int) -> uvicorn.Config:
    """The edge's uvicorn options (same function, default settings) on this port."""
    from canonical.settings import load_settings
    from edge.server import uvicorn_config

    settings = load_settings({"token": "floor-peer-token-unused-0000"})
    # uvicorn's stock protocols, not the edge's (edge.fastpath.protocols): the floor is what the
    # required server stack costs as it ships.
    return uvicorn_config(
        app,
        settings,
        host="127.0.0.1",
        port=port,
        lifespan="on",
        http="httptools",
        ws="websockets-sansio",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--workers", type=int, default=1, help="processes on one socket, as the edge's"
    )
    options = parser.parse_args()
    raise_nofile()
    # The edge's process settings too (edge/__main__.py), so only the app differs.
    from edge.__main__ import GC_YOUNG_THRESHOLD

    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    if options.workers > 1:
        # Several workers: uvicorn's process manager on sockets bound as the edge's are.
        from uvicorn.supervisors import Multiprocess

        from edge.workers import listen_sockets

        floor = config(options.port)
        floor.app, floor.workers = "bench.peers.uvicorn_floor:app", options.workers
        Multiprocess(floor, sockets=listen_sockets("127.0.0.1", options.port)).run()
        sys.exit(0)
    uvicorn.Server(config(options.port)).run()
