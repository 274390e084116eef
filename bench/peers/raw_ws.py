"""Peer (a), the raw limit: one `websockets` 15.0.1 asyncio server process that broadcasts
the workload to its connections itself (no Redis, no auth, no queue per connection).

    python bench/peers/raw_ws.py --port P [--mode broadcast|send]

Devices connect to ``/`` and send ``{"room": "t0"}``; they get ``{"type":"hello.ack"}``.
A control connection on ``/control`` sends ``{"op": "run", "rate", "duration", "size"}``
(events/s over all rooms, round-robin) and gets the cursor range sent to every room.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import websockets
from websockets.asyncio.server import ServerConnection, serve

from bench.peers.workload import frame, paced, pad_for

ROOMS: dict[str, set[ServerConnection]] = {}
SEQ: dict[str, int] = {}
MODE = "broadcast"


async def run(rate: float, duration: float, size: int) -> dict[str, Any]:
    pad = pad_for(size)
    rooms = sorted(ROOMS)
    first: dict[str, int] = {}
    state = {"i": 0}
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    async def emit(k: int) -> None:
        for _ in range(k):
            room = rooms[state["i"] % len(rooms)]
            state["i"] += 1
            seq = SEQ[room] = SEQ.get(room, 0) + 1
            first.setdefault(room, seq)
            text = dumps(frame(seq, f"m-{room}-{seq}", pad))
            if MODE == "broadcast":
                websockets.broadcast(ROOMS[room], text)
            else:
                for ws in list(ROOMS[room]):
                    await ws.send(text)

    result = await paced(rate, duration, emit)
    result["ranges"] = {room: [first[room], SEQ[room]] for room in first}
    return result


async def handler(ws: ServerConnection) -> None:
    if ws.request is not None and ws.request.path == "/control":
        async for message in ws:
            command = json.loads(message)
            if command["op"] == "run":
                reply = await run(command["rate"], command["duration"], command["size"])
            else:
                reply = {"connections": sum(len(v) for v in ROOMS.values())}
            await ws.send(json.dumps(reply))
        return
    hello = json.loads(await ws.recv())
    room = str(hello.get("room", "t0"))
    ROOMS.setdefault(room, set()).add(ws)
    try:
        await ws.send('{"type":"hello.ack"}')
        await ws.wait_closed()
    finally:
        ROOMS[room].discard(ws)
        if not ROOMS[room]:
            del ROOMS[room]


async def main(port: int) -> None:
    async with serve(
        handler,
        "127.0.0.1",
        port,
        compression=None,
        ping_interval=20,
        ping_timeout=20,
        max_size=2**20,
        backlog=4096,
    ) as server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["broadcast", "send"], default="broadcast")
    options = parser.parse_args()
    MODE = options.mode
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import uvloop

    uvloop.run(main(options.port))
