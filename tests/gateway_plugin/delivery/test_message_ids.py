"""Naming transcript messages with the ids devices saw live (gateway_plugin.delivery.message_ids)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from canonical.model import Json
from gateway_plugin.delivery.message_ids import Naming, SentMessage, assign, text_digest


def _sent(message_id: str, run_id: str | None, text: str, created: float) -> SentMessage:
    return SentMessage(message_id, run_id, created, len(text), text_digest(text))


def _row(row: int, role: str, text: str, at: float) -> Json:
    return {"message_id": f"m{row}", "role": role, "text": text, "at": at, "rows": [row]}


def test_each_user_row_is_its_send_and_the_reply_after_it_is_its_run() -> None:
    messages = [
        _row(1, "user", "hi", 100.0),
        _row(2, "assistant", "hello", 101.0),
        _row(5, "user", "more", 110.0),
        _row(6, "assistant", "sure", 111.0),
    ]
    sends = [_sent("u-a", "r1", "hi", 99.5), _sent("u-b", "r2", "more", 109.0)]
    assert [m["message_id"] for m in assign(messages, sends)] == [
        "u-a",
        "draft-r1",
        "u-b",
        "draft-r2",
    ]


def test_rows_no_send_accounts_for_keep_their_transcript_id() -> None:
    messages = [
        _row(1, "user", "before the record existed", 10.0),
        _row(2, "assistant", "old reply", 11.0),
        _row(3, "user", "hi", 100.0),
        _row(4, "assistant", "hello", 101.0),
    ]
    # A slash command's send and a send Hermes never stored are skipped over.
    sends = [_sent("u-lost", "r0", "never stored", 90.0), _sent("u-a", "r1", "hi", 99.0)]
    assert [m["message_id"] for m in assign(messages, sends)] == ["m1", "m2", "u-a", "draft-r1"]


def test_inlined_files_before_the_users_text_still_name_the_send() -> None:
    stored = "[The user sent notes.md]\n\nsummarise it"
    messages = [_row(7, "user", stored, 50.0), _row(8, "assistant", "done", 51.0)]
    assert [
        m["message_id"] for m in assign(messages, [_sent("u-f", "r9", "summarise it", 49.0)])
    ] == [
        "u-f",
        "draft-r9",
    ]


def test_the_same_text_sent_twice_names_each_row_once_in_order() -> None:
    messages = [_row(1, "user", "again", 10.0), _row(3, "user", "again", 20.0)]
    sends = [_sent("u-1", None, "again", 9.0), _sent("u-2", None, "again", 19.0)]
    assert [m["message_id"] for m in assign(messages, sends)] == ["u-1", "u-2"]


def test_a_row_stored_before_a_send_is_not_that_send() -> None:
    # Same text, but the row is older than the send by more than clock skew.
    messages = [_row(1, "user", "hi", 10.0)]
    assert [m["message_id"] for m in assign(messages, [_sent("u-a", "r1", "hi", 100.0)])] == ["m1"]


TEXTS = ["hi", "more", "[file a.txt]\n\nhi", "ok", "  "]


@st.composite
def lanes_and_sends(draw: st.DrawFn) -> tuple[list[Json], list[SentMessage], list[int]]:
    """Messages of a lane (user and assistant, a minute or less apart), sends of some of
    their texts at about their time, and the order in which the sends get recorded."""
    messages: list[Json] = []
    at = 1000.0
    for row in range(1, draw(st.integers(0, 14)) + 1):
        at += draw(st.sampled_from([0.5, 3.0, 60.0]))
        role = draw(st.sampled_from(["user", "user", "assistant"]))
        messages.append(_row(row, role, draw(st.sampled_from(TEXTS)), at))
    sends: list[SentMessage] = []
    times = [m["at"] for m in messages] or [at]
    for n in range(draw(st.integers(0, 8))):
        text = draw(st.sampled_from(TEXTS))
        created = draw(st.sampled_from(times)) + n / 1000  # no two at the same time
        created -= draw(st.sampled_from([-6.0, 0.0, 2.0, 10.0]))
        sends.append(_sent(f"u-{n}", draw(st.sampled_from([f"r{n}", None])), text, created))
    sends.sort(key=lambda s: s.created)  # as the outbox lists them
    order = draw(st.permutations(range(len(sends))))
    return messages, sends, list(order)


@given(lanes_and_sends(), st.data())
def test_naming_one_message_at_a_time_names_as_assign_whenever_sends_are_recorded(
    lane: tuple[list[Json], list[SentMessage], list[int]], data: st.DataObject
) -> None:
    messages, sends, order = lane
    recorded: list[int] = []
    naming = Naming([])
    added = 0
    # Messages arrive and sends get recorded, interleaved (a send recorded after its row,
    # or between two recorded before it): after each, naming catches up.
    steps = ["message"] * len(messages) + ["send"] * len(sends)
    for step in data.draw(st.permutations(steps)):
        if step == "message":
            m = messages[added]
            naming.add(m["rows"][0], m["role"], m["at"], m["text"])
            added += 1
        else:
            recorded.append(order[len(recorded)])
            first = naming.resend([sends[i] for i in sorted(recorded)])
            if first is not None:
                again = next(i for i, m in enumerate(messages) if m["rows"][0] == first)
                for m in messages[again:added]:
                    naming.add(m["rows"][0], m["role"], m["at"], m["text"])
        expected = assign(messages[:added], [sends[i] for i in sorted(recorded)])
        assert [naming.names.get(m["rows"][0], m["message_id"]) for m in messages[:added]] == [
            m["message_id"] for m in expected
        ]
