"""Admin frames, the hello gate and the plugin's metrics, on a real controller and bus."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from canonical.bus import token_digest
from canonical.envfile import read_env_file
from canonical.memory_bus import MemoryBus
from canonical.model import Json
from canonical.settings import load_settings
from edge.dialects.iris import IrisDialect
from edge.errors import FrameRejected
from gateway_plugin.access import admin
from gateway_plugin.controller import Controller
from tests.gateway_plugin.plugin_parts import new_controller, plugin_environment

TOKEN = "pairing-token-" + "p" * 30
TENANT = "tenant-a"


class _Rig:
    """A started controller plus an 'edge' that records what the plugin sends it."""

    def __init__(self, controller: Controller, bus: MemoryBus) -> None:
        self.controller = controller
        self.bus = bus
        self.replies: list[Json] = []
        self.events: list[Json] = []

    def on_bus(self, kind: str, channel: str, payload: bytes) -> None:
        message = json.loads(payload)
        (self.events if kind == "event" else self.replies).append(message)

    @property
    def admin_token(self) -> str:
        value = admin.load_admin_token(self.controller.data_dir)
        assert value is not None
        return value

    def command(self, frame: Json, device_id: str = "laptop") -> Json:
        decoded = IrisDialect().decode(frame)
        return {
            "cmd": decoded["cmd"],
            "edge": "e1",
            "conn": "c1",
            "dialect": "iris",
            "device_id": device_id,
            "request_id": frame.get("request_id"),
            "args": decoded["args"],
        }

    async def send(self, frame: Json, device_id: str = "laptop") -> Json:
        start = len(self.replies)
        await self.controller.commands.handle(self.command(frame, device_id))
        assert len(self.replies) == start + 1, self.replies[start:]
        return dict(self.replies[-1]["body"])

    async def hello(self, device_id: str, **args: Any) -> Json:
        start = len(self.replies)
        await self.controller.commands.handle(
            {
                "cmd": "hello",
                "edge": "e1",
                "conn": "c-" + device_id,
                "dialect": "iris",
                "device_id": device_id,
                "args": {"device_name": device_id.title(), "caps": ["streaming"], **args},
            }
        )
        return self.replies[start]

    async def published(self) -> list[Json]:
        # The controller publishes from its own task: let it run.
        for _ in range(50):
            if self.controller.publisher.queue.empty():
                break
            await _tick()
        await _tick()
        return [
            e
            for e in self.events
            if e.get("type") == "_control" and str(e.get("action")).startswith("close")
        ]


async def _tick() -> None:
    import asyncio

    await asyncio.sleep(0.01)


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[_Rig]:
    plugin_environment(monkeypatch, TOKEN)
    bus = MemoryBus()
    controller = new_controller(bus, tmp_path, tenant=TENANT, token=TOKEN)
    await controller.start()
    r = _Rig(controller, bus)
    sub = bus.subscription("e1", r.on_bus)
    await sub.start()
    await sub.add_tenant(TENANT)
    try:
        yield r
    finally:
        await sub.close()
        await controller.stop()


def _error(reply: Json) -> str:
    assert reply["type"] == "error", reply
    return str(reply["code"])


ADMIN_FRAMES: list[Json] = [
    {"type": "admin.devices.list"},
    {"type": "admin.devices.revoke", "device_id": "phone"},
    {"type": "admin.token.rotate", "token": "n" * 40},
]


@pytest.mark.parametrize("frame", ADMIN_FRAMES, ids=lambda f: f["type"])
async def test_a_normal_device_with_only_the_pairing_token_is_unauthorized(
    rig: _Rig, frame: Json
) -> None:
    await rig.hello("phone")
    reply = await rig.send({**frame, "request_id": "r1"}, device_id="phone")
    assert _error(reply) == "unauthorized"
    assert reply["request_id"] == "r1"
    assert rig.controller.token == TOKEN
    assert not rig.controller.devices.is_revoked("phone")


async def test_a_wrong_admin_token_is_unauthorized(rig: _Rig) -> None:
    reply = await rig.send({"type": "admin.devices.list", "admin_token": "x" * 43})
    assert _error(reply) == "unauthorized"


async def test_admin_frames_from_pheby_connections_are_refused(rig: _Rig) -> None:
    command = rig.command({"type": "admin.devices.list", "admin_token": rig.admin_token})
    command["dialect"] = "pheby"
    await rig.controller.commands.handle(command)
    assert _error(rig.replies[-1]["body"]) == "unauthorized"


async def test_the_admin_devices_list_narrows_who_may_use_the_admin_token(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_ADMIN_DEVICES", "ops-laptop")
    rig.controller.settings = load_settings({"token": TOKEN})  # as a start reads them
    admin.attach(rig.controller)
    listing = {"type": "admin.devices.list", "admin_token": rig.admin_token}
    assert _error(await rig.send(listing, device_id="laptop")) == "unauthorized"
    assert (await rig.send(listing, device_id="ops-laptop"))["type"] == "admin.devices"


async def test_hello_records_devices_and_the_admin_list_shows_them_with_presence(
    rig: _Rig,
) -> None:
    ack = await rig.hello("phone", fcm_token="fcm-secret")
    assert ack["kind"] == "replay"
    await rig.bus.set_presence(TENANT, "phone", {"edge": "e1", "conn": "c-phone"})
    reply = await rig.send({"type": "admin.devices.list", "admin_token": rig.admin_token})
    assert reply["type"] == "admin.devices"
    (phone,) = [d for d in reply["devices"] if d["device_id"] == "phone"]
    assert phone["name"] == "Phone"
    assert phone["online"] is True and phone["edge"] == "e1"
    assert phone["push"] == "fcm"
    assert "fcm-secret" not in json.dumps(reply)


async def test_revoking_a_device_closes_it_on_every_edge_and_refuses_its_next_hello(
    rig: _Rig,
) -> None:
    await rig.hello("phone")
    await rig.hello("tablet")
    reply = await rig.send(
        {"type": "admin.devices.revoke", "device_id": "phone", "admin_token": rig.admin_token}
    )
    assert reply["type"] == "admin.result" and reply["device"]["revoked"] is True
    assert await rig.published() == [
        {"type": "_control", "action": "close_device", "device_id": "phone", "code": 4403}
    ]
    refused = await rig.hello("phone")
    assert refused["kind"] == "close"
    assert refused["body"]["code"] == 4403
    assert refused["body"]["frame"]["code"] == "unauthorized"
    assert (await rig.hello("tablet"))["kind"] == "replay"


async def test_revoking_an_unknown_device_is_not_found(rig: _Rig) -> None:
    reply = await rig.send(
        {"type": "admin.devices.revoke", "device_id": "ghost", "admin_token": rig.admin_token}
    )
    assert _error(reply) == "not_found"
    assert await rig.published() == []


async def test_rotating_the_token_switches_the_tenant_to_it_and_closes_every_socket(
    rig: _Rig,
) -> None:
    new = "rotated-token-" + "r" * 30
    assert await rig.bus.resolve_tenant(TOKEN) == TENANT
    reply = await rig.send(
        {"type": "admin.token.rotate", "token": new, "admin_token": rig.admin_token}
    )
    assert reply == {"type": "admin.result", "op": "admin.token.rotate", "request_id": None}
    assert await rig.bus.resolve_tenant(new) == TENANT
    assert await rig.bus.resolve_tenant(TOKEN) is None
    assert await rig.bus.tenant_alive(TENANT)
    assert rig.controller.token == new
    assert rig.controller.settings.token_value() == new
    assert os.environ["ANDROID_TOKEN"] == TOKEN, "the process environment is never written"
    assert await rig.published() == [{"type": "_control", "action": "close_all", "code": 4401}]


async def test_a_rotated_token_is_saved_in_the_homes_env_file_keeping_its_other_lines(
    rig: _Rig, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# model keys\nexport OPENAI_API_KEY='sk-x'\nANDROID_TOKEN=old\n", "utf-8")
    rig.controller.env_file = env_file
    new = "rotated-token-" + "s" * 30
    await rig.send({"type": "admin.token.rotate", "token": new, "admin_token": rig.admin_token})
    assert read_env_file(env_file) == {"OPENAI_API_KEY": "sk-x", "ANDROID_TOKEN": new}
    assert env_file.read_text("utf-8").startswith("# model keys\nexport OPENAI_API_KEY='sk-x'\n")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


@pytest.mark.parametrize("bad", ["short", "has spaces " + "x" * 30, TOKEN])
async def test_a_rotation_to_a_weak_or_unchanged_token_is_refused(rig: _Rig, bad: str) -> None:
    command = rig.command({"type": "admin.devices.list", "admin_token": rig.admin_token})
    command["cmd"] = "admin.token.rotate"
    command["args"]["token"] = bad
    await rig.controller.commands.handle(command)
    assert _error(rig.replies[-1]["body"]) == "bad_request"
    assert await rig.bus.resolve_tenant(TOKEN) == TENANT


def test_the_edge_never_puts_the_admin_token_on_the_bus() -> None:
    decoded = IrisDialect().decode({"type": "admin.devices.list", "admin_token": "a" * 43})
    assert decoded == {
        "cmd": "admin.devices.list",
        "args": {"admin_digest": token_digest("a" * 43)},
    }
    assert "a" * 43 not in json.dumps(decoded)


def test_the_edge_refuses_a_rotation_to_a_short_token() -> None:
    with pytest.raises(FrameRejected) as excinfo:
        IrisDialect().decode({"type": "admin.token.rotate", "token": "too-short"})
    assert excinfo.value.code == "bad_request"


async def test_the_admin_token_file_is_created_private_and_the_environment_overrides_it(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = admin.admin_token_path(rig.controller.data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(rig.admin_token) >= 32
    monkeypatch.setenv("ANDROID_ADMIN_TOKEN", "from-the-environment-" + "e" * 20)
    configured = load_settings().admin_token_value()
    assert admin.load_admin_token(rig.controller.data_dir, configured) == configured
    assert configured == "from-the-environment-" + "e" * 20


async def test_an_admin_token_from_a_secret_file_overrides_the_token_file(
    rig: _Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "ANDROID_ADMIN_TOKEN").write_text("from-a-secret-file-" + "f" * 20 + "\n", "utf-8")
    monkeypatch.setenv("ANDROID_SECRETS_DIR", str(secrets))
    rig.controller.settings = load_settings({"token": TOKEN})
    admin.attach(rig.controller)
    listing = {"type": "admin.devices.list", "admin_token": "from-a-secret-file-" + "f" * 20}
    assert (await rig.send(listing))["type"] == "admin.devices"
    old = {"type": "admin.devices.list", "admin_token": rig.admin_token}
    assert _error(await rig.send(old)) == "unauthorized"


async def test_plugin_metrics_count_devices_commands_and_admin_actions(rig: _Rig) -> None:
    await rig.hello("phone")
    await rig.send(
        {"type": "admin.devices.revoke", "device_id": "phone", "admin_token": rig.admin_token}
    )
    text = generate_latest(REGISTRY).decode()
    assert f'hdg_plugin_devices{{state="revoked",tenant="{TENANT}"}} 1.0' in text
    assert f'hdg_plugin_outbox_head{{tenant="{TENANT}"}}' in text
    assert 'hdg_plugin_commands_total{cmd="hello"}' in text
    assert "hdg_plugin_device_revocations_total" in text
