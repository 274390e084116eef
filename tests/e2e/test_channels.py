"""Channels, threads, auto-threading, automation channels, cron delivery and search (spec 06),
over the iris dialect against the real gateway."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from canonical.model import Json
from scripted_model.scenarios import media_png_bytes
from tests.e2e.conftest import Deployment
from tests.e2e.flows import frames_of_run, iris_send
from tests.e2e.test_attachments import auth, base_url
from tests.harness.device import DeviceClient
from tests.harness.processes import VENV_BIN, scrubbed_environ


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded()


async def _op(client: DeviceClient, frame: Json) -> Json:
    return await client.request(frame)


async def test_hello_ack_carries_the_default_channel_and_changes_reach_every_device(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    tablet = await deployment.iris("tablet")
    ack = phone.frames[0]
    default = ack["channels"][0]
    assert (
        default["chat_id"] == "android:default"
        and default["kind"] == "default"
        and default["is_default"]
        and default["name"] == "Default"
    )
    created = await _op(
        phone, {"type": "channel.create", "name": "Cron Reports", "kind": "channel"}
    )
    entry = created["entry"]
    assert (
        created["type"] == "result"
        and re.fullmatch(r"android:chan_\d+", entry["chat_id"])
        and entry["kind"] == "channel"
    )
    seen = await tablet.wait_type("channel.created")
    assert seen["entry"]["chat_id"] == entry["chat_id"]
    renamed = await _op(
        phone, {"type": "channel.rename", "chat_id": entry["chat_id"], "name": "Reports"}
    )
    assert renamed["entry"]["name"] == "Reports"
    full = await tablet.wait_type("channel.renamed")
    assert full["entry"]["name"] == "Reports" and set(full["entry"]) >= {
        "chat_id",
        "name",
        "kind",
        "automation",
        "archived",
        "is_default",
        "created",
    }


async def test_channel_operations_refuse_bad_input_with_clear_errors(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    malformed = (  # the schema refuses these as the server does
        {"type": "channel.rename", "chat_id": "android:default", "name": "   "},
        {"type": "channel.create", "name": "x" * 101, "kind": "channel"},
        {"type": "channel.create", "name": "", "kind": "channel"},
    )
    for frame in malformed:
        with phone.off_schema():
            reply = await _op(phone, frame)
        assert reply["type"] == "error" and reply["error"]["code"] == "bad_request", (frame, reply)
    for frame, code in (
        ({"type": "channel.rename", "chat_id": "android:nope", "name": "x"}, "not_found"),
        (
            {"type": "channel.set_automation", "chat_id": "android:default", "on": True},
            "unsupported",
        ),
        ({"type": "channel.delete", "chat_id": "android:default"}, "unsupported"),
        (
            {
                "type": "channel.create",
                "name": "t",
                "kind": "thread",
                "parent_chat_id": "android:nope",
            },
            "not_found",
        ),
    ):
        reply = await _op(phone, frame)
        assert reply["type"] == "error" and reply["error"]["code"] == code, (frame, reply)
    channel = (await _op(phone, {"type": "channel.create", "name": "Side", "kind": "channel"}))[
        "entry"
    ]
    thread_elsewhere = await _op(
        phone,
        {
            "type": "channel.create",
            "name": "t",
            "kind": "thread",
            "parent_chat_id": channel["chat_id"],
        },
    )
    assert thread_elsewhere["error"]["code"] == "unsupported"
    deleted = await _op(phone, {"type": "channel.delete", "chat_id": channel["chat_id"]})
    assert deleted["entry"]["archived"] is True
    archived = await _op(
        phone, {"type": "channel.rename", "chat_id": channel["chat_id"], "name": "Back"}
    )
    assert archived["error"]["code"] == "archived"
    send = await iris_send(phone, channel["chat_id"], "hello archived")
    assert send["type"] == "error" and send["error"]["code"] == "archived"


async def test_set_default_moves_the_flag(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    channel = (await _op(phone, {"type": "channel.create", "name": "Main", "kind": "channel"}))[
        "entry"
    ]
    moved = await _op(phone, {"type": "channel.set_default", "chat_id": channel["chat_id"]})
    assert moved["entry"]["is_default"] is True
    listed = await _op(phone, {"type": "channel.list"})
    assert [c["chat_id"] for c in listed["channels"] if c["is_default"]] == [channel["chat_id"]]


async def test_threads_are_separate_hermes_sessions_and_deleting_one_keeps_the_flat_lane(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    thread = (
        await _op(
            phone,
            {
                "type": "channel.create",
                "name": "Topic",
                "kind": "thread",
                "parent_chat_id": "android:default",
            },
        )
    )["entry"]
    assert (
        thread["kind"] == "thread"
        and thread["parent_chat_id"] == "android:default"
        and re.fullmatch(r"t_\d+", thread["thread_id"])
    )
    in_thread = await iris_send(
        phone, "android:default", "thread secret is kiwi", thread_id=thread["thread_id"]
    )
    await frames_of_run(phone, in_thread["run_id"])
    flat = await iris_send(phone, "android:default", "flat lane question")
    await frames_of_run(phone, flat["run_id"])
    db = sqlite3.connect(f"file:{deployment.home.path / 'state.db'}?mode=ro", uri=True)
    try:
        keys = {
            row[0]
            for row in db.execute("SELECT session_key FROM sessions WHERE source = 'android'")
        }
    finally:
        db.close()
    assert f"agent:main:android:dm:android:default:{thread['thread_id']}" in keys
    assert "agent:main:android:dm:android:default" in keys
    renamed = await _op(
        phone,
        {
            "type": "channel.rename",
            "chat_id": "android:default",
            "thread_id": thread["thread_id"],
            "name": "Kiwi",
        },
    )
    assert renamed["entry"]["name"] == "Kiwi"
    deleted = await _op(
        phone,
        {"type": "channel.delete", "chat_id": "android:default", "thread_id": thread["thread_id"]},
    )
    assert deleted["entry"]["archived"] is True
    still = await iris_send(phone, "android:default", "still here")
    assert still["type"] == "message.ack" and still["thread_id"] is None


async def _threads_on(client: DeviceClient) -> None:
    """Auto-threading happens only with the default channel's threads toggle on."""
    toggled = await _op(
        client, {"type": "channel.set_threads", "chat_id": "android:default", "on": True}
    )
    assert toggled["entry"]["threads_enabled"] is True, toggled


async def test_auto_threading_names_the_thread_at_once_then_with_the_models_title(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    tablet = await deployment.iris("tablet")
    await _threads_on(phone)
    refused = await iris_send(  # refused for its upload: leaves no thread behind
        phone, "android:default", "Plan a lost photo", auto_thread=True, media_refs=["0" * 32]
    )
    assert refused["type"] == "error" and refused["error"]["code"] == "bad_request"
    ack = await iris_send(
        phone, "android:default", "Plan the garden party for Saturday please", auto_thread=True
    )
    created = await phone.wait_type("channel.created")
    entry = created["entry"]
    assert (
        created["auto"] is True
        and entry["kind"] == "thread"
        and entry["name"].startswith("Plan the garden party")
    )
    assert ack["thread_id"] == entry["thread_id"]
    frames = await frames_of_run(phone, ack["run_id"])
    assert all(f["thread_id"] == entry["thread_id"] for f in frames)
    renamed = await tablet.wait_for(
        lambda f: (
            f.get("type") == "channel.renamed" and f["entry"].get("thread_id") == entry["thread_id"]
        ),
        60,
    )
    assert (
        renamed["entry"]["name"].startswith("Scripted Title For")
        and renamed["entry"]["name_source"] == "llm"
    )
    slash = await iris_send(phone, "android:default", "/help", auto_thread=True)
    assert slash["thread_id"] is None


async def test_a_failed_title_call_keeps_the_derived_name_and_a_user_rename_wins(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    await _threads_on(phone)
    ack = await iris_send(
        phone, "android:default", "[title-fail] Budget review notes", auto_thread=True
    )
    entry = (await phone.wait_type("channel.created"))["entry"]
    await frames_of_run(phone, ack["run_id"])
    await asyncio.sleep(8)
    listed = await _op(phone, {"type": "channel.list"})
    current = next(c for c in listed["channels"] if c.get("thread_id") == entry["thread_id"])
    assert current["name"] == entry["name"] and current["name_source"] == "derived"
    ack2 = await iris_send(phone, "android:default", "Trip to Lisbon itinerary", auto_thread=True)
    entry2 = (
        await phone.wait_for(
            lambda f: (
                f.get("type") == "channel.created" and f["entry"]["thread_id"] != entry["thread_id"]
            )
        )
    )["entry"]
    await _op(
        phone,
        {
            "type": "channel.rename",
            "chat_id": "android:default",
            "thread_id": entry2["thread_id"],
            "name": "My trip",
        },
    )
    await frames_of_run(phone, ack2["run_id"])
    await asyncio.sleep(3)
    listed = await _op(phone, {"type": "channel.list"})
    assert (
        next(c for c in listed["channels"] if c.get("thread_id") == entry2["thread_id"])["name"]
        == "My trip"
    )


async def test_automation_channels_are_read_only_and_nothing_reaches_hermes(
    deployment: Deployment, scripted_model: Any
) -> None:
    phone = await deployment.iris("phone")
    channel = (await _op(phone, {"type": "channel.create", "name": "Alerts", "kind": "channel"}))[
        "entry"
    ]
    flagged = await _op(
        phone, {"type": "channel.set_automation", "chat_id": channel["chat_id"], "on": True}
    )
    assert flagged["entry"]["automation"] is True
    scripted_model.clear_log()
    refused = await iris_send(phone, channel["chat_id"], "can I write here?")
    assert refused["type"] == "error" and refused["error"]["code"] == "unsupported"
    await asyncio.sleep(1)
    assert scripted_model.chat_log() == []


def _hermes(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = scrubbed_environ(
        {
            **deployment.home.process_env(),
            "ANDROID_TOKEN": deployment.token,
            "HERMES_ACCEPT_HOOKS": "1",
        }
    )
    return subprocess.run(
        [str(VENV_BIN / "hermes"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _job_id(deployment: Deployment, name: str) -> str:
    jobs = json.loads((deployment.home.path / "cron" / "jobs.json").read_text(encoding="utf-8"))
    listed = jobs["jobs"] if isinstance(jobs, dict) else jobs
    return str(next(j["id"] for j in listed if j.get("name") == name))


async def test_cron_delivers_by_target_and_by_name_and_is_marked_as_cron(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    channel = (
        await _op(phone, {"type": "channel.create", "name": "Cron Reports", "kind": "channel"})
    )["entry"]
    created = _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "nightly",
        "--deliver",
        f"android:{channel['chat_id']}",
        "every 2h",
        "say the nightly report",
    )
    assert created.returncode == 0, created.stderr
    by_name = _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "named",
        "--deliver",
        "android:Cron Reports",
        "every 2h",
        "say the named report",
    )
    assert by_name.returncode == 0, by_name.stderr
    listed = await _op(phone, {"type": "channel.list"})
    badges = next(c for c in listed["channels"] if c["chat_id"] == channel["chat_id"])["cron_jobs"]
    assert {b["name"] for b in badges} == {"nightly", "named"}
    for name in ("nightly", "named"):
        start = len(phone.frames)
        ran = _hermes(deployment, "cron", "run", _job_id(deployment, name))
        assert "Traceback" not in ran.stderr, ran.stderr
        message = await phone.wait_for(
            lambda f: f.get("type") == "message" and f.get("kind") == "cron", 60, start
        )
        assert message["chat_id"] == channel["chat_id"] and message["cron_job"]["name"] == name


async def test_cron_run_from_the_cli_delivers_its_media_as_attachments(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    created = _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "charted",
        "--deliver",
        "android:android:default",
        "every 2h",
        "[media] draw the nightly chart",
    )
    assert created.returncode == 0, created.stderr
    start = len(phone.frames)
    ran = _hermes(deployment, "cron", "run", _job_id(deployment, "charted"))
    assert "Traceback" not in ran.stderr, ran.stderr
    message = await phone.wait_for(
        lambda f: f.get("type") == "message" and f.get("kind") == "cron", 60, start
    )
    assert message["chat_id"] == "android:default" and "MEDIA:" not in message["text"]
    offer = await phone.wait_type("media.offer", 30, start)
    assert offer["chat_id"] == "android:default" and offer["direction"] == "outbound"
    assert offer["kind"] == "image" and offer["inline_image"] is True
    async with httpx.AsyncClient(timeout=60) as http:
        got = await http.get(
            f"{base_url(deployment)}/attachments/{offer['media_id']}",
            headers=auth(deployment.token),
        )
    assert got.status_code == 200 and got.content == media_png_bytes()


async def test_cron_to_a_thread_and_to_an_unknown_target(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    thread = (
        await _op(
            phone,
            {
                "type": "channel.create",
                "name": "Daily",
                "kind": "thread",
                "parent_chat_id": "android:default",
            },
        )
    )["entry"]
    _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "threaded",
        "--deliver",
        f"android:android:default:{thread['thread_id']}",
        "every 2h",
        "thread report",
    )
    start = len(phone.frames)
    _hermes(deployment, "cron", "run", _job_id(deployment, "threaded"))
    message = await phone.wait_for(
        lambda f: f.get("type") == "message" and f.get("kind") == "cron", 60, start
    )
    assert message["chat_id"] == "android:default" and message["thread_id"] == thread["thread_id"]
    _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "lost",
        "--deliver",
        "android:android:chan_999",
        "every 2h",
        "nowhere",
    )
    start = len(phone.frames)
    _hermes(deployment, "cron", "run", _job_id(deployment, "lost"))
    await asyncio.sleep(2)
    assert not any(f.get("kind") == "cron" for f in phone.frames[start:])


async def test_search_finds_messages_everywhere_or_in_one_chat_and_never_errors_on_odd_input(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    channel = (await _op(phone, {"type": "channel.create", "name": "Garden", "kind": "channel"}))[
        "entry"
    ]
    for chat_id, text in (
        ("android:default", "the zucchini harvest is big"),
        (channel["chat_id"], "zucchini bread recipe"),
        (channel["chat_id"], "你好世界 greetings"),
    ):
        ack = await iris_send(phone, chat_id, text)
        await frames_of_run(phone, ack["run_id"])
    everywhere = await _op(phone, {"type": "search", "query": "zucchini", "scope": "all"})
    assert everywhere["type"] == "search.results" and {
        h["chat_id"] for h in everywhere["hits"]
    } >= {"android:default", channel["chat_id"]}
    hit = everywhere["hits"][0]
    assert set(hit) >= {"message_id", "chat_id", "thread_id", "role", "snippet", "ts"}
    one_chat = await _op(
        phone,
        {"type": "search", "query": "zucchini", "scope": "chat", "chat_id": channel["chat_id"]},
    )
    assert {h["chat_id"] for h in one_chat["hits"]} == {channel["chat_id"]}
    users = await _op(phone, {"type": "search", "query": "role:user zucchini"})
    assert {h["role"] for h in users["hits"]} == {"user"}
    cjk = await _op(phone, {"type": "search", "query": "世界"})
    assert cjk["hits"]
    for odd in ('"', "*", "NEAR(", "x" * 2048, "🌱🌱", "channel:Garden zucchini", 'a" OR "b'):
        reply = await _op(phone, {"type": "search", "query": odd})
        assert reply["type"] == "search.results", (odd, reply)
    await _op(phone, {"type": "channel.delete", "chat_id": channel["chat_id"]})
    archived = await _op(phone, {"type": "search", "query": "bread"})
    assert any(h["chat_id"] == channel["chat_id"] for h in archived["hits"])
    missing = await _op(phone, {"type": "search", "query": "x", "scope": "chat"})
    assert missing["error"]["code"] == "bad_request"


async def test_the_in_gateway_scheduler_delivers_to_a_channel_live(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    channel = (
        await _op(phone, {"type": "channel.create", "name": "Scheduled", "kind": "channel"})
    )["entry"]
    _hermes(
        deployment,
        "cron",
        "create",
        "--name",
        "due",
        "--deliver",
        f"android:{channel['chat_id']}",
        "every 2h",
        "the scheduled report",
    )
    jobs_file = deployment.home.path / "cron" / "jobs.json"
    data = json.loads(jobs_file.read_text(encoding="utf-8"))
    jobs = data["jobs"] if isinstance(data, dict) else data
    for job in jobs:
        if job.get("name") == "due":
            job["next_run_at"] = "2020-01-01T00:00:00+00:00"
    jobs_file.write_text(json.dumps(data), encoding="utf-8")
    # The gateway's scheduler ticks once at start-up, then every 60 s.
    deployment.gateway.restart(
        lambda: (deployment.gateway.platform_state("android") or {}).get("state") == "connected"
    )
    back = await deployment.iris("phone", cursor=phone.last_cursor)
    message = await back.wait_for(
        lambda f: f.get("type") == "message" and f.get("kind") == "cron", 90
    )
    assert message["chat_id"] == channel["chat_id"] and message["cron_job"]["name"] == "due"
