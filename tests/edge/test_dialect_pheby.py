"""edge.dialects.pheby: Pheby Protocol v1 frames <-> the canonical model, exactly per spec."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canonical.model import Json
from canonical.model.commands import PLUGIN_COMMANDS
from canonical.protocol import MAX_TEXT_CHARS, PHEBY_ERROR_CODES
from edge.dialects import detect
from edge.dialects.pheby import APPROVAL_CHOICES, REASONING_EFFORTS, PhebyDialect
from edge.errors import FrameRejected

from .dialect_events import (
    CID,
    a_channel_event,
    a_notice,
    a_tool_event,
    a_turn,
    a_typing,
    a_user_echo,
    an_entry,
)

pheby = PhebyDialect()


def is_iso(ts: Any) -> bool:
    return isinstance(ts, str) and datetime.fromisoformat(ts).tzinfo is not None


# --------------------------------------------------------------------------- decode: valid

VALID: list[tuple[Json, str, Json]] = [
    # A conversation is a lane named by its id: its commands are the channel commands.
    ({"type": "conversation.list"}, "channel.list", {"activity": True}),
    (
        {"type": "conversation.create"},
        "channel.create",
        {"kind": "channel", "name": "New chat", "parent_chat_id": None},
    ),
    (
        {"type": "conversation.create", "name": "Plans"},
        "channel.create",
        {"kind": "channel", "name": "Plans", "parent_chat_id": None},
    ),
    (
        {"type": "conversation.open", "conversation_id": CID},
        "history",
        {
            "target": {"conversation_id": CID},
            "limit": 200,
            "before_message_id": None,
            "view": "conversation",
        },
    ),
    (
        {
            "type": "conversation.open",
            "conversation_id": CID,
            "limit": 50,
            "before_message_id": "m12",
        },
        "history",
        {
            "target": {"conversation_id": CID},
            "limit": 50,
            "before_message_id": "m12",
            "view": "conversation",
        },
    ),
    (
        {"type": "conversation.rename", "conversation_id": CID, "name": "Renamed"},
        "channel.rename",
        {"target": {"conversation_id": CID}, "name": "Renamed"},
    ),
    (
        {"type": "conversation.delete", "conversation_id": CID},
        "channel.delete",
        {"target": {"conversation_id": CID}, "purge_history": True},
    ),
    (
        {
            "type": "chat.send",
            "conversation_id": CID,
            "text": "What's the weather?",
            "request_id": "r6",
        },
        "message.send",
        {
            "target": {"conversation_id": CID},
            "text": "What's the weather?",
            "attachment_ids": [],
            "client_id": None,
            "auto_thread": False,
            "reply_to": None,
        },
    ),
    (
        {
            "type": "chat.send",
            "conversation_id": CID,
            "text": "see",
            "attachment_ids": ["a1", "a2"],
        },
        "message.send",
        {
            "target": {"conversation_id": CID},
            "text": "see",
            "attachment_ids": ["a1", "a2"],
            "client_id": None,
            "auto_thread": False,
            "reply_to": None,
        },
    ),
    (
        {"type": "run.cancel", "conversation_id": CID, "run_id": "8c1f"},
        "run.cancel",
        {"target": {"conversation_id": CID}, "run_id": "8c1f"},
    ),
    (
        {"type": "run.cancel", "conversation_id": CID},
        "run.cancel",
        {"target": {"conversation_id": CID}, "run_id": None},
    ),
    (
        {"type": "approval.respond", "approval_id": "3d4e", "choice": "deny", "reason": "no"},
        "approval.respond",
        {"approval_id": "3d4e", "choice": "deny", "reason": "no"},
    ),
    (
        {"type": "clarify.respond", "clarify_id": "c1a2", "response": "production"},
        "clarify.respond",
        {"clarify_id": "c1a2", "response": "production"},
    ),
    ({"type": "yolo.current", "conversation_id": CID}, "yolo.current", {"conversation_id": CID}),
    (
        {"type": "yolo.set", "conversation_id": CID, "enabled": False},
        "yolo.set",
        {"conversation_id": CID, "enabled": False},
    ),
    ({"type": "models.list"}, "models.list", {"conversation_id": None}),
    (
        {"type": "models.current", "conversation_id": CID},
        "models.current",
        {"conversation_id": CID},
    ),
    (
        {"type": "model.set", "model": "anthropic/claude-sonnet-4", "provider": "anthropic"},
        "model.set",
        {"model": "anthropic/claude-sonnet-4", "provider": "anthropic", "conversation_id": None},
    ),
    ({"type": "reasoning.current"}, "reasoning.current", {"conversation_id": None}),
    (
        {"type": "reasoning.set", "effort": "high", "conversation_id": CID},
        "reasoning.set",
        {"effort": "high", "conversation_id": CID},
    ),
]


@pytest.mark.parametrize(("frame", "cmd", "args"), VALID, ids=[v[0]["type"] for v in VALID])
def test_a_valid_frame_decodes_to_its_command_and_arguments(
    frame: Json, cmd: str, args: Json
) -> None:
    assert pheby.decode(frame) == {"cmd": cmd, "args": args}


def test_every_spec_request_type_has_a_decoder() -> None:
    assert {v[0]["type"] for v in VALID} == {
        "conversation.list",
        "conversation.create",
        "conversation.open",
        "conversation.rename",
        "conversation.delete",
        "chat.send",
        "run.cancel",
        "approval.respond",
        "clarify.respond",
        "yolo.current",
        "yolo.set",
        "models.list",
        "models.current",
        "model.set",
        "reasoning.current",
        "reasoning.set",
    }


def test_ping_is_answered_locally_with_a_pong() -> None:
    decoded = pheby.decode({"type": "ping", "request_id": "r1"})
    assert set(decoded) == {"local"}
    assert decoded["local"]["type"] == "pong"
    assert set(decoded["local"]) == {"type", "ts"}
    assert is_iso(decoded["local"]["ts"])


@pytest.mark.parametrize("choice", APPROVAL_CHOICES)
def test_every_approval_choice_is_accepted(choice: str) -> None:
    frame = {"type": "approval.respond", "approval_id": "a", "choice": choice}
    assert pheby.decode(frame)["args"]["choice"] == choice


@pytest.mark.parametrize("effort", REASONING_EFFORTS)
def test_every_reasoning_effort_is_accepted(effort: str) -> None:
    assert pheby.decode({"type": "reasoning.set", "effort": effort})["args"]["effort"] == effort


@pytest.mark.parametrize(("limit", "expected"), [(1, 1), (500, 500), (501, 500), (0, 1), (-5, 1)])
def test_the_history_limit_is_clamped_to_1_through_500(limit: int, expected: int) -> None:
    frame = {"type": "conversation.open", "conversation_id": CID, "limit": limit}
    assert pheby.decode(frame)["args"]["limit"] == expected


def test_text_of_exactly_64000_characters_is_accepted() -> None:
    text = "x" * MAX_TEXT_CHARS
    frame = {"type": "chat.send", "conversation_id": CID, "text": text}
    assert pheby.decode(frame)["args"]["text"] == text


def test_ten_distinct_attachment_ids_are_accepted() -> None:
    ids = [f"a{n}" for n in range(10)]
    frame = {"type": "chat.send", "conversation_id": CID, "text": "t", "attachment_ids": ids}
    assert pheby.decode(frame)["args"]["attachment_ids"] == ids


# --------------------------------------------------------------------------- decode: invalid

SEND = {"type": "chat.send", "conversation_id": CID, "text": "hi", "request_id": "r9"}

INVALID: list[tuple[str, Json, str]] = [
    ("missing type", {"request_id": "r9"}, "unknown_type"),
    ("unknown type", {"type": "chat.edit", "request_id": "r9"}, "unknown_type"),
    ("type not a string", {"type": 5, "request_id": "r9"}, "unknown_type"),
    ("type a list", {"type": ["chat.send"], "request_id": "r9"}, "unknown_type"),
    (
        "hello again",
        {"type": "hello", "secret": "x", "protocol_version": 1, "request_id": "r9"},
        "bad_request",
    ),
    ("no conversation", {**SEND, "conversation_id": None}, "bad_request"),
    ("blank conversation", {**SEND, "conversation_id": "  "}, "bad_request"),
    ("conversation not a string", {**SEND, "conversation_id": 12}, "bad_request"),
    ("conversation too long", {**SEND, "conversation_id": "c" * 65}, "bad_request"),
    ("text missing", {k: v for k, v in SEND.items() if k != "text"}, "bad_request"),
    ("text not a string", {**SEND, "text": ["hi"]}, "bad_request"),
    ("text blank", {**SEND, "text": " \n\t"}, "bad_request"),
    ("text too large", {**SEND, "text": "x" * (MAX_TEXT_CHARS + 1)}, "too_large"),
    ("attachments not a list", {**SEND, "attachment_ids": "a1"}, "bad_request"),
    ("attachment id not a string", {**SEND, "attachment_ids": [1]}, "bad_request"),
    ("attachment id empty", {**SEND, "attachment_ids": [""]}, "bad_request"),
    ("attachment id too long", {**SEND, "attachment_ids": ["a" * 65]}, "bad_request"),
    ("eleven attachments", {**SEND, "attachment_ids": [f"a{n}" for n in range(11)]}, "bad_request"),
    ("repeated attachment", {**SEND, "attachment_ids": ["a1", "a2", "a1"]}, "bad_request"),
    (
        "limit a string",
        {"type": "conversation.open", "conversation_id": CID, "limit": "5", "request_id": "r9"},
        "bad_request",
    ),
    (
        "limit a boolean",
        {"type": "conversation.open", "conversation_id": CID, "limit": True, "request_id": "r9"},
        "bad_request",
    ),
    (
        "limit a float",
        {"type": "conversation.open", "conversation_id": CID, "limit": 5.0, "request_id": "r9"},
        "bad_request",
    ),
    (
        "rename without name",
        {"type": "conversation.rename", "conversation_id": CID, "request_id": "r9"},
        "bad_request",
    ),
    (
        "rename name too long",
        {
            "type": "conversation.rename",
            "conversation_id": CID,
            "name": "n" * 101,
            "request_id": "r9",
        },
        "bad_request",
    ),
    (
        "create name not a string",
        {"type": "conversation.create", "name": 3, "request_id": "r9"},
        "bad_request",
    ),
    (
        "yolo enabled a string",
        {"type": "yolo.set", "conversation_id": CID, "enabled": "true", "request_id": "r9"},
        "bad_request",
    ),
    (
        "yolo enabled an integer",
        {"type": "yolo.set", "conversation_id": CID, "enabled": 1, "request_id": "r9"},
        "bad_request",
    ),
    (
        "yolo enabled missing",
        {"type": "yolo.set", "conversation_id": CID, "request_id": "r9"},
        "bad_request",
    ),
    (
        "approval unknown choice",
        {"type": "approval.respond", "approval_id": "a", "choice": "maybe", "request_id": "r9"},
        "bad_request",
    ),
    (
        "approval choice missing",
        {"type": "approval.respond", "approval_id": "a", "request_id": "r9"},
        "bad_request",
    ),
    (
        "approval without id",
        {"type": "approval.respond", "choice": "once", "request_id": "r9"},
        "bad_request",
    ),
    (
        "approval reason too long",
        {
            "type": "approval.respond",
            "approval_id": "a",
            "choice": "deny",
            "reason": "r" * 2001,
            "request_id": "r9",
        },
        "bad_request",
    ),
    (
        "clarify blank response",
        {"type": "clarify.respond", "clarify_id": "c", "response": "", "request_id": "r9"},
        "bad_request",
    ),
    (
        "clarify response too large",
        {
            "type": "clarify.respond",
            "clarify_id": "c",
            "response": "x" * (MAX_TEXT_CHARS + 1),
            "request_id": "r9",
        },
        "too_large",
    ),
    ("model missing", {"type": "model.set", "request_id": "r9"}, "bad_request"),
    # Hermes parses "/model <name> --flags": a space or a leading "-" would add flags.
    (
        "model with a flag",
        {"type": "model.set", "model": "gpt-4 --session", "request_id": "r9"},
        "bad_request",
    ),
    (
        "model that is a flag",
        {"type": "model.set", "model": "--global", "request_id": "r9"},
        "bad_request",
    ),
    (
        "provider with a space",
        {"type": "model.set", "model": "m", "provider": "a b", "request_id": "r9"},
        "bad_request",
    ),
    # "" is not "absent" (which means the global scope).
    (
        "model for conversation ''",
        {"type": "model.set", "model": "m", "conversation_id": "", "request_id": "r9"},
        "bad_request",
    ),
    (
        "reasoning for conversation ''",
        {"type": "reasoning.set", "effort": "low", "conversation_id": " ", "request_id": "r9"},
        "bad_request",
    ),
    (
        "models of conversation ''",
        {"type": "models.current", "conversation_id": "", "request_id": "r9"},
        "bad_request",
    ),
    (
        "reasoning unknown effort",
        {"type": "reasoning.set", "effort": "turbo", "request_id": "r9"},
        "bad_request",
    ),
    ("reasoning effort missing", {"type": "reasoning.set", "request_id": "r9"}, "bad_request"),
    (
        "delete without conversation",
        {"type": "conversation.delete", "request_id": "r9"},
        "bad_request",
    ),
    (
        "cancel run id not a string",
        {"type": "run.cancel", "conversation_id": CID, "run_id": 7, "request_id": "r9"},
        "bad_request",
    ),
]


@pytest.mark.parametrize(
    ("frame", "code"), [(v[1], v[2]) for v in INVALID], ids=[v[0] for v in INVALID]
)
def test_an_invalid_frame_is_rejected_with_the_right_code_and_its_request_id(
    frame: Json, code: str
) -> None:
    with pytest.raises(FrameRejected) as caught:
        pheby.decode(frame)
    assert caught.value.code == code
    assert caught.value.code in PHEBY_ERROR_CODES
    assert caught.value.request_id == "r9"
    assert caught.value.message


def test_an_unknown_type_is_quoted_but_truncated_in_the_message() -> None:
    with pytest.raises(FrameRejected) as caught:
        pheby.decode({"type": "x" * 500})
    assert len(caught.value.message) < 100


# --------------------------------------------------------------------------- encode_event

TURN = a_turn()


def test_run_accepted_carries_exactly_conversation_run_and_request_id() -> None:
    frame = pheby.encode_event(TURN["run.accepted"])
    assert frame == {
        "type": "run.accepted",
        "conversation_id": CID,
        "run_id": "r" * 32,
        "request_id": "req-1",
    }


def test_run_accepted_without_a_request_id_has_no_request_id_field() -> None:
    event = {k: v for k, v in TURN["run.accepted"].items() if k != "request_id"}
    frame = pheby.encode_event(event)
    assert frame is not None and set(frame) == {"type", "conversation_id", "run_id"}


def test_message_start_carries_exactly_the_spec_fields() -> None:
    assert pheby.encode_event(TURN["message.start"]) == {
        "type": "message.start",
        "conversation_id": CID,
        "run_id": "r" * 32,
        "message_id": "draft-" + "r" * 32,
    }


def test_message_delta_carries_cumulative_text_and_ts() -> None:
    frame = pheby.encode_event(TURN["message.delta"])
    assert frame is not None
    assert set(frame) == {"type", "conversation_id", "message_id", "text", "ts"}
    assert frame["text"] == "Hello"
    assert frame["message_id"] == "draft-" + "r" * 32
    assert is_iso(frame["ts"])


def test_message_complete_carries_exactly_the_spec_fields() -> None:
    frame = pheby.encode_event(TURN["message.complete"])
    assert frame is not None
    assert set(frame) == {"type", "conversation_id", "message_id", "text", "ts"}
    assert frame["text"] == "Hello"
    assert frame["conversation_id"] == CID


def test_a_notice_is_a_message_complete_of_kind_notice() -> None:
    frame = pheby.encode_event(a_notice())
    assert frame is not None
    assert set(frame) == {"type", "conversation_id", "message_id", "text", "ts", "kind"}
    assert frame["kind"] == "notice"
    assert frame["text"] == "⚡ Gateway restarting"


def test_the_users_own_message_echo_is_not_a_pheby_frame() -> None:
    assert pheby.encode_event(a_user_echo()) is None


@pytest.mark.parametrize("status", ["completed", "cancelled"])
def test_run_finished_without_failure_has_no_error(status: str) -> None:
    frame = pheby.encode_event(a_turn(status)["run.finished"])
    assert frame == {
        "type": "run.finished",
        "conversation_id": CID,
        "run_id": "r" * 32,
        "status": status,
    }


def test_a_failed_run_finished_carries_its_error() -> None:
    frame = pheby.encode_event(a_turn("failed", "model unreachable")["run.finished"])
    assert frame == {
        "type": "run.finished",
        "conversation_id": CID,
        "run_id": "r" * 32,
        "status": "failed",
        "error": "model unreachable",
    }


def test_a_failed_run_finished_without_an_error_text_still_has_one() -> None:
    event = {**a_turn("failed")["run.finished"]}
    event.pop("error", None)
    frame = pheby.encode_event(event)
    assert frame is not None and frame["error"]


@pytest.mark.parametrize(
    ("status", "fields"),
    [
        ("running", {"args_redacted"}),
        ("completed", {"duration_ms"}),
        ("failed", {"duration_ms", "error"}),
    ],
)
def test_a_tool_event_carries_the_spec_fields_and_no_routing_internals(
    status: str, fields: set[str]
) -> None:
    frame = pheby.encode_event(a_tool_event(status))
    assert frame is not None
    base = {"type", "conversation_id", "run_id", "tool_call_id", "tool_name", "status", "ts"}
    assert set(frame) == base | fields
    assert frame["status"] == status


def test_typing_is_not_a_pheby_frame() -> None:
    assert pheby.encode_event(a_typing()) is None


def test_a_created_channel_is_announced_as_conversation_updated() -> None:
    frame = pheby.encode_event(a_channel_event("channel.created", auto=True))
    assert frame == {"type": "conversation.updated", "conversation_id": CID, "name": "Project X"}


def test_a_renamed_channel_is_announced_as_conversation_renamed() -> None:
    entry = an_entry(name="Renamed")
    frame = pheby.encode_event(a_channel_event("channel.renamed", entry))
    assert frame == {"type": "conversation.renamed", "conversation_id": CID, "name": "Renamed"}


def test_a_deleted_channel_is_announced_as_conversation_deleted() -> None:
    frame = pheby.encode_event(a_channel_event("channel.deleted"))
    assert frame == {"type": "conversation.deleted", "conversation_id": CID}


@pytest.mark.parametrize("kind", ["channel.created", "channel.renamed"])
def test_an_archived_channel_is_not_announced(kind: str) -> None:
    assert pheby.encode_event(a_channel_event(kind, an_entry(archived=True))) is None


def test_approval_requests_pass_through_without_routing_internals() -> None:
    event = {
        "type": "approval.request",
        "lane": ["android:default", None],
        "chat_id": "android:default",
        "thread_id": None,
        "cursor": 4,
        "approval_id": "3d4e",
        "conversation_id": CID,
        "choices": list(APPROVAL_CHOICES),
    }
    frame = pheby.encode_event(event)
    assert frame == {
        "type": "approval.request",
        "approval_id": "3d4e",
        "conversation_id": CID,
        "choices": list(APPROVAL_CHOICES),
    }


@pytest.mark.parametrize(
    "change",
    [
        {"type": "model.changed", "model": "m", "provider": "p", "scope": "conversation"},
        {"type": "reasoning.changed", "effort": "high", "scope": "conversation"},
    ],
)
def test_a_conversations_model_or_reasoning_change_names_the_conversation(change: Json) -> None:
    event = {**change, "conversation_id": CID, "lane": ["android:default", None], "cursor": 5}
    assert pheby.encode_event(event) == {**change, "conversation_id": CID}


def test_a_global_model_change_names_no_conversation() -> None:
    event = {"type": "model.changed", "model": "m", "provider": "p", "scope": "global", "cursor": 5}
    assert pheby.encode_event(event) == {
        "type": "model.changed",
        "model": "m",
        "provider": "p",
        "scope": "global",
    }


@pytest.mark.parametrize("kind", ["user.message", "picker.request", "media.ready", "something.new"])
def test_events_pheby_has_no_frame_for_encode_to_none(kind: str) -> None:
    assert pheby.encode_event({"type": kind, "cursor": 3, "lane": ["a", None]}) is None


def test_no_pheby_event_frame_leaks_cursor_or_lane() -> None:
    events = [
        *a_turn().values(),
        a_notice(),
        a_tool_event(),
        a_channel_event("channel.created"),
        a_channel_event("channel.deleted"),
    ]
    for event in events:
        frame = pheby.encode_event(event)
        assert frame is not None
        assert not {"cursor", "lane", "chat_id", "thread_id"} & set(frame), frame


# --------------------------------------------------------------------------- replies, errors


def test_an_error_frame_with_a_request_id_has_the_spec_shape() -> None:
    frame = pheby.error_frame("conversation_not_found", "Conversation not found", "r1")
    assert list(frame) == ["type", "request_id", "error", "ts"]
    assert frame["type"] == "error"
    assert frame["request_id"] == "r1"
    assert frame["error"] == {"code": "conversation_not_found", "message": "Conversation not found"}
    assert is_iso(frame["ts"])


def test_an_error_frame_without_a_request_id_has_no_request_id_field() -> None:
    frame = pheby.error_frame("rate_limited", "slow down")
    assert set(frame) == {"type", "error", "ts"}


def test_a_canonical_error_reply_is_rendered_as_an_error_frame() -> None:
    reply = {"type": "error", "code": "run_active", "message": "busy", "request_id": "r6"}
    frame = pheby.encode_reply(reply)
    assert frame is not None
    assert frame["error"] == {"code": "run_active", "message": "busy"}
    assert frame["request_id"] == "r6"


def test_a_reply_of_no_canonical_shape_reaches_the_device_as_it_is() -> None:
    ready = {"type": "yolo.snapshot", "enabled": True, "request_id": "r1"}
    assert pheby.encode_reply(ready) == ready


def test_the_live_history_view_has_no_pheby_frame() -> None:
    reply = {"type": "history", "chat_id": "c", "thread_id": None, "messages": []}
    assert pheby.encode_reply({**reply, "has_more": False, "request_id": "r1"}) is None


# --------------------------------------------------------------------------- detect


@pytest.mark.parametrize(
    ("hello", "dialect"),
    [
        ({"type": "hello", "secret": "s", "protocol_version": 1}, "pheby"),
        ({"type": "hello", "secret": "s"}, "pheby"),
        ({"type": "hello", "protocol_version": 1}, "pheby"),
        ({"type": "hello", "token": "t", "device_id": "d"}, "iris"),
        ({"type": "hello", "device_id": "d"}, "iris"),
        ({"type": "hello", "token": "t"}, "iris"),
        ({"type": "hello"}, None),
        ({"type": "ping", "secret": "s"}, None),
        ({}, None),
    ],
)
def test_detect_tells_the_dialect_from_the_first_frame(hello: Json, dialect: str | None) -> None:
    assert detect(hello) == dialect


# --------------------------------------------------------------------------- property

FIELD_NAMES = [
    "conversation_id",
    "text",
    "attachment_ids",
    "limit",
    "before_message_id",
    "name",
    "run_id",
    "approval_id",
    "choice",
    "reason",
    "clarify_id",
    "response",
    "enabled",
    "model",
    "provider",
    "effort",
    "request_id",
    "secret",
    "protocol_version",
]
KNOWN_TYPES = [v[1] for v in VALID] + ["ping", "hello", "pong", "error", "bogus", ""]

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80)
    | st.sampled_from([*APPROVAL_CHOICES, *REASONING_EFFORTS, "", " ", CID, "a1", "x" * 300]),
    lambda inner: (
        st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def frames(draw: st.DrawFn, names: list[str], types: list[str]) -> Json:
    frame = draw(
        st.dictionaries(st.sampled_from(names) | st.text(max_size=8), JSON_VALUES, max_size=8)
    )
    frame["type"] = draw(st.sampled_from(types) | JSON_VALUES)
    return frame


@settings(max_examples=300, deadline=None)  # ~25 s of a shared core at 600
@given(frames(FIELD_NAMES, KNOWN_TYPES))
def test_decode_raises_nothing_but_frame_rejected_for_any_json_object(frame: Json) -> None:
    try:
        decoded = pheby.decode(frame)
    except FrameRejected as rejected:
        assert rejected.code in PHEBY_ERROR_CODES
        return
    assert ("local" in decoded) != ("cmd" in decoded)
    if "cmd" in decoded:
        assert decoded["cmd"] in {spec.name for spec in PLUGIN_COMMANDS}
        assert isinstance(decoded["args"], dict)
