"""The pheby schema (docs/protocol/schema/pheby.*.json) covers the real protocol: one walk
through the main flows against the real embedded gateway meets every server frame type it
defines, and (as in every end-to-end test) each frame sent and received matches it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from canonical.model import Json
from scripted_model.scenarios import media_png_bytes
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, pheby_run
from tests.e2e.test_attachments import upload
from tests.harness.device import DeviceClient
from tests.harness.frame_schemas import frame_types

pytestmark = pytest.mark.timeout(300)

# Server frame types no flow can reach, with why. None: every pheby frame is reachable.
UNREACHABLE: dict[str, str] = {}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def _decide(
    client: DeviceClient, conversation_id: str, text: str, kind: str, answer: Json
) -> Json:
    """A run that waits for an approval or a clarification, answered; the resolution."""
    start = len(client.frames)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": text,
            "request_id": f"{kind}-{start}",
        }
    )
    request = await client.wait_type(f"{kind}.request", timeout=60, start=start)
    resolved = await client.request(
        {"type": f"{kind}.respond", f"{kind}_id": request[f"{kind}_id"], **answer}
    )
    await client.wait_type("run.finished", timeout=90, start=start, run_id=request["run_id"])
    return resolved


async def test_the_main_flows_meet_every_server_frame_type_of_the_pheby_schema(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    other = await deployment.pheby()  # sees the broadcasts
    assert (await client.request({"type": "ping"}))["type"] == "pong"
    home = await default_conversation(client)

    # Conversations: create (+ broadcast), rename, open, delete.
    created = await client.request({"type": "conversation.create", "name": "Schema walk"})
    assert created["type"] == "conversation.created"
    chat = created["conversation_id"]
    await other.wait_type("conversation.updated", conversation_id=chat)
    renamed = await client.request(
        {"type": "conversation.rename", "conversation_id": chat, "name": "Schema walk 2"}
    )
    assert renamed["type"] == "conversation.renamed"

    # A turn with tool events; a file sent with a message.
    frames = await pheby_run(client, chat, "[tool] run the echo")
    assert any(f["type"] == "tool.event" for f in frames)
    stored = await upload(http, deployment, chat, "dot.png", media_png_bytes(), "image/png")
    assert stored.status_code == 201, stored.text
    start = len(client.frames)
    accepted = await client.request(
        {
            "type": "chat.send",
            "conversation_id": chat,
            "text": "a picture",
            "attachment_ids": [stored.json()["attachment"]["attachment_id"]],
        }
    )
    assert accepted["type"] == "run.accepted", accepted
    await client.wait_type("attachment.added", start=start)
    await client.wait_type("run.finished", timeout=90, start=start, run_id=accepted["run_id"])

    # Decisions: an approval and a clarification, each resolved once.
    approved = await _decide(client, chat, "[danger] clean up", "approval", {"choice": "once"})
    assert approved["type"] == "approval.resolved"
    answered = await _decide(client, chat, "[clarify] a colour", "clarify", {"response": "red"})
    assert answered["type"] == "clarify.resolved"

    # The history and snapshot of a conversation, as after a reconnect.
    await client.close()
    client = await deployment.pheby()
    opened = await client.request({"type": "conversation.open", "conversation_id": chat})
    assert opened["type"] == "conversation.history" and opened["messages"], opened

    # YOLO, models, reasoning: current state and changes.
    for request, answer in (
        ({"type": "yolo.current", "conversation_id": chat}, "yolo.snapshot"),
        ({"type": "yolo.set", "conversation_id": chat, "enabled": True}, "yolo.changed"),
        ({"type": "models.list", "conversation_id": chat}, "models.snapshot"),
        ({"type": "models.current", "conversation_id": chat}, "model.current"),
        ({"type": "model.set", "model": "other-model", "conversation_id": chat}, "model.changed"),
        ({"type": "reasoning.current", "conversation_id": chat}, "reasoning.snapshot"),
        ({"type": "reasoning.set", "effort": "high", "conversation_id": chat}, "reasoning.changed"),
        ({"type": "model.set", "model": "scripted-model"}, "model.changed"),
    ):
        assert (await client.request(request))["type"] == answer, request

    # Errors for bad input, then the conversation's end.
    unknown = await client.request({"type": "conversation.open", "conversation_id": "0" * 32})
    assert unknown["error"]["code"] == "conversation_not_found"
    with client.off_schema():
        await client.request({"type": "chat.send", "conversation_id": home, "text": " "})
    deleted = await client.request({"type": "conversation.delete", "conversation_id": chat})
    assert deleted["type"] == "conversation.deleted"

    seen = {kind for c in deployment.clients for kind in c.seen}
    expected = frame_types("pheby", "server") - set(UNREACHABLE)
    assert expected - seen == set(), f"no flow produced {sorted(expected - seen)}"
    assert not seen & set(UNREACHABLE), "a frame listed as unreachable was seen: update the list"
