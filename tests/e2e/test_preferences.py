"""YOLO, model and reasoning preferences and the model picker, at the wire in both dialects:
what one device changes every other device learns, with the ids that say which
conversation changed; the model picker offers what Hermes can switch to and takes nothing
else. One gateway for the module: each test works in a channel of its own."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import pytest

from canonical.model import Json
from scripted_model import MODEL_IDS
from tests.e2e.conftest import Deployment
from tests.e2e.flows import frames_of_run, iris_send
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import HermesGateway, ScriptedModel, free_port, http_ok


@pytest.fixture(scope="module")
def stack(
    scripted_model: ScriptedModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    token = secrets.token_urlsafe(24)
    port = free_port()
    home = HermesHome(scripted_model.base_url, path=tmp_path_factory.mktemp("prefs-home"))
    gateway = HermesGateway(
        home, env={"ANDROID_TOKEN": token, "ANDROID_WS_PORT": str(port)}, args=("-v",)
    )
    gateway.start()
    try:
        gateway.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60)
        yield Deployment(token, [f"ws://127.0.0.1:{port}"], gateway, home)
    finally:
        gateway.stop()


@pytest.fixture
async def deployment(stack: Deployment) -> AsyncIterator[Deployment]:
    yield stack
    await stack.close_clients()
    stack.clients.clear()


async def _channel(client: DeviceClient, name: str) -> Json:
    created = await client.request({"type": "channel.create", "kind": "channel", "name": name})
    assert created["type"] == "result", created
    return dict(created["entry"])


async def _devices(deployment: Deployment) -> tuple[DeviceClient, DeviceClient, DeviceClient]:
    """The phone that types, and two devices that watch: iris and pheby."""
    return (
        await deployment.iris("phone"),
        await deployment.iris("tablet"),
        await deployment.pheby(),
    )


async def _typed_yolo(
    devices: tuple[DeviceClient, DeviceClient, DeviceClient], entry: Json, enabled: bool
) -> None:
    phone, tablet, desktop = devices
    chat_id, conversation_id = entry["chat_id"], entry["conversation_id"]
    on_tablet_from, on_desktop_from = len(tablet.frames), len(desktop.frames)
    ack = await iris_send(phone, chat_id, "/yolo")
    await frames_of_run(phone, ack["run_id"])
    on_tablet = await tablet.wait_type("yolo.changed", start=on_tablet_from)
    assert {k: v for k, v in on_tablet.items() if k != "cursor"} == {
        "type": "yolo.changed",
        "enabled": enabled,
        "scope": "conversation",
        "conversation_id": conversation_id,
        "chat_id": chat_id,
        "thread_id": None,
    }
    assert isinstance(on_tablet["cursor"], int)
    on_desktop = await desktop.wait_type("yolo.changed", start=on_desktop_from)
    assert on_desktop == {
        "type": "yolo.changed",
        "enabled": enabled,
        "scope": "conversation",
        "conversation_id": conversation_id,
    }
    current = await desktop.request({"type": "yolo.current", "conversation_id": conversation_id})
    assert current["enabled"] is enabled


async def test_a_typed_yolo_reaches_every_device_as_yolo_changed_and_outlives_a_restart(
    deployment: Deployment,
) -> None:
    devices = await _devices(deployment)
    entry = await _channel(devices[0], "Typed yolo")
    await _typed_yolo(devices, entry, enabled=True)
    # Hermes keeps YOLO in memory only: the plugin's record of the change restores it.
    await deployment.close_clients()
    health = deployment.ws_urls[0].replace("ws://", "http://") + "/healthz"
    deployment.gateway.restart(lambda: http_ok(health))
    devices = await _devices(deployment)
    current = await devices[2].request(
        {"type": "yolo.current", "conversation_id": entry["conversation_id"]}
    )
    assert current["enabled"] is True
    await _typed_yolo(devices, entry, enabled=False)


async def test_model_and_reasoning_changes_name_their_conversation_to_every_other_device(
    deployment: Deployment,
) -> None:
    setter = await deployment.pheby()
    watcher = await deployment.pheby()
    tablet = await deployment.iris("tablet")
    entry = await _channel(tablet, "Preferences")
    chat_id, conversation_id = entry["chat_id"], entry["conversation_id"]
    for change, frame in (
        ("model.changed", {"type": "model.set", "model": "other-model"}),
        ("reasoning.changed", {"type": "reasoning.set", "effort": "high"}),
    ):
        watcher_from, tablet_from = len(watcher.frames), len(tablet.frames)
        reply = await setter.request({**frame, "conversation_id": conversation_id})
        assert reply["type"] == change and reply["conversation_id"] == conversation_id, reply
        expected = {k: v for k, v in reply.items() if k != "request_id"}
        assert expected["scope"] == "conversation"
        assert await watcher.wait_type(change, start=watcher_from) == expected
        on_tablet = await tablet.wait_type(change, start=tablet_from)
        assert on_tablet["chat_id"] == chat_id and on_tablet["thread_id"] is None
        assert {k: v for k, v in on_tablet.items() if k in expected} == expected
    # A global change is about no conversation, and says so by naming none.
    watcher_from, tablet_from = len(watcher.frames), len(tablet.frames)
    reply = await setter.request({"type": "model.set", "model": "scripted-model"})
    assert reply["type"] == "model.changed" and reply["scope"] == "global", reply
    assert "conversation_id" not in await watcher.wait_type("model.changed", start=watcher_from)
    on_tablet = await tablet.wait_type("model.changed", start=tablet_from)
    assert not {"conversation_id", "chat_id", "thread_id"} & set(on_tablet), on_tablet


async def test_the_model_picker_offers_the_models_hermes_can_switch_to_and_accepts_only_those(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    tablet = await deployment.iris("tablet")
    desktop = await deployment.pheby()
    entry = await _channel(phone, "Picker")
    chat_id, conversation_id = entry["chat_id"], entry["conversation_id"]
    start = len(phone.frames)
    await iris_send(phone, chat_id, "/model")
    picker = await phone.wait_type("picker.model", timeout=60, start=start)
    current = next(p for p in picker["providers"] if p["is_current"])
    # The configured endpoint (custom provider) offers every model it serves, as Hermes'
    # own CLI picker lists them: the scripted model server's /v1/models, in its order.
    assert current["slug"] == "custom" and current["models"] == list(MODEL_IDS)
    assert current["total_models"] == len(MODEL_IDS)
    listed = await desktop.request({"type": "models.list", "conversation_id": conversation_id})
    assert next(p for p in listed["providers"] if p["is_current"])["models"] == list(MODEL_IDS)

    for value in ("no-such-provider:fake-model-b", "custom:fake-model-b", "other-model"):
        refused = await phone.request(
            {"type": "picker.select", "picker_id": picker["picker_id"], "value": value}
        )
        assert refused["type"] == "error" and refused["error"]["code"] == "bad_request", refused
    chosen = await tablet.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "custom:other-model"}
    )
    assert (
        chosen["type"] == "picker.resolved"
        and chosen["status"] == "resolved"
        and chosen["accepted"] is True
        and chosen["value"] == "custom:other-model"
    ), chosen
    closed = await phone.wait_type("picker.resolved", start=start, picker_id=picker["picker_id"])
    assert closed["value"] == "custom:other-model"
    assert [f for f in phone.frames[start:] if f.get("type") == "picker.resolved"] == [closed], (
        "the refused values closed nothing"
    )
    now = await desktop.request({"type": "models.current", "conversation_id": conversation_id})
    assert now["model"] == "other-model" and now["scope"] == "conversation", now
