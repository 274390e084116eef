"""edge.session: what a device hears when the bus writes of its hello settle."""

from __future__ import annotations

import asyncio
import functools
import json

from canonical.errors import BusUnavailable
from edge.connection import Connection
from edge.dialects.iris import IrisDialect
from edge.errors import CLOSE_UNAVAILABLE
from edge.session import _online_settled

from .test_connection import Socket, eventually


def _hello_settling(socket: Socket) -> tuple[Connection, asyncio.Future[None]]:
    conn = Connection("c1", IrisDialect(), "t1", "phone", socket.send_text, socket.close)
    online: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    online.add_done_callback(functools.partial(_online_settled, conn))
    return conn, online


async def test_a_hello_whose_bus_writes_failed_tells_the_device_and_closes_1013() -> None:
    socket = Socket()
    conn, online = _hello_settling(socket)
    online.set_exception(BusUnavailable("redis connection lost"))
    await eventually(lambda: bool(socket.closes))
    assert [json.loads(text)["error"]["code"] for text in socket.sent] == ["unavailable"]
    assert socket.closes[0][0] == CLOSE_UNAVAILABLE
    assert conn.closed


async def test_a_hello_whose_bus_writes_succeeded_leaves_the_device_alone() -> None:
    socket = Socket()
    conn, online = _hello_settling(socket)
    online.set_result(None)
    for _ in range(5):
        await asyncio.sleep(0)
    assert socket.sent == [] and socket.closes == [] and not conn.closed


async def test_a_device_already_closing_is_not_told_twice() -> None:
    socket = Socket()
    conn, online = _hello_settling(socket)
    conn.request_close(1000)
    online.set_exception(BusUnavailable("redis connection lost"))
    await eventually(lambda: bool(socket.closes))
    assert socket.sent == []
    assert socket.closes[0][0] == 1000
