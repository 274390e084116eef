"""Device commands are carried out once, even when their XACK fails: a real controller
consuming a real, private redis-server's stream, restarted on the same files."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from canonical.bus import CONSUMER_GROUP, Subscription, command_stream, direct_envelopes
from canonical.model import Json
from canonical.redis_bus import RedisBus
from gateway_plugin import upkeep
from gateway_plugin.commands.once import (
    CLOCK_MARGIN_S,
    entry_time,
    kept_replies,
    outlived_window,
    replies_to_keep,
)
from gateway_plugin.controller import Controller
from tests.gateway_plugin.plugin_parts import new_controller, plugin_environment
from tests.gateway_plugin.test_controller_output import _command
from tests.harness.fixtures import REDIS_PASSWORD
from tests.harness.processes import RedisServer

TOKEN = "pairing-token-" + "o" * 30
TENANT = "tenant-once"
WINDOW_S = 1.0  # a command window of a second, so a test can outwait it
HOME = "android:default"


class _Agent:
    """Hermes as the controller sees it: records the turns it is given."""

    def __init__(self, on_submit: Callable[[], Awaitable[None]] | None = None) -> None:
        self.turns: list[str] = []
        self.on_submit = on_submit

    async def wait_ready(self) -> None:
        return None

    def cron_jobs(self) -> list[Json]:
        return []

    async def submit(self, lane: Any, text: str, **kwargs: Any) -> None:
        self.turns.append(text)
        if self.on_submit is not None:
            await self.on_submit()


class _Edge:
    """What an edge does for its devices: put commands on the stream, get direct replies."""

    def __init__(self, url: str) -> None:
        self.bus = RedisBus(url)
        self.replies: list[Json] = []
        self.subscription: Subscription | None = None

    async def listen(self) -> None:
        self.subscription = self.bus.subscription("e1", self._on_bus)
        await self.subscription.start()

    def _on_bus(self, kind: str, channel: str, payload: bytes) -> None:
        if kind == "direct":
            self.replies.extend(direct_envelopes(payload))

    async def submit(self, cmd: str, request_id: str, **args: Any) -> None:
        await self.bus.submit(TENANT, _command(cmd, request_id, **args))

    async def close(self) -> None:
        if self.subscription is not None:
            await self.subscription.close()
        await self.bus.close()


PluginFactory = Callable[..., Awaitable[Controller]]


@pytest.fixture
async def start_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[PluginFactory]:
    """`start_plugin(url, agent, **settings)`: a plugin on the same files each time (a
    restart is stopping one and starting the next)."""
    plugin_environment(monkeypatch, TOKEN)
    running: list[tuple[Controller, RedisBus]] = []

    async def start(url: str, agent: _Agent | None = None, **settings: Any) -> Controller:
        bus = RedisBus(url)
        controller = new_controller(
            bus, tmp_path, tenant=TENANT, token=TOKEN, agent=agent or _Agent(), **settings
        )
        await controller.start()
        running.append((controller, bus))
        return controller

    yield start
    for controller, bus in reversed(running):
        if controller.running:
            await controller.stop()
        await bus.close()


async def stop(controller: Controller) -> None:
    await controller.stop()
    await controller.bus.close()


@pytest.fixture
async def private_redis(
    redis_factory: Callable[..., RedisServer],
) -> AsyncIterator[tuple[RedisServer, Any]]:
    server = redis_factory()
    raw = aioredis.from_url(server.url)
    yield server, raw
    await raw.aclose()


@pytest.fixture
async def edge(private_redis: tuple[RedisServer, Any]) -> AsyncIterator[_Edge]:
    server, _ = private_redis
    made = _Edge(server.url)
    yield made
    await made.close()


async def until(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.05)


async def pending(raw: Any) -> int:
    return int((await raw.xpending(command_stream(TENANT), CONSUMER_GROUP))["pending"])


async def pending_ids(raw: Any) -> list[str]:
    entries = await raw.xpending_range(command_stream(TENANT), CONSUMER_GROUP, "-", "+", 100)
    return [str(e["message_id"].decode()) for e in entries]


def channels_named(controller: Controller, name: str) -> int:
    return sum(1 for e in controller.channels.list(include_archived=True) if e.name == name)


async def deny_xack(raw: Any, denied: bool) -> None:
    """Redis refuses (or accepts again) every XACK, as it may in a failover."""
    await raw.execute_command("ACL", "SETUSER", "default", "-xack" if denied else "+xack")


async def test_a_send_whose_xack_failed_is_acked_later_and_reaches_the_agent_once(
    redis_factory: Callable[..., RedisServer],
    start_plugin: PluginFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="hdg.plugin")
    server = redis_factory()
    setup = aioredis.from_url(server.url)
    await setup.config_set("requirepass", REDIS_PASSWORD)
    await setup.aclose()
    url = f"redis://:{REDIS_PASSWORD}@{server.host}:{server.port}/0"
    raw = aioredis.from_url(url)

    async def blip() -> None:
        # A blip on the plugin's command connection only: it drops and cannot come back
        # for a while; the stream reader's own connection stays up and keeps reading.
        await raw.config_set("requirepass", "not-yet")
        me = await raw.client_id()
        for client in await raw.client_list():
            if client["cmd"] != "xreadgroup" and int(client["id"]) != me:
                await raw.client_kill_filter(_id=client["id"])

    agent = _Agent(on_submit=blip)
    edge = _Edge(url)
    try:
        await start_plugin(url, agent)
        await edge.submit(
            "message.send", "s1", chat_id=HOME, thread_id=None, text="hi", client_id="c1"
        )

        async def xack_failed() -> bool:
            return any("could not ack" in r.getMessage() for r in caplog.records)

        await until(xack_failed, "the XACK failed")
        await raw.config_set("requirepass", REDIS_PASSWORD)

        async def nothing_pending() -> bool:
            return await pending(raw) == 0

        await until(nothing_pending, "the XACK was retried")
        assert agent.turns == ["hi"]
    finally:
        await edge.close()
        await raw.aclose()


async def test_a_command_whose_xack_failed_runs_once_when_taken_again_after_its_window(
    private_redis: tuple[RedisServer, Any], edge: _Edge, start_plugin: PluginFactory
) -> None:
    server, raw = private_redis
    hours = WINDOW_S / 3600
    await edge.listen()
    await deny_xack(raw, True)
    first = await start_plugin(server.url, outbox_retention_hours=hours)
    await edge.submit("channel.create", "r1", name="Trips")

    async def answered() -> bool:
        return len(edge.replies) == 1

    await until(answered, "the channel was created")
    await stop(first)  # with its XACK still owed: the entry stays pending
    await deny_xack(raw, False)
    [entry_id] = await pending_ids(raw)
    added = entry_time(entry_id)
    assert added is not None

    async def outwaited() -> bool:
        return time.time() > added + 2 * WINDOW_S

    await until(outwaited, "the entry outlived the window")
    second = await start_plugin(server.url, outbox_retention_hours=hours)

    async def settled() -> bool:
        return await pending(raw) == 0

    await until(settled, "the restarted plugin took the entry again")
    assert channels_named(second, "Trips") == 1


async def test_a_redelivered_command_is_answered_again_from_its_record_not_run_again(
    private_redis: tuple[RedisServer, Any], edge: _Edge, start_plugin: PluginFactory
) -> None:
    server, raw = private_redis
    await deny_xack(raw, True)
    first = await start_plugin(server.url)
    # The device's edge is not listening: the answer is lost along with the XACK.
    await edge.submit("channel.create", "r1", name="Trips")

    async def carried_out() -> bool:
        return first.outbox.processed_count() == 1

    await until(carried_out, "the channel was created")
    await stop(first)
    await deny_xack(raw, False)
    await edge.listen()
    second = await start_plugin(server.url)

    async def answered() -> bool:
        return len(edge.replies) == 1 and await pending(raw) == 0

    await until(answered, "the device got its answer")
    [reply] = edge.replies
    assert reply["conn"] == "c-r1" and reply["body"]["type"] == "result"
    assert reply["body"]["request_id"] == "r1" and reply["body"]["entry"]["name"] == "Trips"
    assert channels_named(second, "Trips") == 1


async def test_a_command_that_waited_longer_than_its_window_is_refused_not_run(
    private_redis: tuple[RedisServer, Any], edge: _Edge, start_plugin: PluginFactory
) -> None:
    server, raw = private_redis
    await edge.listen()
    await edge.submit("channel.create", "r1", name="Trips")  # no plugin is running
    submitted = time.time()

    async def outwaited() -> bool:
        return time.time() > submitted + 2 * WINDOW_S

    await until(outwaited, "the command outlived the window")
    plugin = await start_plugin(server.url, outbox_retention_hours=WINDOW_S / 3600)

    async def answered() -> bool:
        return len(edge.replies) == 1

    await until(answered, "the device got an answer")
    [reply] = edge.replies
    assert reply["body"]["type"] == "error" and reply["body"]["code"] == "unavailable"
    assert channels_named(plugin, "Trips") == 0
    assert await raw.xlen(command_stream(TENANT)) == 1 and await pending(raw) == 0


async def test_records_of_carried_out_commands_are_pruned_once_no_entry_they_guard_can_run(
    private_redis: tuple[RedisServer, Any], edge: _Edge, start_plugin: PluginFactory
) -> None:
    server, raw = private_redis
    await edge.listen()
    plugin = await start_plugin(server.url)
    for n in range(3):
        await edge.submit("channel.list", f"l{n}")

    async def answered() -> bool:
        return len(edge.replies) == 3 and await pending(raw) == 0

    await until(answered, "the commands were answered")
    window = plugin.settings.outbox_retention_hours * 3600
    await upkeep.trim_outbox(plugin, now=time.time() + window)  # entries of now may still come back
    assert plugin.outbox.processed_count() == 3
    await upkeep.trim_outbox(
        plugin, now=time.time() + window + CLOCK_MARGIN_S + 1
    )  # they no longer can
    assert plugin.outbox.processed_count() == 0


# --------------------------------------------------------------------------- the pure rules


def test_an_entry_id_dates_its_entry_and_an_older_one_than_the_window_has_outlived_it() -> None:
    assert entry_time("1767225600000-3") == 1_767_225_600.0
    assert entry_time("not-an-id") is None
    assert outlived_window("1767225600000-0", now=1_767_225_661.0, window_s=60) is True
    assert outlived_window("1767225600000-0", now=1_767_225_659.0, window_s=60) is False


def test_only_short_direct_answers_of_device_commands_are_kept_to_be_sent_again() -> None:
    change = {"cmd": "channel.create"}
    result = {"type": "result", "op": "channel.create"}
    close = {"code": 1011, "frame": {"type": "error"}}
    kept = replies_to_keep(
        change, [("reply", result), ("replay", {"events": []}), ("close", close)]
    )
    assert kept_replies(kept) == [("reply", result), ("close", close)]
    assert replies_to_keep(change, [("replay", {"events": []})]) is None
    assert replies_to_keep(change, [("reply", {"type": "history", "text": "x" * 5000})]) is None
    assert replies_to_keep({"cmd": "admin.token.rotate"}, [("reply", result)]) is None


def _waiting_in_wait_for(task: asyncio.Task[None]) -> bool:
    """The task is suspended inside asyncio.wait_for (redis-py writing a command)."""
    coro: Any = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None)
        if frame is not None and frame.f_code is asyncio.wait_for.__code__:
            return True
        coro = getattr(coro, "cr_await", None)
    return False


async def test_the_plugin_stops_though_the_consumer_is_cancelled_while_writing_its_read(
    private_redis: tuple[RedisServer, Any], start_plugin: PluginFactory
) -> None:
    """Python 3.11's wait_for swallows a cancel landing as the write it waits for
    completes: the consumer read on for ever and the gateway's shutdown hung."""
    server, _ = private_redis
    controller = await start_plugin(server.url)
    [consumer] = [t for t in controller._tasks if t.get_name() == "hdg-consumer"]
    # Each loop iteration, until the consumer writes its next XREADGROUP (no event tells).
    while not _waiting_in_wait_for(consumer):  # noqa: ASYNC110
        await asyncio.sleep(0)
    await controller.stop()
    assert consumer.done()


async def test_answers_to_reads_are_not_kept_only_those_to_changes(
    private_redis: tuple[RedisServer, Any], edge: _Edge, start_plugin: PluginFactory
) -> None:
    """A list, a history page or search hits is asked for again, and kept for the command
    window it would grow outbox.db by up to 4 KiB a read (docs/architecture.md)."""
    server, raw = private_redis
    await edge.listen()
    plugin = await start_plugin(server.url)
    await edge.submit("channel.list", "l1")
    await edge.submit("history", "l2", chat_id=HOME)
    await edge.submit("channel.create", "c1", name="Trips")

    async def answered() -> bool:
        return len(edge.replies) == 3 and await pending(raw) == 0

    await until(answered, "the commands were answered")
    entries = [entry_id.decode() for entry_id, _ in await raw.xrange(command_stream(TENANT))]
    kept = plugin.outbox.processed_replies(entries)
    assert [kept[entry_id] is not None for entry_id in entries] == [False, False, True]
