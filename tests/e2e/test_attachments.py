"""Attachments over HTTP on the edge port, against the real embedded gateway (pheby spec,
"Attachments (both directions)"): every status code, each auth form, uploads reaching the
agent, claims, deliverables from Hermes' MEDIA: pipeline, expiry."""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from canonical.model import Json
from scripted_model.scenarios import media_png_bytes
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, frames_of_run, pheby_run
from tests.harness.device import DeviceClient
from tests.harness.services import ScriptedModel

HEX32 = re.compile(r"^[0-9a-f]{32}$")
NOT_FOUND = {"error": {"code": "not_found", "message": "Attachment unavailable"}}
NOTES = "# Shopping\n\n- oat milk\n- zucchini-7f3a (the marker the agent must see)\n"
PNG = media_png_bytes(8)
DESCRIPTOR_KEYS = {
    "attachment_id",
    "filename",
    "mime_type",
    "size",
    "kind",
    "inline_image",
    "direction",
    "conversation_id",
    "message_id",
    "created_at",
    "expires_at",
    "download_path",
}


def stored_files(root: Path) -> list[str]:
    """Names of the files under an attachment storage root."""
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def base_url(deployment: Deployment) -> str:
    return deployment.ws_urls[0].replace("ws://", "http://")


def auth(token: str, form: str = "bearer") -> dict[str, str]:
    if form == "bearer":
        return {"Authorization": f"Bearer {token}"}
    if form == "apikey":
        return {"Authorization": f"ApiKey {token}"}
    return {"X-Pheby-Secret": token}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def upload(
    http: httpx.AsyncClient,
    deployment: Deployment,
    conversation_id: str,
    filename: str,
    body: Any,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    sent = {**(auth(deployment.token) if headers is None else headers)}
    if content_type:
        sent["Content-Type"] = content_type
    return await http.post(
        base_url(deployment) + "/attachments",
        params={"conversation_id": conversation_id, "filename": filename},
        content=body,
        headers=sent,
    )


async def send(client: DeviceClient, conversation_id: str, text: str, ids: list[str]) -> Json:
    """chat.send with attachment ids: run.accepted or the error for this request."""
    request_id = f"r-{uuid.uuid4().hex[:8]}"
    start = len(client.frames)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": text,
            "attachment_ids": ids,
            "request_id": request_id,
        }
    )
    return await client.wait_for(
        lambda f: f.get("request_id") == request_id and f["type"] in ("run.accepted", "error"),
        30,
        start,
    )


def last_user_text(scripted_model: ScriptedModel, marker: str) -> str:
    """The newest agent request's last user text (the log keeps 300 chars) with ``marker``."""
    for entry in reversed(scripted_model.chat_log()):
        text = str(entry.get("last_user_text") or "")
        # Hermes' title generator quotes the exchange as "User: ...": not the agent's turn.
        if marker in text and not text.startswith("User: "):
            return text
    raise AssertionError(f"no model request carried {marker!r}")


async def test_uploads_reach_the_agent_inlined_or_as_media_and_are_anchored_to_the_turn(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient, scripted_model: ScriptedModel
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)

    notes = await upload(http, deployment, conversation_id, "../../etc/notes.md", NOTES.encode())
    assert notes.status_code == 201, notes.text
    md = notes.json()["attachment"]
    assert set(md) == DESCRIPTOR_KEYS
    assert HEX32.match(md["attachment_id"]) and md["filename"] == "notes.md"
    assert md["mime_type"] == "text/markdown" and md["kind"] == "document"
    assert md["size"] == len(NOTES.encode()) and md["inline_image"] is False
    assert md["direction"] == "inbound" and md["message_id"] is None
    assert md["conversation_id"] == conversation_id
    assert md["download_path"] == f"/attachments/{md['attachment_id']}"
    created = datetime.fromisoformat(md["created_at"])
    assert datetime.fromisoformat(md["expires_at"]) - created == timedelta(days=7)

    picture = await upload(http, deployment, conversation_id, "pic.png", PNG, "image/png")
    assert picture.status_code == 201, picture.text
    png = picture.json()["attachment"]
    assert png["kind"] == "image" and png["inline_image"] is True
    assert png["mime_type"] == "image/png"

    # Client filenames never become paths: only server-generated names are on disk.
    storage = deployment.home.path / "android" / "attachments"
    assert stored_files(storage) == sorted([md["attachment_id"], png["attachment_id"]])

    # The markdown is inlined into the agent's turn, ahead of the user's text.
    text = "what should I buy?"
    start = len(client.frames)
    accepted = await send(client, conversation_id, text, [md["attachment_id"]])
    assert accepted["type"] == "run.accepted", accepted
    frames = await frames_of_run(client, accepted["run_id"], start)
    assert frames[-1]["status"] == "completed", frames[-1]
    seen = last_user_text(scripted_model, "zucchini-7f3a")
    assert seen.startswith("[Content of notes.md]:\n# Shopping\n"), seen
    assert seen.endswith(text) or len(seen) == 300

    # The picture arrives as a local image in Hermes' media cache (described for this
    # text-only model by Hermes' vision pre-analysis, which names the path).
    caption = "and this picture?"
    start = len(client.frames)
    second = await send(client, conversation_id, caption, [png["attachment_id"]])
    assert second["type"] == "run.accepted", second
    await frames_of_run(client, second["run_id"], start)
    seen = last_user_text(scripted_model, "The user sent an image")
    assert str(deployment.home.path / "cache" / "images" / "img_") in seen, seen

    added = [f for f in client.frames if f["type"] == "attachment.added"]
    assert [a["attachment"]["attachment_id"] for a in added] == [
        md["attachment_id"],
        png["attachment_id"],
    ]
    for frame in added:
        assert set(frame) == {"type", "conversation_id", "attachment", "ts"}
        assert frame["conversation_id"] == conversation_id
        assert re.fullmatch(r"u-[0-9a-f]{32}", frame["attachment"]["message_id"])
    assert added[0]["attachment"]["message_id"] != added[1]["attachment"]["message_id"]

    # History shows the users' own texts; the snapshot lists both, anchored to their turns.
    history = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id}
    )
    user = [m for m in history["messages"] if m["role"] == "user"]
    assert [m["text"] for m in user[-2:]] == [text, caption]
    listed = [(a["attachment_id"], a["message_id"]) for a in history["attachments"]]
    assert listed == [
        (md["attachment_id"], user[-2]["message_id"]),
        (png["attachment_id"], user[-1]["message_id"]),
    ]

    # Download with each of the three auth forms.
    for form in ("bearer", "apikey", "secret"):
        got = await http.get(
            base_url(deployment) + png["download_path"], headers=auth(deployment.token, form)
        )
        assert got.status_code == 200 and got.content == PNG
        assert got.headers["content-type"] == "image/png"
        assert got.headers["content-disposition"].startswith("inline")
    got = await http.get(base_url(deployment) + md["download_path"], headers=auth(deployment.token))
    assert got.content == NOTES.encode() and got.headers["content-type"].startswith("text/markdown")
    assert got.headers["content-disposition"].startswith("attachment")
    assert got.headers["x-content-type-options"] == "nosniff"


async def test_sends_claim_uploads_once_and_refusals_leave_them_retryable(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    created = await client.request({"type": "conversation.create", "name": "Other"})
    other_id = created["conversation_id"]

    first = (await upload(http, deployment, conversation_id, "a.txt", b"alpha")).json()
    elsewhere = (await upload(http, deployment, other_id, "b.txt", b"beta")).json()
    a_id, b_id = first["attachment"]["attachment_id"], elsewhere["attachment"]["attachment_id"]

    # A run is active: refused with run_active, and the upload stays usable.
    start = len(client.frames)
    await client.send(
        {"type": "chat.send", "conversation_id": conversation_id, "text": "[long] go"}
    )
    long_run = await client.wait_type("run.accepted", 30, start)
    busy = await send(client, conversation_id, "see the file", [a_id])
    assert busy["type"] == "error" and busy["error"]["code"] == "run_active", busy
    await frames_of_run(client, long_run["run_id"], start)

    cross = await send(client, conversation_id, "see the file", [b_id])
    assert cross["type"] == "error" and cross["error"]["code"] == "bad_request"
    assert "another conversation" in cross["error"]["message"]
    unknown = await send(client, conversation_id, "see the file", ["0" * 32])
    assert unknown["type"] == "error" and "unknown or expired" in unknown["error"]["message"]
    twice = await send(client, conversation_id, "see the file", [a_id, a_id])
    assert twice["type"] == "error" and twice["error"]["code"] == "bad_request"
    command = await send(client, conversation_id, "/status", [a_id])
    assert command["type"] == "error" and command["error"]["code"] == "bad_request"

    accepted = await send(client, conversation_id, "see the file", [a_id])
    assert accepted["type"] == "run.accepted", accepted
    await frames_of_run(client, accepted["run_id"])
    reused = await send(client, conversation_id, "again", [a_id])
    assert reused["type"] == "error" and "already sent" in reused["error"]["message"]

    # The other conversation's upload is untouched by all of that.
    other_history = await client.request({"type": "conversation.open", "conversation_id": other_id})
    assert other_history["attachments"] == []
    late = await send(client, other_id, "now here", [b_id])
    assert late["type"] == "run.accepted", late


async def test_a_file_the_agent_delivers_is_stored_announced_and_downloadable(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    frames = await pheby_run(client, conversation_id, "[media] draw me a chart")
    run_id = frames[0]["run_id"]
    complete = next(f for f in frames if f["type"] == "message.complete")
    assert "MEDIA:" not in complete["text"] and "Here it is" in complete["text"]
    added = await client.wait_type("attachment.added", 30)
    attachment = added["attachment"]
    assert set(attachment) == DESCRIPTOR_KEYS
    assert attachment["direction"] == "outbound" and attachment["kind"] == "image"
    assert attachment["inline_image"] is True and attachment["mime_type"] == "image/png"
    assert attachment["message_id"] == f"draft-{run_id}"
    assert re.match(r"^chart-[0-9a-f]{12}\.png$", attachment["filename"])
    got = await http.get(
        base_url(deployment) + attachment["download_path"], headers=auth(deployment.token, "secret")
    )
    assert got.status_code == 200 and got.content == media_png_bytes()

    # The agent's original file is copied, never moved or deleted.
    original = Path(tempfile.gettempdir()) / "hdg-scripted-media" / attachment["filename"]
    assert original.read_bytes() == media_png_bytes()

    history = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id}
    )
    assert [a["attachment_id"] for a in history["attachments"]] == [attachment["attachment_id"]]
    assert history["attachments"][0]["message_id"] == f"draft-{run_id}"
