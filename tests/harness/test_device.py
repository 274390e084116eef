"""The end-to-end device client checks every frame against its dialect's schema."""

from __future__ import annotations

import pytest

from tests.harness.device import DeviceClient, FrameMismatch

URL = "ws://127.0.0.1:9/ws"  # never connected: each check happens before the socket


def test_a_server_frame_off_the_schema_fails_the_next_wait_naming_type_and_field() -> None:
    client = DeviceClient(URL)
    client.on_frame({"type": "pong", "ts": "2026-01-01T00:00:00.000+00:00"})
    client.raise_mismatches()
    client.on_frame({"type": "pong", "ts": "yesterday"})
    with pytest.raises(FrameMismatch, match=r"frame 'pong' at ts: 'yesterday' does not match"):
        client.raise_mismatches()
    assert client.seen == {"pong": 2}


async def test_a_frame_the_test_sends_off_the_schema_is_refused_before_it_leaves() -> None:
    client = DeviceClient(URL)
    with pytest.raises(FrameMismatch, match=r"frame 'hello' at protocol_version"):
        await client.send({"type": "hello", "secret": "s", "protocol_version": 2})
    assert client.dialect is None


async def test_within_off_schema_a_frame_that_matches_is_refused() -> None:
    client = DeviceClient(URL)
    with client.off_schema(), pytest.raises(FrameMismatch, match="yet it matches"):
        await client.send({"type": "ping"})
