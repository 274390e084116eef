"""edge.dialects.iris: iris frames <-> the canonical model; lanes and cursors on the wire."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canonical.bus import token_digest
from canonical.model import Json
from canonical.protocol import MAX_TEXT_CHARS
from edge.dialects.iris import IrisDialect
from edge.errors import FrameRejected

from .dialect_events import (
    CID,
    LANE,
    a_channel_event,
    a_notice,
    a_tool_event,
    a_turn,
    a_typing,
    a_user_echo,
)

iris = IrisDialect()
CHAT = "android:default"
GOOD_TOKEN = "A" * 16 + "b._~-" + "9" * 11  # 32 characters of the allowed alphabet
ADMIN = "admin-secret-token-value"


def is_iso(ts: Any) -> bool:
    return isinstance(ts, str) and datetime.fromisoformat(ts).tzinfo is not None


# --------------------------------------------------------------------------- decode: valid

SEND = {"type": "message.send", "chat_id": CHAT, "text": "hi", "client_id": "cl-1"}

VALID: list[tuple[Json, str, Json]] = [
    (
        SEND,
        "message.send",
        {
            "target": {"chat_id": CHAT, "thread_id": None},
            "attachment_ids": [],
            "text": "hi",
            "client_id": "cl-1",
            "auto_thread": False,
            "reply_to": None,
        },
    ),
    (
        {**SEND, "thread_id": "t_1", "auto_thread": True, "reply_to": "m3"},
        "message.send",
        {
            "target": {"chat_id": CHAT, "thread_id": "t_1"},
            "attachment_ids": [],
            "text": "hi",
            "client_id": "cl-1",
            "auto_thread": True,
            "reply_to": "m3",
        },
    ),
    (  # files alone: no text at all (seed 06 §6.3.1 media-only sends)
        {k: v for k, v in {**SEND, "media_refs": ["a" * 32]}.items() if k != "text"},
        "message.send",
        {
            "target": {"chat_id": CHAT, "thread_id": None},
            "text": "",
            "attachment_ids": ["a" * 32],
            "client_id": "cl-1",
            "auto_thread": False,
            "reply_to": None,
        },
    ),
    (  # or blank text, which is no caption
        {**SEND, "text": " \n", "media_refs": ["a" * 32]},
        "message.send",
        {
            "target": {"chat_id": CHAT, "thread_id": None},
            "text": "",
            "attachment_ids": ["a" * 32],
            "client_id": "cl-1",
            "auto_thread": False,
            "reply_to": None,
        },
    ),
    ({"type": "sync"}, "sync", {"cursor": 0}),
    ({"type": "sync", "cursor": 42}, "sync", {"cursor": 42}),
    ({"type": "sync", "cursor": 2**63 - 1}, "sync", {"cursor": 2**63 - 1}),
    ({"type": "ack", "cursor": 7}, "ack", {"cursor": 7}),
    (
        {"type": "read.receipt", "message_id": "m1", "cursor": 3},
        "read.receipt",
        {"message_id": "m1", "cursor": 3},
    ),
    (
        {"type": "run.cancel", "chat_id": CHAT},
        "run.cancel",
        {"target": {"chat_id": CHAT, "thread_id": None}, "run_id": None},
    ),
    (
        {"type": "history", "chat_id": CHAT, "thread_id": "t_1", "before_message_id": "m9"},
        "history",
        {
            "target": {"chat_id": CHAT, "thread_id": "t_1"},
            "limit": 100,
            "before_message_id": "m9",
            "view": "live",
        },
    ),
    ({"type": "channel.list"}, "channel.list", {"activity": False}),
    (
        {"type": "channel.create"},
        "channel.create",
        {"kind": "channel", "name": None, "parent_chat_id": None},
    ),
    (
        {"type": "channel.create", "kind": "thread", "name": "T", "parent_chat_id": CHAT},
        "channel.create",
        {"kind": "thread", "name": "T", "parent_chat_id": CHAT},
    ),
    (
        {"type": "channel.rename", "chat_id": CHAT, "name": "N"},
        "channel.rename",
        {"target": {"chat_id": CHAT, "thread_id": None}, "name": "N"},
    ),
    (
        {"type": "channel.rename", "chat_id": CHAT},
        "channel.rename",
        {"target": {"chat_id": CHAT, "thread_id": None}, "name": ""},
    ),
    ({"type": "channel.set_default", "chat_id": CHAT}, "channel.set_default", {"chat_id": CHAT}),
    (
        {"type": "channel.delete", "chat_id": CHAT, "thread_id": "t"},
        "channel.delete",
        {"target": {"chat_id": CHAT, "thread_id": "t"}, "purge_history": False},
    ),
    (
        {"type": "channel.set_automation", "chat_id": CHAT, "on": True},
        "channel.set_automation",
        {"chat_id": CHAT, "on": True},
    ),
    (
        {"type": "channel.set_threads", "chat_id": CHAT, "on": False},
        "channel.set_threads",
        {"chat_id": CHAT, "on": False},
    ),
    (
        {"type": "search", "query": "cats"},
        "search",
        {"query": "cats", "scope": "all", "chat_id": None, "thread_id": None, "limit": 50},
    ),
    (
        {"type": "search", "scope": "chat", "chat_id": CHAT, "limit": 999},
        "search",
        {"query": "", "scope": "chat", "chat_id": CHAT, "thread_id": None, "limit": 200},
    ),
    (
        {"type": "picker.select", "picker_id": "p", "value": "v"},
        "picker.select",
        {"picker_id": "p", "value": "v"},
    ),
    ({"type": "fcm.register", "token": "fcm-token"}, "fcm.register", {"token": "fcm-token"}),
    ({"type": "admin.devices.list"}, "admin.devices.list", {"admin_digest": None}),
    (
        {"type": "admin.devices.revoke", "device_id": "phone", "admin_token": ADMIN},
        "admin.devices.revoke",
        {"admin_digest": token_digest(ADMIN), "device_id": "phone"},
    ),
    (
        {"type": "admin.token.rotate", "token": GOOD_TOKEN, "admin_token": ADMIN},
        "admin.token.rotate",
        {"admin_digest": token_digest(ADMIN), "token": GOOD_TOKEN},
    ),
]


@pytest.mark.parametrize(("frame", "cmd", "args"), VALID, ids=[v[0]["type"] for v in VALID])
def test_a_valid_frame_decodes_to_its_command_and_arguments(
    frame: Json, cmd: str, args: Json
) -> None:
    assert iris.decode(frame) == {"cmd": cmd, "args": args}


def test_ping_is_answered_locally_with_a_pong() -> None:
    decoded = iris.decode({"type": "ping"})
    assert decoded["local"]["type"] == "pong" and is_iso(decoded["local"]["ts"])


def test_the_admin_token_itself_never_reaches_the_bus() -> None:
    decoded = iris.decode({"type": "admin.devices.list", "admin_token": ADMIN})
    assert ADMIN not in json.dumps(decoded)


def test_a_search_query_is_cut_at_4096_characters() -> None:
    decoded = iris.decode({"type": "search", "query": "q" * 5000})
    assert decoded["args"]["query"] == "q" * 4096


# --------------------------------------------------------------------------- decode: invalid

INVALID: list[tuple[str, Json, str]] = [
    ("unknown type", {"type": "message.edit"}, "unknown_type"),
    ("missing type", {}, "unknown_type"),
    ("hello again", {"type": "hello", "token": "t"}, "bad_request"),
    ("send without chat", {**SEND, "chat_id": None}, "bad_request"),
    ("send chat too long", {**SEND, "chat_id": "c" * 129}, "bad_request"),
    ("send thread not a string", {**SEND, "thread_id": 5}, "bad_request"),
    ("send without client id", {k: v for k, v in SEND.items() if k != "client_id"}, "bad_request"),
    ("send blank text", {**SEND, "text": "   "}, "bad_request"),
    ("send without text", {k: v for k, v in SEND.items() if k != "text"}, "bad_request"),
    ("send blank text, no media", {**SEND, "text": "", "media_refs": []}, "bad_request"),
    (
        "send media with text not a string",
        {**SEND, "text": 5, "media_refs": ["a" * 32]},
        "bad_request",
    ),
    ("send text too large", {**SEND, "text": "x" * (MAX_TEXT_CHARS + 1)}, "too_large"),
    ("auto_thread a string", {**SEND, "auto_thread": "yes"}, "bad_request"),
    ("auto_thread an integer", {**SEND, "auto_thread": 1}, "bad_request"),
    ("auto_thread null", {**SEND, "auto_thread": None}, "bad_request"),
    ("sync negative cursor", {"type": "sync", "cursor": -1}, "bad_request"),
    ("sync cursor a string", {"type": "sync", "cursor": "5"}, "bad_request"),
    ("sync cursor a boolean", {"type": "sync", "cursor": True}, "bad_request"),
    ("sync cursor a float", {"type": "sync", "cursor": 1.5}, "bad_request"),
    # SQLite holds signed 64-bit integers: one more crashed a batch of hellos in the plugin.
    ("sync cursor past 2^63-1", {"type": "sync", "cursor": 2**63}, "bad_request"),
    ("ack cursor past 2^63-1", {"type": "ack", "cursor": 2**63}, "bad_request"),
    (
        "read receipt cursor past 2^63-1",
        {"type": "read.receipt", "message_id": "m1", "cursor": 2**63},
        "bad_request",
    ),
    ("ack cursor null", {"type": "ack", "cursor": None}, "bad_request"),
    ("receipt without message", {"type": "read.receipt", "cursor": 1}, "bad_request"),
    ("history limit a string", {"type": "history", "chat_id": CHAT, "limit": "10"}, "bad_request"),
    ("create unknown kind", {"type": "channel.create", "kind": "group"}, "bad_request"),
    ("create name too long", {"type": "channel.create", "name": "n" * 401}, "bad_request"),
    (
        "automation on a string",
        {"type": "channel.set_automation", "chat_id": CHAT, "on": "true"},
        "bad_request",
    ),
    ("threads on missing", {"type": "channel.set_threads", "chat_id": CHAT}, "bad_request"),
    ("search unknown scope", {"type": "search", "scope": "everything"}, "bad_request"),
    ("search query not a string", {"type": "search", "query": 5}, "bad_request"),
    ("picker value blank", {"type": "picker.select", "picker_id": "p", "value": ""}, "bad_request"),
    ("fcm without token", {"type": "fcm.register"}, "bad_request"),
    ("revoke without device", {"type": "admin.devices.revoke"}, "bad_request"),
    ("rotate token too short", {"type": "admin.token.rotate", "token": "a" * 31}, "bad_request"),
    (
        "rotate token bad characters",
        {"type": "admin.token.rotate", "token": "a" * 31 + "/"},
        "bad_request",
    ),
    (
        "rotate token not ascii",
        {"type": "admin.token.rotate", "token": "a" * 31 + "é"},
        "bad_request",
    ),
    ("admin token not a string", {"type": "admin.devices.list", "admin_token": 5}, "bad_request"),
]


@pytest.mark.parametrize(
    ("frame", "code"), [(v[1], v[2]) for v in INVALID], ids=[v[0] for v in INVALID]
)
def test_an_invalid_frame_is_rejected_with_the_right_code_and_its_request_id(
    frame: Json, code: str
) -> None:
    with pytest.raises(FrameRejected) as caught:
        iris.decode({**frame, "request_id": "q1"})
    assert caught.value.code == code
    assert caught.value.request_id == "q1"


# --------------------------------------------------------------------------- encode_event

TURN = a_turn()
BASE = {"chat_id": LANE[0], "thread_id": LANE[1]}


def test_run_accepted_is_run_started_with_lane_cursor_and_client_id() -> None:
    assert iris.encode_event(TURN["run.accepted"]) == {
        "type": "run.started",
        **BASE,
        "cursor": 1,
        "run_id": "r" * 32,
        "client_id": "cl-1",
    }


def test_message_start_is_an_assistant_message_start() -> None:
    assert iris.encode_event(TURN["message.start"]) == {
        "type": "message.start",
        **BASE,
        "cursor": 2,
        "run_id": "r" * 32,
        "message_id": "draft-" + "r" * 32,
        "role": "assistant",
    }


def test_a_cron_delivery_is_of_role_cron_from_its_start_to_its_message() -> None:
    start = iris.encode_event({**TURN["message.start"], "kind": "cron"})
    complete = iris.encode_event(
        {**TURN["message.complete"], "kind": "cron", "cron_job": {"id": "j1", "name": "n"}}
    )
    assert start is not None and start["role"] == "cron"
    assert complete is not None and (complete["role"], complete["kind"]) == ("cron", "cron")
    assert complete["cron_job"] == {"id": "j1", "name": "n"}


def test_message_delta_is_message_update_with_the_cumulative_text() -> None:
    assert iris.encode_event(TURN["message.delta"]) == {
        "type": "message.update",
        **BASE,
        "cursor": 3,
        "message_id": "draft-" + "r" * 32,
        "text": "Hello",
    }


def test_message_complete_is_a_message_with_role_kind_and_run() -> None:
    frame = iris.encode_event(TURN["message.complete"])
    assert frame is not None
    assert frame["type"] == "message"
    assert frame["role"] == "assistant" and frame["kind"] == "reply"
    assert frame["text"] == "Hello" and frame["cursor"] == 4
    assert frame["run_id"] == "r" * 32 and frame["client_id"] == "cl-1"
    assert is_iso(frame["ts"])
    assert "lane" not in frame and "conversation_id" not in frame


def test_the_users_echo_is_a_user_message_with_its_device_and_client_id() -> None:
    frame = iris.encode_event(a_user_echo())
    assert frame is not None
    assert (frame["type"], frame["role"], frame["kind"]) == ("message", "user", "user")
    assert frame["device_id"] == "phone" and frame["client_id"] == "cl-1"
    assert frame["cursor"] == 7


def test_a_notice_is_a_message_of_kind_notice() -> None:
    frame = iris.encode_event(a_notice())
    assert frame is not None and frame["kind"] == "notice" and "run_id" not in frame


def test_run_finished_carries_its_error_only_when_failed() -> None:
    ok = iris.encode_event(TURN["run.finished"])
    assert ok == {
        "type": "run.finished",
        **BASE,
        "cursor": 5,
        "run_id": "r" * 32,
        "status": "completed",
    }
    failed = iris.encode_event(a_turn("failed", "boom")["run.finished"])
    assert failed is not None and failed["error"] == "boom" and failed["status"] == "failed"


@pytest.mark.parametrize(
    ("status", "name"),
    [("running", "tool.start"), ("completed", "tool.end"), ("failed", "tool.end")],
)
def test_tool_events_become_tool_start_and_tool_end(status: str, name: str) -> None:
    frame = iris.encode_event(a_tool_event(status))
    assert frame is not None
    assert frame["type"] == name
    assert frame["tool_call_id"] == "t-1a2b3c4d5e6f" and frame["status"] == status
    assert frame["chat_id"] == LANE[0] and frame["cursor"] == 9
    assert "lane" not in frame and "conversation_id" not in frame


def test_typing_carries_the_lane_and_no_cursor() -> None:
    assert iris.encode_event(a_typing()) == {"type": "typing", **BASE, "on": True}


def test_channel_events_pass_through_with_their_entry_and_cursor() -> None:
    event = a_channel_event("channel.created", auto=True)
    frame = iris.encode_event(event)
    assert frame is not None
    assert frame["type"] == "channel.created"
    assert frame["entry"]["conversation_id"] == CID and frame["auto"] is True
    assert frame["cursor"] == 11
    assert "lane" not in frame and "conversation_id" not in frame


@pytest.mark.parametrize(
    "change",
    [
        {"type": "yolo.changed", "enabled": True, "scope": "conversation"},
        {"type": "model.changed", "model": "m", "provider": "p", "scope": "conversation"},
        {"type": "reasoning.changed", "effort": "high", "scope": "conversation"},
    ],
)
def test_a_conversations_preference_change_names_its_lane_and_conversation(change: Json) -> None:
    event = {**change, "conversation_id": CID, "lane": list(LANE), "cursor": 12}
    assert iris.encode_event(event) == {**change, **BASE, "conversation_id": CID, "cursor": 12}


def test_a_global_preference_change_names_no_lane() -> None:
    event = {"type": "model.changed", "model": "m", "provider": "p", "scope": "global", "cursor": 3}
    assert iris.encode_event(event) == event


@pytest.mark.parametrize("kind", ["conversation.updated", "user.message", "something.new"])
def test_events_iris_has_no_frame_for_encode_to_none(kind: str) -> None:
    assert iris.encode_event({"type": kind, "lane": ["a", None], "cursor": 1}) is None


# --------------------------------------------------------------------------- replies, errors


def test_an_error_frame_has_the_shared_shape() -> None:
    frame = iris.error_frame("not_found", "unknown chat", "q1")
    assert list(frame) == ["type", "request_id", "error", "ts"]
    assert frame["error"] == {"code": "not_found", "message": "unknown chat"}
    assert set(iris.error_frame("x", "y")) == {"type", "error", "ts"}


def test_an_error_reply_for_a_send_carries_the_client_id() -> None:
    reply = {"type": "error", "code": "run_active", "message": "busy", "client_id": "cl-1"}
    frame = iris.encode_reply(reply)
    assert frame is not None
    assert frame["client_id"] == "cl-1" and frame["error"]["code"] == "run_active"


def test_a_reply_of_no_canonical_shape_reaches_the_device_as_it_is() -> None:
    ack = {"type": "sync.ack", "from": 0, "head": 3, "count": 3, "gap": False}
    assert iris.encode_reply(ack) == ack


# --------------------------------------------------------------------------- property

FIELD_NAMES = [
    "chat_id",
    "thread_id",
    "text",
    "client_id",
    "auto_thread",
    "reply_to",
    "cursor",
    "message_id",
    "run_id",
    "limit",
    "before_message_id",
    "kind",
    "name",
    "parent_chat_id",
    "on",
    "query",
    "scope",
    "picker_id",
    "value",
    "token",
    "admin_token",
    "device_id",
    "request_id",
]
KNOWN_TYPES = sorted({v[1] for v in VALID}) + ["ping", "hello", "bogus", ""]

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80)
    | st.sampled_from(["channel", "thread", "all", "chat", CHAT, GOOD_TOKEN, "", " ", "a" * 600]),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def frames(draw: st.DrawFn) -> Json:
    frame = draw(
        st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), JSON_VALUES, max_size=8)
    )
    frame["type"] = draw(st.sampled_from(KNOWN_TYPES) | JSON_VALUES)
    return frame


@settings(max_examples=300, deadline=None)  # ~25 s of a shared core at 600
@given(frames())
def test_decode_raises_nothing_but_frame_rejected_for_any_json_object(frame: Json) -> None:
    try:
        decoded = iris.decode(frame)
    except FrameRejected as rejected:
        assert rejected.code in {"bad_request", "too_large", "unknown_type"}
        return
    assert ("local" in decoded) != ("cmd" in decoded)
    if "cmd" in decoded:
        json.dumps(decoded)  # what goes on the bus is JSON
