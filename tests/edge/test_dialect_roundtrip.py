"""Both codecs against the canonical model: a canonical command a dialect can say, encoded
to that dialect's frame, decodes back to the same command; canonical events and replies
keep what their frames show.

Not invertible, by design (so not generated here):
- pheby ``conversation.create`` without a name is ``channel.create`` named "New chat";
- a limit out of range is clamped (pheby history 1..500, iris 1..500, search 1..200);
- iris blank text beside files is no caption (""), and admin frames carry the admin
  token's digest, not the token;
- a dialect cannot say what it has no words for: pheby names lanes only by conversation
  id and has no client ids, threads or channel settings; iris names lanes only by chat
  and thread and never asks for a conversation's own view of history.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canonical.model import Json
from canonical.model.commands import EDGE_COMMANDS, PLUGIN_COMMANDS
from canonical.protocol import MAX_CURSOR, MAX_HISTORY
from edge.dialects import iris as iris_codec
from edge.dialects import pheby as pheby_codec
from edge.dialects.iris import IrisDialect
from edge.dialects.pheby import APPROVAL_CHOICES, REASONING_EFFORTS, PhebyDialect

from .dialect_events import CID, a_turn

pheby = PhebyDialect()
iris = IrisDialect()

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def ids(max_size: int = 64) -> st.SearchStrategy[str]:
    return st.text(ALNUM + "-_:.", min_size=1, max_size=max_size).filter(str.strip)


def texts(max_size: int = 300) -> st.SearchStrategy[str]:
    return st.text(min_size=1, max_size=max_size).filter(str.strip)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def command(cmd: str, **args: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, Json]]:
    return st.fixed_dictionaries(args).map(lambda built: (cmd, built))


CONVERSATION = st.fixed_dictionaries({"conversation_id": ids()})
LANE = st.fixed_dictionaries({"chat_id": ids(128), "thread_id": maybe(ids())})
UPLOADS = st.lists(ids(), max_size=10, unique=True)
TOKEN = st.text(ALNUM + "/._", min_size=1, max_size=60)  # a model or provider name

PHEBY_COMMANDS = st.one_of(
    command("channel.list", activity=st.just(True)),
    command(
        "channel.create",
        kind=st.just("channel"),
        name=st.text(max_size=100).filter(str.strip),
        parent_chat_id=st.none(),
    ),
    command(
        "history",
        target=CONVERSATION,
        limit=st.integers(1, MAX_HISTORY),
        before_message_id=maybe(ids()),
        view=st.just("conversation"),
    ),
    command("channel.rename", target=CONVERSATION, name=st.text(max_size=100).filter(str.strip)),
    command("channel.delete", target=CONVERSATION, purge_history=st.just(True)),
    command(
        "message.send",
        target=CONVERSATION,
        text=texts(),
        attachment_ids=UPLOADS,
        client_id=st.none(),
        auto_thread=st.just(False),
        reply_to=st.none(),
    ),
    command("run.cancel", target=CONVERSATION, run_id=maybe(ids())),
    command(
        "approval.respond",
        approval_id=ids(),
        choice=st.sampled_from(APPROVAL_CHOICES),
        reason=maybe(st.text(max_size=2000)),
    ),
    command("clarify.respond", clarify_id=ids(), response=texts()),
    command("yolo.current", conversation_id=ids()),
    command("yolo.set", conversation_id=ids(), enabled=st.booleans()),
    command("models.list", conversation_id=maybe(ids())),
    command("models.current", conversation_id=maybe(ids())),
    command("reasoning.current", conversation_id=maybe(ids())),
    command(
        "model.set",
        model=TOKEN,
        provider=maybe(TOKEN),
        conversation_id=maybe(ids()),
    ),
    command(
        "reasoning.set", effort=st.sampled_from(REASONING_EFFORTS), conversation_id=maybe(ids())
    ),
)

CURSORS = st.integers(0, MAX_CURSOR)
IRIS_COMMANDS = st.one_of(
    command(
        "message.send",
        target=LANE,
        text=texts(),
        attachment_ids=UPLOADS,
        client_id=ids(128),
        auto_thread=st.booleans(),
        reply_to=maybe(ids(160)),
    ),
    command("sync", cursor=CURSORS),
    command("ack", cursor=CURSORS),
    command("read.receipt", message_id=ids(160), cursor=CURSORS),
    command("run.cancel", target=LANE, run_id=maybe(ids())),
    command(
        "history",
        target=LANE,
        limit=st.integers(1, 500),
        before_message_id=maybe(ids(160)),
        view=st.just("live"),
    ),
    command("channel.list", activity=st.just(False)),
    command(
        "channel.create",
        kind=st.sampled_from(["channel", "thread"]),
        name=maybe(st.text(max_size=400)),
        parent_chat_id=maybe(ids(128)),
    ),
    command("channel.rename", target=LANE, name=st.text(max_size=400)),
    command("channel.delete", target=LANE, purge_history=st.just(False)),
    command("channel.set_default", chat_id=ids(128)),
    command("channel.set_automation", chat_id=ids(128), on=st.booleans()),
    command("channel.set_threads", chat_id=ids(128), on=st.booleans()),
    command(
        "search",
        query=st.text(max_size=300),
        scope=st.sampled_from(["all", "chat"]),
        chat_id=maybe(ids(128)),
        thread_id=maybe(ids()),
        limit=st.integers(1, 200),
    ),
    command("picker.select", picker_id=ids(), value=ids(2000)),
    command("fcm.register", token=ids(4096)),
)


@settings(max_examples=400, deadline=None)
@given(PHEBY_COMMANDS)
def test_a_canonical_command_pheby_can_say_comes_back_from_its_pheby_frame(
    cmd_args: tuple[str, Json],
) -> None:
    cmd, args = cmd_args
    frame = pheby.encode_command(cmd, args)
    assert frame is not None
    assert pheby.decode(frame) == {"cmd": cmd, "args": args}


@settings(max_examples=400, deadline=None)
@given(IRIS_COMMANDS)
def test_a_canonical_command_iris_can_say_comes_back_from_its_iris_frame(
    cmd_args: tuple[str, Json],
) -> None:
    cmd, args = cmd_args
    frame = iris.encode_command(cmd, args)
    assert frame is not None
    assert iris.decode(frame) == {"cmd": cmd, "args": args}


@settings(max_examples=100, deadline=None)
@given(PHEBY_COMMANDS.filter(lambda c: "target" in c[1]))
def test_a_lane_named_by_its_conversation_has_no_iris_frame(cmd_args: tuple[str, Json]) -> None:
    assert iris.encode_command(*cmd_args) is None


@settings(max_examples=100, deadline=None)
@given(IRIS_COMMANDS.filter(lambda c: "target" in c[1]))
def test_a_lane_named_by_chat_and_thread_has_no_pheby_frame(cmd_args: tuple[str, Json]) -> None:
    assert pheby.encode_command(*cmd_args) is None


@pytest.mark.parametrize("codec", [pheby_codec, iris_codec], ids=["pheby", "iris"])
def test_every_frame_type_decodes_to_a_command_the_plugin_or_the_edge_carries_out(
    codec: Any,
) -> None:
    known = {spec.name for spec in PLUGIN_COMMANDS} | EDGE_COMMANDS
    assert {name for name, _ in codec._DECODERS.values()} <= known


def test_the_two_dialects_sends_and_conversations_are_one_canonical_set() -> None:
    assert pheby_codec._DECODERS["chat.send"][0] == iris_codec._DECODERS["message.send"][0]
    for pheby_type, iris_type in [
        ("conversation.list", "channel.list"),
        ("conversation.create", "channel.create"),
        ("conversation.rename", "channel.rename"),
        ("conversation.delete", "channel.delete"),
        ("conversation.open", "history"),
        ("run.cancel", "run.cancel"),
    ]:
        assert pheby_codec._DECODERS[pheby_type][0] == iris_codec._DECODERS[iris_type][0]


# --------------------------------------------------------------------------- events

TEXTS = st.text(min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, cursor=st.integers(1, MAX_CURSOR), status=st.sampled_from(["completed"]))
def test_a_runs_events_keep_their_ids_and_text_in_both_dialects(
    text: str, cursor: int, status: str
) -> None:
    for kind, event in a_turn(status).items():
        event = {**event, "cursor": cursor}
        if "text" in event:
            event["text"] = event["reply"] = text
        on_pheby = pheby.encode_event(event)
        on_iris = iris.encode_event(event)
        assert on_pheby is not None and on_iris is not None, kind
        assert on_pheby["conversation_id"] == CID
        assert (on_iris["chat_id"], on_iris["thread_id"]) == tuple(event["lane"])
        assert on_iris["cursor"] == cursor
        for key in ("run_id", "message_id", "text"):
            if key in on_pheby:
                assert on_pheby[key] == event[key]
            if key in on_iris:
                assert on_iris[key] == event[key]


# --------------------------------------------------------------------------- replies


def accepted(*, announced: bool, request_id: Any = "r1", client_id: str | None = None) -> Json:
    return {
        "type": "send.accepted",
        "conversation_id": CID,
        "chat_id": "android:default",
        "thread_id": None,
        "run_id": "9" * 32,
        "client_id": client_id,
        "request_id": request_id,
        "announced": announced,
    }


def test_a_send_announced_by_its_run_accepted_event_needs_no_pheby_reply() -> None:
    assert pheby.encode_reply(accepted(announced=True)) is None


def test_a_send_taken_before_is_answered_on_pheby_with_its_run() -> None:
    assert pheby.encode_reply(accepted(announced=False)) == {
        "type": "run.accepted",
        "conversation_id": CID,
        "run_id": "9" * 32,
        "request_id": "r1",
    }


@pytest.mark.parametrize("announced", [True, False])
def test_every_accepted_send_is_acknowledged_on_iris(announced: bool) -> None:
    ack = iris.encode_reply(accepted(announced=announced, request_id=None, client_id="cl-1"))
    assert ack == {
        "type": "message.ack",
        "conversation_id": CID,
        "chat_id": "android:default",
        "thread_id": None,
        "run_id": "9" * 32,
        "client_id": "cl-1",
    }


ENTRY = {"conversation_id": CID, "name": "Trips", "chat_id": "android:chan_1", "thread_id": None}


@pytest.mark.parametrize(
    ("op", "frame"),
    [
        ("channel.create", {"type": "conversation.created", "name": "Trips"}),
        ("channel.rename", {"type": "conversation.renamed", "name": "Trips"}),
        ("channel.delete", {"type": "conversation.deleted"}),
    ],
)
def test_a_channel_result_is_the_pheby_answer_to_its_conversation_command(
    op: str, frame: Json
) -> None:
    reply = {"type": "result", "op": op, "request_id": "r2", "entry": ENTRY}
    assert pheby.encode_reply(reply) == {**frame, "conversation_id": CID, "request_id": "r2"}
    assert iris.encode_reply(reply) == reply


def test_a_channel_list_with_activity_is_the_pheby_conversation_snapshot() -> None:
    channel = {**ENTRY, "session_id": "s1", "last_active": 1.5, "cron_jobs": []}
    reply = {"type": "channel.list", "request_id": "r3", "channels": [channel]}
    assert pheby.encode_reply(reply) == {
        "type": "conversation.snapshot",
        "request_id": "r3",
        "conversations": [
            {
                "conversation_id": CID,
                "name": "Trips",
                "session_id": "s1",
                "last_active": 1.5,
                "source": "hermes",
            }
        ],
    }


def test_the_conversation_view_of_history_is_pheby_conversation_history() -> None:
    state = {
        "conversation_id": CID,
        "attachments": [],
        "run": None,
        "tools": [],
        "approvals": [],
        "clarifications": [],
    }
    page = {"messages": [{"message_id": "m1"}], "has_more": False}
    reply = {
        "type": "history",
        "request_id": "r4",
        "chat_id": "android:default",
        "thread_id": None,
        **page,
        "conversation": state,
    }
    assert pheby.encode_reply(reply) == {
        "type": "conversation.history",
        "request_id": "r4",
        **page,
        **state,
    }
    assert iris.encode_reply(reply) == {k: v for k, v in reply.items() if k != "conversation"}


@pytest.mark.parametrize(
    ("code", "on_pheby"),
    [("not_found", "conversation_not_found"), ("archived", "conversation_not_found")]
    + [("unsupported", "bad_request"), ("bad_request", "bad_request")],
)
def test_the_channel_stores_refusals_are_named_as_pheby_names_them(
    code: str, on_pheby: str
) -> None:
    reply = {"type": "error", "code": code, "message": "no", "subject": "channel"}
    frame = pheby.encode_reply(reply)
    assert frame is not None and frame["error"]["code"] == on_pheby
    on_iris = iris.encode_reply(reply)
    assert on_iris is not None and on_iris["error"]["code"] == code


def test_a_reply_to_a_request_without_a_request_id_carries_none() -> None:
    for reply in (
        {"type": "error", "code": "not_found", "message": "no", "request_id": None},
        {"type": "channel.list", "request_id": None, "channels": []},
        {"type": "result", "op": "channel.rename", "request_id": None, "entry": ENTRY},
    ):
        for dialect in (pheby, iris):
            frame = dialect.encode_reply(dict(reply))
            assert frame is not None and "request_id" not in frame, (dialect, frame)
