"""An edge's /metrics and its graceful shutdown, on a real uvicorn server in this process."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from canonical.client import DeviceClient
from canonical.memory_bus import MemoryBus
from canonical.protocol import LOCKOUT_FAILURES
from canonical.settings import load_settings
from edge.app import build_app
from edge.errors import CLOSE_GOING_AWAY
from edge.server import EmbeddedServer, make_state, uvicorn_config
from tests.harness.processes import free_port

TOKEN = "metrics-token-" + "m" * 30


@dataclass
class Edge:
    url: str
    server: EmbeddedServer
    task: asyncio.Task[None]

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url.replace("ws://", "http://") + "/metrics") as r:
            return str(r.read().decode())


@pytest.fixture
async def edge() -> AsyncIterator[Edge]:
    bus = MemoryBus()
    await bus.register_tenant("tenant-m", TOKEN)
    port = free_port()
    settings = load_settings({"port": port, "host": "127.0.0.1"})
    server = EmbeddedServer(uvicorn_config(build_app(make_state(settings, bus)), settings))
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    running = Edge(f"ws://127.0.0.1:{port}", server, task)
    try:
        yield running
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


def value(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not in /metrics")


async def _pheby(edge: Edge) -> DeviceClient:
    client = await DeviceClient(edge.url + "/ws").connect()
    assert (await client.hello_pheby(TOKEN))["type"] == "ready"
    return client


async def test_metrics_count_connections_by_dialect_and_frames_both_ways(edge: Edge) -> None:
    before = await asyncio.to_thread(edge.metrics)
    first, second = await _pheby(edge), await _pheby(edge)
    pong = await first.request({"type": "ping"})
    assert pong["type"] == "pong"
    text = await asyncio.to_thread(edge.metrics)
    assert value(text, 'hdg_edge_connections{dialect="pheby"}') == 2
    assert value(text, "hdg_edge_tenants") >= 1
    assert value(text, "hdg_edge_frames_in_total") >= value(before, "hdg_edge_frames_in_total") + 1
    # two `ready` frames and one `pong` were written
    frames_out = value(text, "hdg_edge_frames_out_total")
    assert frames_out >= value(before, "hdg_edge_frames_out_total") + 3
    await first.close()
    await second.close()
    await asyncio.sleep(0.2)
    after = await asyncio.to_thread(edge.metrics)
    assert value(after, 'hdg_edge_connections{dialect="pheby"}') == 0
    assert value(after, "hdg_edge_frames_out_total") >= frames_out, "a counter never goes down"
    assert value(after, "hdg_edge_send_queue_frames") == 0


async def test_refused_hellos_and_lockouts_are_counted(edge: Edge) -> None:
    before = await asyncio.to_thread(edge.metrics)
    failures = 'hdg_edge_hello_failures_total{code="unauthorized"}'
    start = value(before, failures) if failures in before else 0.0
    lockouts = value(before, "hdg_edge_lockouts_total")
    for _ in range(LOCKOUT_FAILURES):
        client = await DeviceClient(edge.url + "/ws").connect()
        assert (await client.hello_pheby("wrong-" + TOKEN))["type"] == "error"
        await client.close()
    locked = await DeviceClient(edge.url + "/ws").connect()
    await locked.wait_closed()
    text = await asyncio.to_thread(edge.metrics)
    assert value(text, failures) == start + LOCKOUT_FAILURES
    assert value(text, "hdg_edge_lockouts_total") == lockouts + 1


async def test_shutting_the_server_down_closes_devices_with_going_away(edge: Edge) -> None:
    client = await _pheby(edge)
    edge.server.should_exit = True
    assert await client.wait_closed() == CLOSE_GOING_AWAY
