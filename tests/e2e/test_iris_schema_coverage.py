"""The iris schema (docs/protocol/schema/iris.*.json) covers the real protocol: one walk
through the main flows against the real embedded gateway meets every server frame type it
defines, and (as in every end-to-end test) each frame sent and received matches it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import Callable

import pytest

from canonical.model import Json
from hdgctl.ops import resolve_target
from scripted_model.scenarios import media_png_bytes
from tests.e2e.conftest import Deployment
from tests.e2e.flows import frames_of_run, iris_send
from tests.harness.device import DeviceClient
from tests.harness.frame_schemas import frame_types

HOME = "android:default"
pytestmark = pytest.mark.timeout(420)

# Server frame types no flow can reach, with why. None: every iris frame is reachable.
UNREACHABLE: dict[str, str] = {}


async def _turn(client: DeviceClient, text: str, chat_id: str = HOME) -> list[Json]:
    start = len(client.frames)
    ack = await iris_send(client, chat_id, text)
    assert ack["type"] == "message.ack", ack
    return await frames_of_run(client, ack["run_id"], start)


async def _pick(client: DeviceClient, text: str, kind: str, value: str) -> Json:
    """A message that makes Hermes offer a picker, answered; the resolution."""
    start = len(client.frames)
    ack = await iris_send(client, HOME, text)
    assert ack["type"] == "message.ack", ack
    picker = await client.wait_type(f"picker.{kind}", timeout=60, start=start)
    resolved = await client.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": value}
    )
    await client.wait_type("run.finished", timeout=90, start=start, run_id=ack["run_id"])
    return resolved


async def _upload(client: DeviceClient, data: bytes, filename: str, mime: str) -> Json:
    """An upload in two chunks (an ack, then the upload's registration)."""
    ready = await client.request(
        {
            "type": "media.upload.start",
            "chat_id": HOME,
            "thread_id": None,
            "filename": filename,
            "mime": mime,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    )
    assert ready["type"] == "media.upload.ready", ready
    half = len(data) // 2
    for offset, part in ((0, data[:half]), (half, data[half:])):
        answer = await client.request(
            {
                "type": "media.upload.chunk",
                "upload_id": ready["upload_id"],
                "offset": offset,
                "data": base64.b64encode(part).decode(),
            }
        )
    assert answer["type"] == "media.uploaded", answer
    return answer


async def _media_outcome(client: DeviceClient, media_id: str) -> Json:
    return await client.wait_for(
        lambda f: (
            f.get("type") in ("media.ready", "media.failed") and f.get("media_id") == media_id
        ),
        60,
    )


async def _pheby_preferences(deployment: Deployment, conversation_id: str) -> None:
    """A pheby device changes YOLO, the model and the reasoning effort of a lane, and the
    model globally: iris devices hear each change."""
    pheby = await deployment.pheby()
    for request, answer in (
        ({"type": "yolo.set", "conversation_id": conversation_id, "enabled": True}, "yolo"),
        (
            {"type": "model.set", "model": "other-model", "conversation_id": conversation_id},
            "model",
        ),
        (
            {"type": "reasoning.set", "effort": "low", "conversation_id": conversation_id},
            "reasoning",
        ),
        ({"type": "model.set", "model": "scripted-model"}, "model"),
    ):
        assert (await pheby.request(request))["type"] == f"{answer}.changed", request


async def test_the_main_flows_meet_every_server_frame_type_of_the_iris_schema(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    tablet = await deployment.iris("tablet")  # sees the broadcasts
    assert (await phone.request({"type": "ping"}))["type"] == "pong"
    home = next(c for c in phone.frames[0]["channels"] if c["is_default"])

    # Channels: create, rename, list, the toggles.
    created = await phone.request({"type": "channel.create", "kind": "channel", "name": "Walk"})
    assert created["type"] == "result", created
    chat = created["entry"]["chat_id"]
    for request in (
        {"type": "channel.rename", "chat_id": chat, "name": "Schema walk"},
        {"type": "channel.set_automation", "chat_id": chat, "on": True},
        {"type": "channel.set_automation", "chat_id": chat, "on": False},
        {"type": "channel.set_threads", "chat_id": HOME, "on": True},
    ):
        assert (await phone.request(request))["type"] == "result", request
    listed = await phone.request({"type": "channel.list"})
    assert any(c["chat_id"] == chat for c in listed["channels"])
    await tablet.wait_type("channel.renamed", chat_id=chat)

    # A turn with commentary and tool frames.
    kinds = {f["type"] for f in await _turn(phone, "[narrate] check it")}
    assert {"commentary", "tool.start", "tool.end", "message.update"} <= kinds, kinds

    # Pickers: approval, clarification, model, choice, confirmation.
    assert (await _pick(phone, "[danger] clean up", "approval", "once"))["choice"] == "once"
    assert (await _pick(phone, "[clarify] a colour", "clarify", "red"))["status"] == "resolved"
    assert (await _pick(phone, "/model", "model", "custom:scripted-model"))["accepted"]
    assert (await _pick(phone, "/reasoning", "choice", "medium"))["value"] == "medium"
    assert (await _pick(phone, "/new", "confirm", "cancel"))["value"] == "cancel"

    # History and search over what was said.
    history = await phone.request({"type": "history", "chat_id": HOME, "thread_id": None})
    assert history["type"] == "history" and history["messages"], history
    found = await phone.request({"type": "search", "query": "hello-from-tool", "scope": "all"})
    assert found["type"] == "search.results", found

    # Preferences a pheby device changes reach iris devices.
    await _pheby_preferences(deployment, home["conversation_id"])
    await phone.wait_type("model.changed", scope="global")

    # Media: uploads (transcoded, or failing as corrupt), sent, offered, pulled.
    image = await _upload(phone, media_png_bytes(32), "dot.png", "image/png")
    broken = await _upload(
        phone, b"\xff\xd8\xff\xe0" + os.urandom(4000), "broken.jpg", "image/jpeg"
    )
    assert (await _media_outcome(phone, image["media_ref"]))["type"] == "media.ready"
    assert (await _media_outcome(phone, broken["media_ref"]))["type"] == "media.failed"
    ack = await iris_send(phone, HOME, "a picture", media_refs=[image["media_ref"]])
    offer = await phone.wait_type("media.offer", media_id=image["media_ref"])
    await frames_of_run(phone, ack["run_id"])
    pulled = await phone.request({"type": "media.pull", "media_id": offer["media_id"]})
    assert pulled["type"] == "media.pulled", pulled

    # Push registration, resync from a cursor, replay after a reconnect.
    assert (await phone.request({"type": "fcm.register", "token": "fcm-token-1"}))["op"] == (
        "fcm.register"
    )
    synced = await phone.request({"type": "sync", "cursor": max(0, phone.last_cursor - 5)})
    assert synced["type"] == "sync.ack", synced
    cursor = phone.last_cursor
    await phone.close()
    await _turn(tablet, "while the phone was away")
    phone = await deployment.iris("phone", cursor=cursor)
    await phone.wait_type("run.finished")

    # Errors for bad input; the channel's end.
    unknown = await phone.request({"type": "history", "chat_id": "android:nope"})
    assert unknown["error"]["code"] == "not_found"
    with phone.off_schema():
        missing = await phone.request({"type": "message.send", "chat_id": HOME, "text": "x"})
    assert missing["error"]["code"] == "bad_request"
    assert (await phone.request({"type": "channel.delete", "chat_id": chat}))["type"] == "result"
    await tablet.wait_type("channel.deleted", chat_id=chat)

    # Operator frames, with the admin token.
    target = await asyncio.to_thread(
        resolve_target, deployment.home.path, deployment.ws_urls[0] + "/ws", token=deployment.token
    )
    admin = {"admin_token": target.admin_token}
    listed_devices = await phone.request({"type": "admin.devices.list", **admin})
    assert listed_devices["type"] == "admin.devices", listed_devices
    revoked = await phone.request({"type": "admin.devices.revoke", "device_id": "tablet", **admin})
    assert revoked["type"] == "admin.result", revoked

    seen = {kind for c in deployment.clients if c.dialect == "iris" for kind in c.seen}
    expected = frame_types("iris", "server") - set(UNREACHABLE)
    assert expected - seen == set(), f"no flow produced {sorted(expected - seen)}"
    assert not seen & set(UNREACHABLE), "a frame listed as unreachable was seen: update the list"
