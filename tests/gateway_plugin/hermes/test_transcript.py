"""gateway_plugin.hermes.transcript against a real state.db written by Hermes' own SessionDB."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hermes_state import SessionDB

from canonical.protocol import iso_from_unix
from gateway_plugin.hermes.transcript import Transcript

HOME = ("android:default", None)
TOPIC = ("android:default", "t_1")
EMPTY = ("android:chan_9", None)
NOBODY = ("android:chan_404", None)
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@dataclass
class World:
    db_path: Path
    transcript: Transcript
    ids: dict[str, int]  # label -> messages.id


def _session(db: SessionDB, sid: str, source: str, lane: tuple[str, str | None]) -> None:
    key = f"agent:main:{source}:dm:{lane[0]}" + (f":{lane[1]}" if lane[1] else "")
    db.create_session(
        sid, source, chat_id=lane[0], thread_id=lane[1], chat_type="dm", session_key=key
    )


def _build(db_path: Path) -> dict[str, int]:
    db = SessionDB(db_path=db_path)
    try:
        _session(db, "home-1", "android", HOME)
        _session(db, "topic-1", "android", TOPIC)
        _session(db, "tg-1", "telegram", HOME)  # same chat id, another platform
        rows = [
            # label, session, role, content, minutes after T0, tool_calls
            ("hi", "home-1", "user", "What's the weather?", 0, None),
            ("call", "home-1", "assistant", "", 1, [{"id": "c1", "type": "function"}]),
            ("tool1", "home-1", "tool", "sunny, 27C", 2, None),
            ("pre", "home-1", "assistant", "Let me check.", 3, None),
            ("tool2", "home-1", "tool", "more output", 4, None),
            ("blank", "home-1", "assistant", "   ", 5, None),
            ("post", "home-1", "assistant", "\n\nIt is 27°C.", 6, None),
            ("thanks", "home-1", "user", "thanks", 7, None),
            ("welcome", "home-1", "assistant", "You're welcome", 8, None),
            ("topic_q", "topic-1", "user", "thread question", 9, None),
            ("topic_a", "topic-1", "assistant", "thread answer", 10, None),
            ("tg_q", "tg-1", "user", "telegram says hi", 11, None),
        ]
        ids: dict[str, int] = {}
        for label, sid, role, content, minutes, calls in rows:
            ids[label] = db.append_message(
                sid, role, content, tool_calls=calls, timestamp=T0 + minutes * 60
            )
        # /new: a second session for the same lane.
        _session(db, "home-2", "android", HOME)
        for label, role, content, minutes in [
            ("new_q", "user", "new topic", 20),
            ("new_a", "assistant", "ok", 21),
            ("undo", "user", "rewound question", 22),
            ("undo_a", "assistant", "rewound answer", 23),
        ]:
            ids[label] = db.append_message("home-2", role, content, timestamp=T0 + minutes * 60)
        db.rewind_to_message("home-2", ids["undo"])
        _session(db, "empty-1", "android", EMPTY)
    finally:
        db.close()
    return ids


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    db_path = tmp_path_factory.mktemp("hermes") / "state.db"
    ids = _build(db_path)
    yield World(db_path, Transcript(db_path), ids)


def mid(world: World, label: str) -> str:
    return f"m{world.ids[label]}"


def at(minutes: int) -> str | None:
    return iso_from_unix(T0 + minutes * 60)


def test_history_merges_each_turns_assistant_messages_and_skips_tools_and_blanks(
    world: World,
) -> None:
    messages, has_more = world.transcript.messages(HOME, limit=100)
    assert has_more is False
    assert messages == [
        {
            "message_id": mid(world, "hi"),
            "role": "user",
            "text": "What's the weather?",
            "ts": at(0),
        },
        {
            "message_id": mid(world, "pre"),
            "role": "assistant",
            "text": "Let me check.\n\nIt is 27°C.",
            "ts": at(6),
        },
        {"message_id": mid(world, "thanks"), "role": "user", "text": "thanks", "ts": at(7)},
        {
            "message_id": mid(world, "welcome"),
            "role": "assistant",
            "text": "You're welcome",
            "ts": at(8),
        },
        {"message_id": mid(world, "new_q"), "role": "user", "text": "new topic", "ts": at(20)},
        {"message_id": mid(world, "new_a"), "role": "assistant", "text": "ok", "ts": at(21)},
    ]


def test_history_spans_every_session_of_the_lane(world: World) -> None:
    assert [s["id"] for s in world.transcript.sessions(HOME)] == ["home-1", "home-2"]
    texts = [m["text"] for m in world.transcript.messages(HOME, limit=100)[0]]
    assert "What's the weather?" in texts and "new topic" in texts


def test_rewound_messages_are_not_history(world: World) -> None:
    texts = [m["text"] for m in world.transcript.messages(HOME, limit=100)[0]]
    assert "rewound question" not in texts and "rewound answer" not in texts


def test_a_thread_is_a_lane_of_its_own(world: World) -> None:
    messages, _ = world.transcript.messages(TOPIC, limit=100)
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "thread question"),
        ("assistant", "thread answer"),
    ]


def test_other_platforms_sessions_of_the_same_chat_id_are_not_history(world: World) -> None:
    texts = [m["text"] for m in world.transcript.messages(HOME, limit=100)[0]]
    assert "telegram says hi" not in texts
    telegram = Transcript(world.db_path, platform="telegram")
    assert [m["text"] for m in telegram.messages(HOME, limit=10)[0]] == ["telegram says hi"]


def test_limit_returns_the_newest_messages_in_order_and_says_there_are_more(
    world: World,
) -> None:
    messages, has_more = world.transcript.messages(HOME, limit=2)
    assert [m["text"] for m in messages] == ["new topic", "ok"]
    assert has_more is True


def test_a_limit_of_exactly_everything_has_no_more(world: World) -> None:
    messages, has_more = world.transcript.messages(HOME, limit=6)
    assert len(messages) == 6 and has_more is False


def test_before_message_id_pages_backwards_exclusively_without_gaps_or_overlap(
    world: World,
) -> None:
    everything, _ = world.transcript.messages(HOME, limit=100)
    pages: list[list[dict[str, object]]] = []
    before: str | None = None
    while True:
        page, has_more = world.transcript.messages(HOME, limit=2, before_message_id=before)
        pages.insert(0, page)
        if before is not None:
            assert all(m["message_id"] != before for m in page)
        if not has_more:
            break
        before = str(page[0]["message_id"])
    assert [m for page in pages for m in page] == everything
    assert len(pages) == 3


def test_before_the_first_message_there_is_nothing(world: World) -> None:
    assert world.transcript.messages(HOME, 10, before_message_id=mid(world, "hi")) == ([], False)


def test_before_an_id_that_is_not_a_display_message_falls_back_to_id_order(
    world: World,
) -> None:
    # tool2 sits inside the merged assistant message that starts at "pre".
    messages, _ = world.transcript.messages(HOME, 10, before_message_id=mid(world, "tool2"))
    assert [m["message_id"] for m in messages] == [mid(world, "hi"), mid(world, "pre")]


def test_latest_is_the_newest_session_and_its_last_activity(world: World) -> None:
    session_id, last_active = world.transcript.latest(HOME)
    assert session_id == "home-2"
    # Rewound rows still carry their timestamps in the session.
    assert last_active in (at(21), at(23))


def test_latest_of_a_session_without_messages_has_no_last_activity(world: World) -> None:
    assert world.transcript.latest(EMPTY) == ("empty-1", None)
    assert world.transcript.messages(EMPTY, 10) == ([], False)


def test_a_lane_hermes_never_saw_is_empty(world: World) -> None:
    assert world.transcript.latest(NOBODY) == (None, None)
    assert world.transcript.messages(NOBODY, 10) == ([], False)
    assert world.transcript.sessions(NOBODY) == []


def test_a_missing_state_db_reads_as_empty_and_is_not_created(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "absent" / "state.db")
    assert transcript.messages(HOME, 10) == ([], False)
    assert transcript.latest(HOME) == (None, None)
    assert transcript.sessions(HOME) == []
    assert not (tmp_path / "absent" / "state.db").exists()


def test_reading_history_never_writes_to_state_db(world: World) -> None:
    before = world.db_path.stat().st_mtime_ns
    world.transcript.messages(HOME, 100)
    world.transcript.latest(HOME)
    assert world.db_path.stat().st_mtime_ns == before


def test_a_turn_that_ends_with_the_models_answer_is_answered(world: World) -> None:
    turn = world.transcript.turn_since(HOME, T0 + 7 * 60)
    assert turn is not None and turn.answered and turn.reasoning is None


def test_a_turn_that_stored_nothing_is_not_answered(world: World) -> None:
    turn = world.transcript.turn_since(TOPIC, T0 + 10 * 60 + 1)
    assert turn is not None and not turn.answered


def test_a_turn_is_only_what_was_stored_since_it_started(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = SessionDB(db_path=db_path)
    try:
        _session(db, "s", "android", HOME)
        db.append_message("s", "user", "think", timestamp=T0)
        db.append_message("s", "assistant", "thought", reasoning="deep", timestamp=T0 + 1)
        # The next turn, a moment later: the provider failed after a tool call.
        db.append_message("s", "user", "go on", timestamp=T0 + 1.2)
        calls = [{"id": "c1", "type": "function"}]
        db.append_message("s", "assistant", "Checking.", tool_calls=calls, timestamp=T0 + 1.4)
        db.append_message("s", "tool", "output", timestamp=T0 + 1.6)
    finally:
        db.close()
    transcript = Transcript(db_path)
    failed = transcript.turn_since(HOME, T0 + 1.1)
    assert failed is not None and not failed.answered and failed.reasoning is None
    earlier = transcript.turn_since(HOME, T0)
    assert earlier is not None and earlier.reasoning == "deep"
    assert Transcript(tmp_path / "missing.db").turn_since(HOME, T0) is None
