"""Iris hellos answered a batch at a time (gateway_plugin.access.hellos), through a real
controller consuming a real (memory) bus."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from canonical.bus import direct_envelopes
from canonical.memory_bus import MemoryBus
from canonical.model import Json
from gateway_plugin.access import hellos
from gateway_plugin.commands import reader as command_reader
from gateway_plugin.controller import Controller
from tests.gateway_plugin.plugin_parts import new_controller, plugin_environment

TOKEN = "pairing-token-" + "h" * 30
TENANT = "tenant-h"


class _Calls:
    """Counts calls of a method, then lets it run."""

    def __init__(self, owner: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[Any, ...]] = []
        real = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)


class _Rig:
    def __init__(self, controller: Controller, bus: MemoryBus) -> None:
        self.controller = controller
        self.bus = bus
        self.replies: list[Json] = []

    def on_bus(self, kind: str, channel: str, payload: bytes) -> None:
        if kind == "direct":
            self.replies.extend(direct_envelopes(payload))

    async def submit(self, *commands: Json) -> None:
        # MemoryBus.submit never yields: the consumer reads all of them in one batch.
        for command in commands:
            await self.bus.submit(TENANT, command)

    async def replies_for(self, count: int) -> list[Json]:
        for _ in range(500):
            if len(self.replies) >= count:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)  # nothing more may come
        assert len(self.replies) == count, self.replies
        return self.replies


def hello(device_id: str, conn: str | None = None, **args: Any) -> Json:
    return {
        "cmd": "hello",
        "edge": "e1",
        "conn": conn or f"c-{device_id}",
        "dialect": "iris",
        "device_id": device_id,
        "request_id": f"r-{device_id}",
        "args": {
            "device_name": device_id.title(),
            "caps": ["streaming"],
            "cursor": None,
            "fcm_token": None,
            "request_id": f"r-{device_id}",
            **args,
        },
    }


@pytest.fixture
def make_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    plugin_environment(monkeypatch, TOKEN)
    opened: list[Controller] = []

    async def make(agent: Any = None, **settings: Any) -> _Rig:
        bus = MemoryBus()
        controller = new_controller(
            bus, tmp_path, tenant=TENANT, token=TOKEN, agent=agent, **settings
        )
        rig = _Rig(controller, bus)
        sub = bus.subscription("e1", rig.on_bus)
        await sub.start()
        await controller.start()
        opened.append(controller)
        return rig

    return make


def ack_of(reply: Json) -> Json:
    """The hello.ack of a hello's replay: the one frame sent as the plugin encoded it."""
    (text,) = reply["body"]["before_text"]
    assert reply["body"].get("before", []) == []
    ack: Json = json.loads(text)
    return ack


@pytest.fixture
async def rig(make_rig: Callable[..., Any]) -> AsyncIterator[_Rig]:
    made: _Rig = await make_rig()
    try:
        yield made
    finally:
        await made.controller.stop()


async def test_hellos_read_together_are_answered_together(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _Calls(rig.controller.devices, "record_hellos", monkeypatch)
    replies = _Calls(rig.bus, "reply_many", monkeypatch)
    singles = _Calls(rig.controller, "reply", monkeypatch)
    rig.controller.emit([{"type": "message", "text": "before"}])
    await rig.submit(*(hello(f"dev{i}") for i in range(5)))
    got = await rig.replies_for(5)
    assert [r["conn"] for r in got] == [f"c-dev{i}" for i in range(5)]
    for i, reply in enumerate(got):
        assert reply["kind"] == "replay" and reply["body"]["fresh"] is True
        ack = ack_of(reply)
        assert ack["type"] == "hello.ack" and ack["device_id"] == f"dev{i}"
        assert ack["request_id"] == f"r-dev{i}" and ack["sync_cursor"] == 1
        assert ack["gap"] is False and [c["name"] for c in ack["channels"]] == ["Default"]
    assert len(records.calls) == 1 and len(records.calls[0][0]) == 5
    # One round trip, and one message for the edge carrying all five replies.
    assert len(replies.calls) == 1 and singles.calls == []
    ((edge, message),) = replies.calls[0][0]
    assert edge == "e1" and len(direct_envelopes(message)) == 5
    assert {d.device_id for d in rig.controller.devices.list()} == {f"dev{i}" for i in range(5)}
    assert await rig.bus.reclaim(TENANT, "after", 0) == []  # every entry acked


async def test_in_a_storm_the_reader_waits_to_take_the_next_hellos_in_one_read(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command_reader, "STORM_LINGER_S", 0.2)
    records = _Calls(rig.controller.devices, "record_hellos", monkeypatch)
    await rig.submit(*(hello(f"first{i}") for i in range(4)))  # one read: a storm
    await rig.replies_for(4)
    for i in range(4):  # each alone would be a read of its own
        await rig.submit(hello(f"next{i}"))
        await asyncio.sleep(0.01)
    got = await rig.replies_for(8)
    assert [r["conn"] for r in got[4:]] == [f"c-next{i}" for i in range(4)]
    assert [len(call[0]) for call in records.calls] == [4, 4]


async def test_a_revoked_or_not_allowed_device_in_a_batch_is_closed_and_the_rest_answered(
    make_rig: Callable[..., Any],
) -> None:
    rig: _Rig = await make_rig(allowed_users="phone,old")
    try:
        rig.controller.devices.seen("old")
        rig.controller.devices.revoke("old")
        await rig.submit(hello("phone"), hello("old"), hello("stranger"))
        phone, old, stranger = await rig.replies_for(3)
        assert phone["kind"] == "replay"
        assert (old["kind"], old["body"]["code"]) == ("close", 4403)
        assert old["body"]["frame"]["request_id"] == "r-old"
        assert (stranger["kind"], stranger["body"]["code"]) == ("close", 4401)
        assert rig.controller.devices.get("stranger") is None  # never recorded
    finally:
        await rig.controller.stop()


async def test_a_hello_with_a_cursor_stores_the_ack_and_replays_what_came_after(
    rig: _Rig,
) -> None:
    rig.controller.emit([{"type": "message", "text": str(n)} for n in range(3)])
    await rig.submit(hello("phone", cursor=1), hello("tablet", cursor=0), hello("desk"))
    phone, tablet, desk = await rig.replies_for(3)
    assert [e["cursor"] for e in phone["body"]["events"]] == [2, 3]
    assert ack_of(phone)["sync_cursor"] == 3 and phone["body"]["more"] is False
    assert [e["cursor"] for e in tablet["body"]["events"]] == [1, 2, 3]
    assert desk["body"]["events"] == [] and desk["body"]["head"] == 3
    assert rig.controller.outbox.acks() == {"phone": 1}


async def test_the_ack_text_holds_every_field_and_the_directory_as_the_device_reads_it(
    rig: _Rig,
) -> None:
    rig.controller.channels.create_channel('Café ☕ "quoted"')
    await rig.submit(hello("phone"), hello("desk", cursor=0))
    phone, desk = await rig.replies_for(2)
    directory = rig.controller.commands.directory()
    for reply, device in ((phone, "phone"), (desk, "desk")):
        ack = ack_of(reply)
        assert ack == {
            "type": "hello.ack",
            "version": 1,
            "server_caps": hellos.SERVER_CAPS,
            "device_id": device,
            "sync_cursor": ack["sync_cursor"],
            "gap": False,
            "ts": ack["ts"],
            "request_id": f"r-{device}",
            "channels": directory,
        }
    assert 'Café ☕ "quoted"' in [c["name"] for c in ack_of(desk)["channels"]]


async def test_a_batch_of_hellos_keeps_its_place_among_other_commands(rig: _Rig) -> None:
    sync = {**hello("tablet", conn="c-sync"), "cmd": "sync", "args": {"cursor": 0}}
    await rig.submit(hello("phone"), sync, hello("desk"))
    got = await rig.replies_for(3)
    assert [r["conn"] for r in got] == ["c-phone", "c-sync", "c-desk"]
    assert got[1]["body"]["before"][0]["type"] == "sync.ack"


def entry_id(seq: int) -> str:
    """A stream entry id of now (older ones outlive the command window)."""
    return f"{int(time.time() * 1000)}-{seq}"


async def test_an_entry_already_carried_out_is_acked_without_running_again(rig: _Rig) -> None:
    first, second, third = entry_id(1), entry_id(2), entry_id(3)
    await rig.controller.reader.handle_batch([(first, hello("phone")), (second, hello("desk"))])
    assert len(rig.replies) == 2
    assert rig.controller.outbox.processed_among([first, second, third]) == {first, second}
    # Reclaimed after a crash between the marks and the XACK: skipped, and a hello's
    # replay is not kept to be sent again (the device asks again from its cursor).
    await rig.controller.reader.handle_batch([(first, hello("phone")), (third, hello("tablet"))])
    assert [r["conn"] for r in rig.replies] == ["c-phone", "c-desk", "c-tablet"]


async def test_a_failing_hello_is_closed_with_1011_and_its_neighbours_are_answered(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = rig.controller.devices.record_hellos

    def broken(hellos: Any, *args: Any, **kwargs: Any) -> Any:
        if any(h.device_id == "bad" for h in hellos):
            raise RuntimeError("disk on fire")
        return real(hellos, *args, **kwargs)

    monkeypatch.setattr(rig.controller.devices, "record_hellos", broken)
    ids = [entry_id(1), entry_id(2), entry_id(3)]
    batch = list(zip(ids, [hello("phone"), hello("bad"), hello("desk")], strict=True))
    await rig.controller.reader.handle_batch(batch)
    # A close, not a reply: the edge holds the device's live events until its replay comes.
    assert [(r["conn"], r["kind"]) for r in rig.replies] == [
        ("c-phone", "replay"),
        ("c-bad", "close"),
        ("c-desk", "replay"),
    ]
    failed = rig.replies[1]["body"]
    assert failed["code"] == 1011 and failed["frame"]["code"] == "internal_error"
    assert rig.controller.outbox.processed_among(ids) == set(ids)


async def test_a_cursor_past_the_head_acks_the_head_and_the_reply_says_where_it_is(
    rig: _Rig,
) -> None:
    rig.controller.emit([{"type": "message", "text": str(n)} for n in range(3)])
    await rig.submit(hello("phone", cursor=10**15))
    [phone] = await rig.replies_for(1)
    assert phone["body"]["events"] == [] and phone["body"]["head"] == 3
    # Stored as given, it would mark every later event as seen and silence all pushes.
    assert rig.controller.outbox.acks() == {"phone": 3}
