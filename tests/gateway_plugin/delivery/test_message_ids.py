"""Naming transcript messages with the ids devices saw live (gateway_plugin.delivery.message_ids)."""

from __future__ import annotations

from canonical.model import Json
from gateway_plugin.delivery.message_ids import SentMessage, assign, text_digest


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
