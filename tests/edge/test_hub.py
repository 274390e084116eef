"""edge.hub.Hub: what a direct reply from the plugin puts on a device's connection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from canonical.bus import direct_batches, direct_envelope
from canonical.memory_bus import MemoryBus
from canonical.protocol import REPLAY
from edge.connection import Connection
from edge.dialects.iris import IrisDialect
from edge.hub import Hub
from tests.edge.dialect_events import a_user_echo
from tests.edge.test_connection import Socket, eventually

EDGE = "edge-h"


@pytest.fixture
async def hub() -> AsyncIterator[Hub]:
    made = Hub(MemoryBus(), EDGE)
    await made.start()
    try:
        yield made
    finally:
        await made.stop()


async def _replaying_device(hub: Hub) -> tuple[Connection, Socket]:
    socket = Socket()
    conn = Connection("c1", IrisDialect(), "tenant", "phone", socket.send_text, socket.close)
    conn.begin_replay()
    await hub.attach(conn)
    return conn, socket


async def test_frames_the_plugin_encoded_are_sent_as_they_are_before_the_replayed_events(
    hub: Hub,
) -> None:
    conn, socket = await _replaying_device(hub)
    ack = '{"type":"hello.ack","device_id":"phone","channels":[{"name":"Caf\\u00e9 ☕"}]}'
    event = {**a_user_echo(), "cursor": 4}
    body = {"before_text": [ack], "events": [event], "head": 4}
    await hub.bus.reply(EDGE, direct_envelope(conn.id, REPLAY, body))
    await eventually(lambda: len(socket.sent) == 2)
    assert socket.sent[0] == ack  # not parsed and encoded again: the very text
    assert json.loads(socket.sent[1])["cursor"] == 4
    assert conn.last_cursor == 4 and not conn.replaying
    await conn.stop()


async def test_anything_but_text_among_the_encoded_frames_is_not_sent(hub: Hub) -> None:
    conn, socket = await _replaying_device(hub)
    body = {"before_text": [{"type": "hello.ack"}, 7, None], "events": [], "head": 0}
    await hub.bus.reply(EDGE, direct_envelope(conn.id, REPLAY, body))
    await eventually(lambda: not conn.replaying)
    assert socket.sent == []
    await conn.stop()


async def test_a_batch_of_replies_in_one_message_reaches_each_device_its_own(hub: Hub) -> None:
    phone, phone_socket = await _replaying_device(hub)
    tablet_socket = Socket()
    tablet = Connection(
        "c2", IrisDialect(), "tenant", "tablet", tablet_socket.send_text, tablet_socket.close
    )
    tablet.begin_replay()
    await hub.attach(tablet)
    envelopes = [
        direct_envelope(conn_id, REPLAY, {"before_text": [f'{{"to":"{conn_id}"}}'], "head": 0})
        for conn_id in ("c1", "gone", "c2")
    ]
    (message,) = direct_batches(envelopes)
    await hub.bus.reply(EDGE, message)
    await eventually(lambda: bool(phone_socket.sent and tablet_socket.sent))
    assert phone_socket.sent == ['{"to":"c1"}'] and tablet_socket.sent == ['{"to":"c2"}']
    await phone.stop()
    await tablet.stop()
