"""Canonical events as the plugin emits them (built by the plugin's own code), for the
dialect codec tests."""

from __future__ import annotations

from typing import Any

from canonical.model import Json
from gateway_plugin.channels.store import ChannelEntry
from gateway_plugin.commands.interactive import Interactive
from gateway_plugin.delivery.turns import TurnTracker, notice_events

LANE = ("android:default", None)
CID = "c0ffee" * 5 + "00"


def sequenced(events: list[Json], start: int = 1) -> list[Json]:
    return [{**event, "cursor": start + n} for n, event in enumerate(events)]


def a_turn(status: str = "completed", error: str | None = None) -> dict[str, Json]:
    """run.accepted, message.start, message.delta, message.complete, run.finished."""
    turns = TurnTracker()
    run, opening = turns.accept(LANE, CID, run_id="r" * 32, request_id="req-1", client_id="cl-1")
    _, deltas = turns.on_send(run, "Hello ▉")
    closing = turns.finish(LANE, status, error)
    events = sequenced([*opening, *deltas, *closing])
    return {event["type"]: event for event in events}


def a_notice() -> Json:
    return sequenced(notice_events(LANE, CID, "⚡ Gateway restarting", None))[0]


def a_user_echo() -> Json:
    return {
        "type": "message.complete",
        "lane": list(LANE),
        "conversation_id": CID,
        "message_id": "u-cl-1",
        "role": "user",
        "kind": "user",
        "text": "hi",
        "device_id": "phone",
        "client_id": "cl-1",
        "ts": "2026-01-01T00:00:00.000+00:00",
        "cursor": 7,
    }


def a_tool_event(status: str = "running") -> Json:
    """A tool.event as gateway_plugin.commands.interactive builds it (cursor added by the outbox)."""
    tools = Interactive()
    base = {"lane": list(LANE), "conversation_id": CID, "run_id": "r" * 32}
    started = tools.tool_started(LANE, base, "t-1a2b3c4d5e6f", "web_search", {"query": "cats"})
    if status == "running":
        return {**started, "cursor": 9}
    error = "boom" if status == "failed" else None
    finished = tools.tool_finished(LANE, base, "t-1a2b3c4d5e6f", "web_search", status, 1234, error)
    return {**finished, "cursor": 9}


def a_typing() -> Json:
    return {"type": "typing", "lane": list(LANE), "on": True, "ts": "2026-01-01T00:00:00Z"}


def an_entry(**changes: Any) -> ChannelEntry:
    fields: Json = {
        "chat_id": "android:chan_1",
        "thread_id": None,
        "name": "Project X",
        "kind": "channel",
        "parent_chat_id": None,
        "is_default": False,
        "automation": False,
        "archived": False,
        "threads_enabled": True,
        "name_source": "user",
        "auto": False,
        "conversation_id": CID,
        "created": 1.0,
        "updated": 2.0,
    }
    fields.update(changes)
    return ChannelEntry(**fields)


def a_channel_event(kind: str, entry: ChannelEntry | None = None, **extra: Any) -> Json:
    entry = entry or an_entry()
    return {
        "type": kind,
        "lane": [entry.chat_id, entry.thread_id],
        "conversation_id": entry.conversation_id,
        "entry": entry.to_wire(),
        "cursor": 11,
        **extra,
    }
