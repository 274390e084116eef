"""Cron delivery to the home channel, the threads toggle and media-only sends (seed 06
§6.2, §6.3, §6.3.1, §6.5), at the wire against the real embedded gateway."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from canonical.model import Json
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, frames_of_run, iris_send
from tests.e2e.test_channels import _hermes, _job_id
from tests.harness.device import DeviceClient

HOME = "android:default"
NO_TARGET = "no delivery target resolved"


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded()


def _is_cron(frame: Json) -> bool:
    return frame.get("type") == "message" and frame.get("kind") == "cron"


def _assert_cron_message(frames: list[Json], message: Json, name: str) -> None:
    """What an app written from seed 06 §6.5 looks for: role "cron" and the header."""
    assert (message["chat_id"], message["thread_id"]) == (HOME, None), message
    assert message["role"] == "cron" and message["cron_job"]["name"] == name, message
    assert message["text"].startswith(f"[Cron delivery: {name}]\n\n"), message["text"]
    assert "Cronjob Response" not in message["text"]
    start = next(
        f
        for f in frames
        if f.get("type") == "message.start" and f.get("message_id") == message["message_id"]
    )
    assert start["role"] == "cron"


async def test_a_bare_android_cron_job_reaches_the_home_channel_in_and_out_of_the_gateway(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    created = _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "homely",
        "--deliver",
        "android",
        "every 2h",
        "say the home report",
    )
    assert created.returncode == 0, created.stderr
    listed = await phone.request({"type": "channel.list"})
    home = next(c for c in listed["channels"] if c["chat_id"] == HOME)
    assert [j["name"] for j in home["cron_jobs"]] == ["homely"]

    # Out of the gateway: `hermes cron run` in a process of its own, no variable set.
    start = len(phone.frames)
    ran = _hermes(deployment, "cron", "run", _job_id(deployment, "homely"))
    assert NO_TARGET not in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr, ran.stderr
    message = await phone.wait_for(_is_cron, 60, start)
    _assert_cron_message(phone.frames[start:], message, "homely")

    # In the gateway: its scheduler runs the job once it is due (it ticks at start-up).
    jobs_file = deployment.home.path / "cron" / "jobs.json"
    data = json.loads(jobs_file.read_text(encoding="utf-8"))
    for job in data["jobs"] if isinstance(data, dict) else data:
        if job.get("name") == "homely":
            job["next_run_at"] = "2020-01-01T00:00:00+00:00"
    jobs_file.write_text(json.dumps(data), encoding="utf-8")
    deployment.gateway.restart(
        lambda: (deployment.gateway.platform_state("android") or {}).get("state") == "connected"
    )
    back = await deployment.iris("phone", cursor=phone.last_cursor)
    live = await back.wait_for(_is_cron, 90)
    _assert_cron_message(back.frames, live, "homely")
    assert NO_TARGET not in deployment.gateway.log_text() + deployment.gateway.agent_log_text()


async def _upload(client: DeviceClient, data: bytes, filename: str, mime: str) -> str:
    ready = await client.request(
        {
            "type": "media.upload.start",
            "chat_id": HOME,
            "filename": filename,
            "mime": mime,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    )
    assert ready["type"] == "media.upload.ready", ready
    uploaded = await client.request(
        {
            "type": "media.upload.chunk",
            "upload_id": ready["upload_id"],
            "offset": 0,
            "data": base64.b64encode(data).decode(),
        }
    )
    assert uploaded["type"] == "media.uploaded", uploaded
    return str(uploaded["media_ref"])


async def _media_only(client: DeviceClient, media_ref: str, **extra: Any) -> Json:
    """A message.send with files and no text at all."""
    client_id = f"c-{uuid.uuid4().hex}"
    start = len(client.frames)
    await client.send(
        {
            "type": "message.send",
            "chat_id": HOME,
            "thread_id": None,
            "client_id": client_id,
            "media_refs": [media_ref],
            **extra,
        }
    )
    return await client.wait_for(
        lambda f: f.get("client_id") == client_id and f.get("type") in ("message.ack", "error"),
        30,
        start,
    )


async def test_threads_off_stays_flat_and_files_alone_are_sent_in_the_flat_lane(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    default = next(c for c in phone.frames[0]["channels"] if c["chat_id"] == HOME)
    assert default["threads_enabled"] is False

    # Threads off: auto_thread mints nothing, the whole turn is in the flat lane.
    start = len(phone.frames)
    flat = await iris_send(phone, HOME, "Plan the garden party for Saturday", auto_thread=True)
    assert flat["type"] == "message.ack" and flat["thread_id"] is None, flat
    frames = await frames_of_run(phone, flat["run_id"], start)
    assert all(f.get("thread_id") is None for f in frames)
    assert not any(f.get("type") == "channel.created" for f in phone.frames[start:])

    # Files alone: accepted, echoed with no text, offered, run in the flat lane.
    note = b"# Shopping\n- zucchini\n- basil\n"
    start = len(phone.frames)
    ack = await _media_only(phone, await _upload(phone, note, "list.md", "text/markdown"))
    assert ack["type"] == "message.ack" and ack["thread_id"] is None, ack
    echo = await phone.wait_for(
        lambda f: f.get("type") == "message" and f.get("client_id") == ack["client_id"], 30, start
    )
    assert echo["role"] == "user" and echo["text"] == "" and echo["thread_id"] is None
    offer = await phone.wait_type("media.offer", 30, start)
    assert offer["message_id"] == f"u-{ack['client_id']}" and offer["thread_id"] is None
    done = await frames_of_run(phone, ack["run_id"], start)
    assert done[-1]["status"] == "completed", done[-1]

    # Threads on: a text send starts a thread; files alone still stay in the flat lane.
    toggled = await phone.request({"type": "channel.set_threads", "chat_id": HOME, "on": True})
    assert toggled["entry"]["threads_enabled"] is True, toggled
    start = len(phone.frames)
    alone = await _media_only(
        phone, await _upload(phone, note, "again.md", "text/markdown"), auto_thread=True
    )
    assert alone["type"] == "message.ack" and alone["thread_id"] is None, alone
    await frames_of_run(phone, alone["run_id"], start)
    assert not any(f.get("type") == "channel.created" for f in phone.frames[start:])
    threaded = await iris_send(phone, HOME, "Trip to Lisbon itinerary", auto_thread=True)
    assert threaded["type"] == "message.ack" and threaded["thread_id"] is not None, threaded
    await frames_of_run(phone, threaded["run_id"], start)

    # No text and no files is still refused; pheby's spec keeps text required.
    with phone.off_schema():
        refused = await phone.request(
            {"type": "message.send", "chat_id": HOME, "text": "  ", "client_id": "c-blank"}
        )
    assert refused["type"] == "error" and refused["error"]["code"] == "bad_request"
    pheby = await deployment.pheby()
    conversation = await default_conversation(pheby)
    with pheby.off_schema():
        blank = await pheby.request(
            {
                "type": "chat.send",
                "conversation_id": conversation,
                "text": "",
                "attachment_ids": ["0" * 32],
            }
        )
    assert blank["type"] == "error" and blank["error"]["code"] == "bad_request", blank
