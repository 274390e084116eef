"""Pheby Protocol v1, section by section, against the real gateway (spec/pheby-protocol-v1.md).

Handshake, heartbeat, error shape and limits are in test_bad_input.py; streaming order and
tool events in test_embedded_turn.py; reconnect recovery in test_durability.py.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from canonical.model import Json
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, pheby_run
from tests.harness.device import DeviceClient

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$")


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    # Short approval timeout so Hermes' own fail-closed expiry is observable.
    return embedded(
        home_options={
            "config_overrides": {"approvals": {"timeout": 4, "destructive_slash_confirm": False}}
        }
    )


async def test_handshake_ready_carries_version_server_and_a_utc_timestamp(
    deployment: Deployment,
) -> None:
    client = await deployment.client()
    ready = await client.hello_pheby(deployment.token, request_id="h1")
    assert (
        ready["type"] == "ready" and ready["protocol_version"] == 1 and ready["server"] == "pheby"
    )
    assert ISO.match(ready["ts"])


async def test_heartbeat_ping_gets_pong_with_a_timestamp(deployment: Deployment) -> None:
    client = await deployment.pheby()
    await client.send({"type": "ping"})
    pong = await client.wait_type("pong")
    assert ISO.match(pong["ts"])


async def test_conversation_list_carries_session_last_active_and_source(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    await pheby_run(client, conversation_id, "hello")
    snapshot = await client.request({"type": "conversation.list"})
    conversation = next(
        c for c in snapshot["conversations"] if c["conversation_id"] == conversation_id
    )
    assert set(conversation) == {"conversation_id", "name", "session_id", "last_active", "source"}
    assert (
        conversation["source"] == "hermes"
        and conversation["session_id"]
        and ISO.match(conversation["last_active"])
    )
    assert re.fullmatch(r"[0-9a-f]{32}", conversation_id)


async def test_conversation_create_replies_and_broadcasts_updated(deployment: Deployment) -> None:
    creator = await deployment.pheby()
    watcher = await deployment.pheby()
    created = await creator.request({"type": "conversation.create", "name": "Project X"})
    assert created["type"] == "conversation.created" and created["name"] == "Project X"
    assert re.fullmatch(r"[0-9a-f]{32}", created["conversation_id"])
    updated = await watcher.wait_type(
        "conversation.updated", conversation_id=created["conversation_id"]
    )
    assert updated == {
        "type": "conversation.updated",
        "conversation_id": created["conversation_id"],
        "name": "Project X",
    }
    unnamed = await creator.request({"type": "conversation.create"})
    assert unnamed["name"]


async def test_conversation_open_returns_history_newest_page_with_paging_and_a_snapshot(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    conversation_id = (await client.request({"type": "conversation.create", "name": "History"}))[
        "conversation_id"
    ]
    for text in ("first question", "second question"):
        await pheby_run(client, conversation_id, text)
    page = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id, "limit": 2}
    )
    assert page["type"] == "conversation.history" and page["has_more"] is True
    assert [m["role"] for m in page["messages"]] == ["user", "assistant"]
    assert "second question" in page["messages"][0]["text"]
    for key in ("attachments", "run", "tools", "approvals", "clarifications"):
        assert key in page
    assert page["run"] is None and page["approvals"] == [] and page["clarifications"] == []
    earlier = await client.request(
        {
            "type": "conversation.open",
            "conversation_id": conversation_id,
            "limit": 500,
            "before_message_id": page["messages"][0]["message_id"],
        }
    )
    assert earlier["has_more"] is False
    assert [m["role"] for m in earlier["messages"]] == ["user", "assistant"]
    assert "first question" in earlier["messages"][0]["text"]
    whole = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id, "limit": 9999}
    )
    assert len(whole["messages"]) == 4 and whole["has_more"] is False


async def test_conversation_open_spans_a_reset_generation(deployment: Deployment) -> None:
    client = await deployment.pheby()
    conversation_id = (
        await client.request({"type": "conversation.create", "name": "Generations"})
    )["conversation_id"]
    await pheby_run(client, conversation_id, "before the reset")
    await pheby_run(client, conversation_id, "/new")
    await pheby_run(client, conversation_id, "after the reset")
    history = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id}
    )
    texts = " ".join(m["text"] for m in history["messages"])
    assert "before the reset" in texts and "after the reset" in texts
    state = sqlite3.connect(f"file:{deployment.home.path / 'state.db'}?mode=ro", uri=True)
    try:
        sessions = state.execute(
            "SELECT COUNT(*) FROM sessions WHERE source = 'android' AND session_key LIKE 'agent:main:android:dm:android:chan_%'"
        ).fetchone()[0]
    finally:
        state.close()
    assert sessions >= 2, "the reset started a second Hermes session for the same conversation"


async def test_conversation_rename_replies_and_broadcasts(deployment: Deployment) -> None:
    client = await deployment.pheby()
    watcher = await deployment.pheby()
    conversation_id = (await client.request({"type": "conversation.create", "name": "Old"}))[
        "conversation_id"
    ]
    renamed = await client.request(
        {"type": "conversation.rename", "conversation_id": conversation_id, "name": "Renamed"}
    )
    assert renamed["type"] == "conversation.renamed" and renamed["name"] == "Renamed"
    broadcast = await watcher.wait_type("conversation.renamed", conversation_id=conversation_id)
    assert "request_id" not in broadcast and broadcast["name"] == "Renamed"


async def test_conversation_delete_removes_transcript_and_routing(deployment: Deployment) -> None:
    client = await deployment.pheby()
    conversation_id = (await client.request({"type": "conversation.create", "name": "Doomed"}))[
        "conversation_id"
    ]
    await pheby_run(client, conversation_id, "remember this")
    deleted = await client.request(
        {"type": "conversation.delete", "conversation_id": conversation_id}
    )
    assert (
        deleted["type"] == "conversation.deleted" and deleted["conversation_id"] == conversation_id
    )
    gone = await client.request({"type": "conversation.open", "conversation_id": conversation_id})
    assert gone["error"]["code"] == "conversation_not_found"
    listed = await client.request({"type": "conversation.list"})
    assert conversation_id not in {c["conversation_id"] for c in listed["conversations"]}
    again = await client.request(
        {"type": "conversation.delete", "conversation_id": conversation_id}
    )
    assert again["error"]["code"] == "conversation_not_found"


async def test_run_cancel_stops_the_run_with_exactly_one_cancelled_event(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    start = len(client.frames)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": "[slow] take your time",
            "request_id": "slow",
        }
    )
    accepted = await client.wait_type("run.accepted", start=start, request_id="slow")
    await client.wait_for(
        lambda f: f.get("type") == "tool.event" and f.get("status") == "running", 60, start
    )
    stale = await client.request(
        {"type": "run.cancel", "conversation_id": conversation_id, "run_id": "0" * 32}
    )
    assert stale["error"]["code"] == "not_found"
    await client.send(
        {
            "type": "run.cancel",
            "conversation_id": conversation_id,
            "run_id": accepted["run_id"],
            "request_id": "cancel",
        }
    )
    finished = await client.wait_type(
        "run.finished", timeout=60, start=start, run_id=accepted["run_id"]
    )
    assert finished["status"] == "cancelled"
    notices = [
        f
        for f in client.frames[start:]
        if f.get("type") == "message.complete" and f.get("kind") == "notice"
    ]
    assert all("Stopped" in n["text"] or "⚡" in n["text"] for n in notices)
    late = await client.request(
        {"type": "run.cancel", "conversation_id": conversation_id, "run_id": accepted["run_id"]}
    )
    assert late["error"]["code"] == "not_found"
    finishes = [
        f
        for f in client.frames[start:]
        if f.get("type") == "run.finished" and f.get("run_id") == accepted["run_id"]
    ]
    assert len(finishes) == 1


async def _approval(client: DeviceClient, conversation_id: str) -> tuple[Json, int]:
    start = len(client.frames)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": "[danger] clean up",
            "request_id": f"danger-{start}",
        }
    )
    request = await client.wait_type("approval.request", timeout=60, start=start)
    return request, start


async def test_an_approval_is_requested_with_four_choices_and_resolved_once_for_every_client(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    other = await deployment.pheby()
    conversation_id = await default_conversation(client)
    request, start = await _approval(client, conversation_id)
    assert request["choices"] == ["once", "session", "always", "deny"]
    assert request["command"].startswith("rm -rf") and request["session_key"].startswith(
        "agent:main:android:dm:"
    )
    assert request["conversation_id"] == conversation_id and request["run_id"]
    assert (await other.wait_type("approval.request", approval_id=request["approval_id"]))[
        "command"
    ] == request["command"]
    resolved = await client.request(
        {"type": "approval.respond", "approval_id": request["approval_id"], "choice": "once"}
    )
    assert resolved == {
        "type": "approval.resolved",
        "approval_id": request["approval_id"],
        "choice": "once",
        "accepted": True,
        "status": "resolved",
        "request_id": resolved["request_id"],
    }
    on_other = await other.wait_type("approval.resolved", approval_id=request["approval_id"])
    assert on_other["request_id"] == resolved["request_id"]
    tool_done = await client.wait_for(
        lambda f: f.get("type") == "tool.event" and f.get("status") == "completed", 60, start
    )
    assert tool_done["tool_name"] == "terminal"
    await client.wait_type("run.finished", timeout=60, start=start)
    stale = await client.request(
        {"type": "approval.respond", "approval_id": request["approval_id"], "choice": "once"}
    )
    assert stale["error"]["code"] == "approval_not_found"
    resolutions = [
        f
        for f in other.frames
        if f.get("type") == "approval.resolved" and f.get("approval_id") == request["approval_id"]
    ]
    assert len(resolutions) == 1


async def test_a_denied_approval_tells_the_agent_not_to_retry(deployment: Deployment) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    request, start = await _approval(client, conversation_id)
    resolved = await client.request(
        {
            "type": "approval.respond",
            "approval_id": request["approval_id"],
            "choice": "deny",
            "reason": "not now",
        }
    )
    assert resolved["choice"] == "deny" and resolved["accepted"] is True
    await client.wait_type("run.finished", timeout=60, start=start)
    with client.off_schema():
        bad = await client.request(
            {"type": "approval.respond", "approval_id": "x", "choice": "maybe"}
        )
    assert bad["error"]["code"] == "bad_request"


async def test_an_approval_hermes_times_out_is_reported_expired_never_denied(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    request, start = await _approval(client, conversation_id)
    expired = await client.wait_type(
        "approval.resolved", timeout=30, start=start, approval_id=request["approval_id"]
    )
    assert (
        expired["status"] == "expired"
        and expired["accepted"] is False
        and expired["choice"] is None
    )
    await client.wait_type("run.finished", timeout=60, start=start)
    late = await client.request(
        {"type": "approval.respond", "approval_id": request["approval_id"], "choice": "once"}
    )
    assert late["error"]["code"] == "approval_not_found"


async def test_a_clarification_is_answered_by_choice_or_free_text_and_resolved_once(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    other = await deployment.pheby()
    conversation_id = await default_conversation(client)
    start = len(client.frames)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": "[clarify] pick a colour",
            "request_id": "clar",
        }
    )
    request = await client.wait_type("clarify.request", timeout=60, start=start)
    assert (
        request["question"] == "Which colour?"
        and request["choices"] == ["red", "blue"]
        and request["allow_free_text"] is True
    )
    resolved = await client.request(
        {
            "type": "clarify.respond",
            "clarify_id": request["clarify_id"],
            "response": "a greenish blue",
        }
    )
    assert resolved["type"] == "clarify.resolved" and resolved["accepted"] is True
    assert (await other.wait_type("clarify.resolved", clarify_id=request["clarify_id"]))[
        "request_id"
    ] == resolved["request_id"]
    complete = await client.wait_type("message.complete", timeout=60, start=start)
    assert "a greenish blue" in complete["text"]
    stale = await client.request(
        {"type": "clarify.respond", "clarify_id": request["clarify_id"], "response": "red"}
    )
    assert stale["error"]["code"] == "clarify_not_found"


async def test_yolo_is_conversation_scoped_broadcast_and_skips_the_approval(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    other = await deployment.pheby()
    conversation_id = await default_conversation(client)
    current = await client.request({"type": "yolo.current", "conversation_id": conversation_id})
    assert current == {
        "type": "yolo.snapshot",
        "enabled": False,
        "scope": "conversation",
        "conversation_id": conversation_id,
        "request_id": current["request_id"],
    }
    with client.off_schema():
        bad = await client.request(
            {"type": "yolo.set", "conversation_id": conversation_id, "enabled": "true"}
        )
    assert bad["error"]["code"] == "bad_request"
    changed = await client.request(
        {"type": "yolo.set", "conversation_id": conversation_id, "enabled": True}
    )
    assert (
        changed["type"] == "yolo.changed"
        and changed["enabled"] is True
        and changed["scope"] == "conversation"
    )
    broadcast = await other.wait_type("yolo.changed", conversation_id=conversation_id)
    assert "request_id" not in broadcast
    frames = await pheby_run(client, conversation_id, "[danger] go ahead")
    assert not any(f["type"] == "approval.request" for f in frames)
    unknown = await client.request({"type": "yolo.current", "conversation_id": "f" * 32})
    assert unknown["error"]["code"] == "conversation_not_found"


async def test_models_come_from_hermes_picker_data_and_a_conversation_override_reaches_the_model(
    deployment: Deployment, scripted_model: Any
) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    snapshot = await client.request({"type": "models.list", "conversation_id": conversation_id})
    assert snapshot["type"] == "models.snapshot" and snapshot["current_model"] == "scripted-model"
    current_provider = next(p for p in snapshot["providers"] if p["is_current"])
    assert "scripted-model" in current_provider["models"] and current_provider["total_models"] >= 1
    assert set(current_provider) == {"slug", "name", "is_current", "models", "total_models"}
    assert "high" in snapshot["supported_reasoning_efforts"]
    changed = await client.request(
        {"type": "model.set", "model": "other-model", "conversation_id": conversation_id}
    )
    assert (
        changed["type"] == "model.changed"
        and changed["model"] == "other-model"
        and changed["scope"] == "conversation"
    )
    now = await client.request({"type": "models.current", "conversation_id": conversation_id})
    assert now["model"] == "other-model" and now["scope"] == "conversation"
    scripted_model.clear_log()
    await pheby_run(client, conversation_id, "which model are you")
    assert any(entry.get("model") == "other-model" for entry in scripted_model.chat_log())


async def test_reasoning_effort_is_set_per_conversation_and_invalid_values_are_bad_requests(
    deployment: Deployment, scripted_model: Any
) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    snapshot = await client.request(
        {"type": "reasoning.current", "conversation_id": conversation_id}
    )
    assert snapshot["type"] == "reasoning.snapshot" and "none" in snapshot["supported_efforts"]
    with client.off_schema():
        invalid = await client.request(
            {"type": "reasoning.set", "conversation_id": conversation_id, "effort": "extreme"}
        )
    assert invalid["error"]["code"] == "bad_request"
    changed = await client.request(
        {"type": "reasoning.set", "conversation_id": conversation_id, "effort": "high"}
    )
    assert (
        changed["type"] == "reasoning.changed"
        and changed["effort"] == "high"
        and changed["scope"] == "conversation"
    )
    scripted_model.clear_log()
    await pheby_run(client, conversation_id, "think hard")
    assert any(entry.get("reasoning_effort") == "high" for entry in scripted_model.chat_log())
    disabled = await client.request(
        {"type": "reasoning.set", "conversation_id": conversation_id, "effort": "none"}
    )
    assert disabled["effort"] == "none"
    snapshot = await client.request(
        {"type": "reasoning.current", "conversation_id": conversation_id}
    )
    assert snapshot["enabled"] is False


async def test_a_new_whose_typed_confirmation_is_cancelled_ends_its_run_and_the_next_send_works(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()  # Hermes asks to confirm /new
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    # Sent the moment a picker command's run ends: Hermes still holds the session for it.
    await pheby_run(client, conversation_id, "/reasoning")
    start = len(client.frames)
    new = await pheby_run(client, conversation_id, "/new", timeout=30)
    assert new[-1]["status"] == "completed", new[-1]
    await client.wait_for(
        lambda f: f.get("type") == "message.complete" and "Confirm /new" in str(f.get("text")),
        30,
        start,
    )
    cancelled = await pheby_run(client, conversation_id, "/cancel", timeout=30)
    assert any("cancelled" in str(f.get("text")) for f in cancelled), cancelled
    reply = await pheby_run(client, conversation_id, "hello again")
    assert "message.delta" in [f["type"] for f in reply] and reply[-1]["status"] == "completed"
