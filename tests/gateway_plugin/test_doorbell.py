"""Events the plugin could not publish while Redis was out of its reach reach devices once
it is back: a real controller and a real edge subscription on a private redis-server, the
plugin's link to it through a relay that can lose everything (a network partition)."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from canonical.errors import BusUnavailable
from canonical.model import Json
from canonical.redis_bus import RedisBus
from canonical.redis_timeouts import RedisTimeouts
from gateway_plugin.delivery.outbox import Outbox
from tests.gateway_plugin.plugin_parts import new_controller, plugin_environment
from tests.harness.partition import PartitionableRelay
from tests.harness.processes import RedisServer

TOKEN = "pairing-token-" + "d" * 30
TENANT = "tenant-doorbell"
# The plugin gives up on a silent link at once; the edge's own link stays up, so nothing
# makes the edge resync by itself.
PLUGIN = RedisTimeouts(connect_s=1.0, command_s=0.3, health_check_s=60.0)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.02)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"  # the Redis server is shared


def _resyncs(events: list[Json]) -> int:
    return sum(1 for e in events if e.get("type") == "_control" and e.get("action") == "resync")


def _has_text(events: list[Json], text: str) -> bool:
    return text in _texts(events)


def _texts(events: list[Json]) -> list[str]:
    return [str(e["text"]) for e in events if e.get("type") == "message"]


@pytest.mark.parametrize("path", ["handed over", "queued"])
async def test_an_event_whose_publish_failed_makes_the_edges_resync_once_redis_answers(
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """The plugin's link to Redis loses everything for a while (the edges' do not): the
    events it sequenced meanwhile never reached Redis, and only the plugin knows."""
    plugin_environment(monkeypatch, TOKEN)
    link = await PartitionableRelay(redis_server.host, redis_server.port).start()
    events: list[Json] = []
    reconnects: list[None] = []
    edge_bus = RedisBus(redis_server.url)
    subscription = edge_bus.subscription(
        unique("edge"),
        lambda kind, _, payload: events.append(json.loads(payload)) if kind == "event" else None,
        lambda: reconnects.append(None),
    )
    tenant = unique(TENANT)
    plugin_bus = RedisBus(link.url(), PLUGIN)
    controller = new_controller(plugin_bus, tmp_path, tenant=tenant, token=TOKEN)
    try:
        await subscription.start()
        await subscription.add_tenant(tenant)
        await controller.start()
        await until(lambda: _resyncs(events) == 1, "the start's resync notice")
        controller.emit([{"type": "message", "text": "before"}])
        await until(lambda: _texts(events) == ["before"], "a live event")

        link.partitioned = True
        if path == "queued":
            # The connection is given up first: the event waits in the publisher's queue
            # and its publish fails on a new connection.
            with pytest.raises(BusUnavailable):
                await plugin_bus.mux.execute("PING")
        controller.emit([{"type": "message", "text": "while partitioned"}])
        await controller.sequencer.durable()  # handed to the publisher once committed
        wire = plugin_bus.mux._wire
        await until(lambda: wire is not None and wire.lost is not None, "the link given up")
        await until(
            lambda: controller.publisher.idle(),
            "the publisher done with the event",
        )
        link.partitioned = False

        await until(lambda: _resyncs(events) >= 2, "a resync notice once the link is back")
        assert "while partitioned" not in _texts(events)  # it was lost on the way
        assert reconnects == []  # the edges' subscription never went away
    finally:
        await controller.stop()
        await plugin_bus.close()
        await subscription.close()
        await edge_bus.close()
        await link.close()


async def test_a_publish_redis_refuses_leaves_the_publisher_running_and_devices_resynced(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error reply to PUBLISH (here an ACL; in life also out-of-memory) is not a lost
    connection: the publisher must survive it, and the events after it still go out live."""
    plugin_environment(monkeypatch, TOKEN)
    user = unique("plugin")
    admin = RedisBus(redis_server.url)
    await admin.mux.execute("ACL", "SETUSER", user, "on", ">secret", "~*", "&*", "+@all")
    events: list[Json] = []
    edge_bus = RedisBus(redis_server.url)
    subscription = edge_bus.subscription(
        unique("edge"),
        lambda kind, _, payload: events.append(json.loads(payload)) if kind == "event" else None,
        lambda: None,
    )
    tenant = unique(TENANT)
    plugin_bus = RedisBus(f"redis://{user}:secret@{redis_server.host}:{redis_server.port}/0")
    controller = new_controller(plugin_bus, tmp_path, tenant=tenant, token=TOKEN)
    try:
        await subscription.start()
        await subscription.add_tenant(tenant)
        await controller.start()
        await until(lambda: _resyncs(events) == 1, "the start's resync notice")

        await admin.mux.execute("ACL", "SETUSER", user, "-publish")
        # Its connection dropped too, so the event queues for the publisher task (the
        # direct write needs a live connection) and the refusal meets that task.
        await admin.mux.execute("CLIENT", "KILL", "USER", user)
        wire = plugin_bus.mux._wire
        await until(lambda: wire is not None and wire.lost is not None, "the link dropped")
        controller.emit([{"type": "message", "text": "refused"}])
        await controller.sequencer.durable()
        await until(
            lambda: controller.publisher.idle(),
            "the publisher done with the refused event",
        )
        await admin.mux.execute("ACL", "SETUSER", user, "+publish")

        controller.emit([{"type": "message", "text": "after"}])
        await until(lambda: "after" in _texts(events), "the next event published live")
        await until(lambda: _resyncs(events) >= 2, "the edges told to fetch the refused one")
    finally:
        await controller.stop()
        await plugin_bus.close()
        await subscription.close()
        await edge_bus.close()
        await admin.mux.execute("ACL", "DELUSER", user)
        await admin.close()


async def test_a_restart_after_a_stop_that_published_everything_leaves_devices_be(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resync notice at start (which closes pheby devices) is for events a previous
    process sequenced and never published: none after a stop that published them all,
    one again once another process appended to the outbox while the plugin was down."""
    plugin_environment(monkeypatch, TOKEN)
    events: list[Json] = []
    edge_bus = RedisBus(redis_server.url)
    subscription = edge_bus.subscription(
        unique("edge"),
        lambda kind, _, payload: events.append(json.loads(payload)) if kind == "event" else None,
        lambda: None,
    )
    tenant = unique(TENANT)
    await subscription.start()
    await subscription.add_tenant(tenant)
    try:
        for round_, expected in ((1, 1), (2, 1), (3, 2)):
            plugin_bus = RedisBus(redis_server.url)
            controller = new_controller(plugin_bus, tmp_path, tenant=tenant, token=TOKEN)
            try:
                await controller.start()
                text = f"round {round_}"
                controller.emit([{"type": "message", "text": text}])
                await until(functools.partial(_has_text, events, text), text)
                assert _resyncs(events) == expected, (round_, events)
            finally:
                await controller.stop()
                await plugin_bus.close()
            if round_ == 2:  # a CLI cron run delivers while the gateway is down
                outbox = Outbox(tmp_path / "android" / "outbox.db")
                outbox.append([{"type": "message", "text": "cron while down"}])
                outbox.close()
        assert "round 3" in _texts(events)
    finally:
        await subscription.close()
        await edge_bus.close()
