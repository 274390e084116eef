"""The names a lane keeps between requests (gateway_plugin.commands.live_names) are the
names of the whole transcript read afresh, whatever Hermes and the sends did meanwhile."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hermes_state import SessionDB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from canonical.model import Json
from gateway_plugin.commands.live_names import LiveNames
from gateway_plugin.delivery.message_ids import SentMessage, assign, text_digest
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.hermes.transcript import Transcript, page

LANE = ("android:default", None)
OTHER = ("android:chan_1", None)
CONVERSATION = "c-home"
T0 = 1_767_225_600.0


class Lane:
    """A lane written as Hermes writes it (SessionDB), its sends recorded in a real outbox."""

    def __init__(self, home: Path) -> None:
        self.db = SessionDB(db_path=home / "state.db")
        self.outbox = Outbox(home / "outbox.db")
        self.transcript = Transcript(home / "state.db")
        self.clock = itertools.count()
        self.sessions = itertools.count()
        self.session = ""
        self.rows: list[int] = []
        self.users: list[tuple[int, str]] = []  # (row, session) of each user message
        self.new_session(LANE)
        self.other = self._create(OTHER)

    def _create(self, lane: tuple[str, str | None]) -> str:
        sid = f"s{next(self.sessions)}"
        self.db.create_session(sid, "android", chat_id=lane[0], chat_type="dm", session_key=sid)
        return sid

    def new_session(self, lane: tuple[str, str | None] = LANE) -> None:
        self.session = self._create(lane)

    def now(self) -> float:
        return T0 + next(self.clock)

    def append(self, role: str, text: str) -> int:
        row = int(self.db.append_message(self.session, role, text, timestamp=self.now()))
        self.rows.append(row)
        if role == "user":
            self.users.append((row, self.session))
        return row

    def record_send(self, text: str, created: float) -> None:
        n = len(self.outbox.sent_messages(CONVERSATION))
        sent = SentMessage(f"u-{n}", f"r{n}", created, len(text), text_digest(text))
        self.outbox.record_send(None, {}, [], None, sent, CONVERSATION)

    def uncached(self, limit: int, before: str | None) -> tuple[list[Json], bool] | None:
        named = assign(self.transcript.merged(LANE), self.outbox.sent_messages(CONVERSATION))
        if before is not None and not before.startswith("m"):
            if all(m["message_id"] != before for m in named):
                return None
        return page(named, limit, before)

    def uncached_ids(self) -> dict[int, str]:
        named = assign(self.transcript.merged(LANE), self.outbox.sent_messages(CONVERSATION))
        return {row: m["message_id"] for m in named for row in m["rows"]}

    def close(self) -> None:
        self.db.close()
        self.outbox.close()


@pytest.fixture
def lane(tmp_path: Path) -> Iterator[Lane]:
    world = Lane(tmp_path)
    yield world
    world.close()


def _agrees(names: LiveNames, world: Lane, limits: list[int]) -> None:
    named = assign(world.transcript.merged(LANE), world.outbox.sent_messages(CONVERSATION))
    cursors: list[str | None] = [None, "m0", f"m{max(world.rows, default=0) + 1}", "u-nobody"]
    cursors += [m["message_id"] for m in named] + [f"m{row}" for row in world.rows]
    for limit in limits:
        for before in cursors:
            assert names.page(LANE, CONVERSATION, limit, before) == world.uncached(limit, before), (
                limit,
                before,
            )
    rows = range(1, max(world.rows, default=0) + 5)  # compressions add rows of their own
    assert names.ids({LANE: CONVERSATION}, rows) == world.uncached_ids()


TEXTS = ["hi", "more", "  ", "ok"]
STEP = st.one_of(
    st.tuples(st.just("user"), st.sampled_from(TEXTS)),
    st.tuples(st.just("assistant"), st.sampled_from(TEXTS)),
    st.tuples(st.just("send before"), st.sampled_from(TEXTS)),  # recorded, then stored
    st.tuples(st.just("send after"), st.sampled_from(TEXTS)),  # stored, then recorded
    st.tuples(st.just("other lane"), st.sampled_from(TEXTS)),
    st.tuples(st.just("new session"), st.just("")),
    st.tuples(st.just("undo"), st.just("")),
    st.tuples(st.just("compress"), st.just("")),
    st.tuples(st.just("read"), st.just("")),
)


def _step(world: Lane, kind: str, text: str) -> None:
    if kind in ("user", "assistant"):
        world.append(kind, text)
    elif kind == "send before":
        world.record_send(text, world.now())
        world.append("user", text)
    elif kind == "send after":
        created = world.now()
        world.append("user", f"[file a.txt]\n\n{text}")
        world.record_send(text, created)
    elif kind == "other lane":
        world.db.append_message(world.other, "user", text, timestamp=world.now())
    elif kind == "new session":
        world.new_session()
    elif kind == "undo" and world.users and world.users[-1][1] == world.session:
        world.db.rewind_to_message(world.session, world.users.pop()[0])
    elif kind == "compress":
        summary = [{"role": "user", "content": "summary", "timestamp": world.now()}]
        world.db.archive_and_compact(world.session, summary)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(STEP, max_size=24))
def test_kept_names_are_the_names_of_the_whole_transcript_after_any_changes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str]]
) -> None:
    world = Lane(tmp_path_factory.mktemp("lane"))
    try:
        names = LiveNames(world.transcript, world.outbox)
        for kind, text in steps:
            _step(world, kind, text)
            if kind == "read":
                _agrees(names, world, [1, 3])
        _agrees(names, world, [1, 2, 500])
        names.close()
    finally:
        world.close()


def test_a_lane_read_before_a_restart_is_named_the_same_after_it(lane: Lane) -> None:
    for n in range(5):
        lane.record_send(f"q{n}", lane.now())
        lane.append("user", f"q{n}")
        lane.append("assistant", f"a{n}")
    before = LiveNames(lane.transcript, lane.outbox)
    first = before.page(LANE, CONVERSATION, 4, None)
    before.close()
    after = LiveNames(lane.transcript, lane.outbox)
    assert after.page(LANE, CONVERSATION, 4, None) == first == lane.uncached(4, None)
    after.close()


def test_a_page_reads_only_its_own_rows_once_the_lane_is_named(lane: Lane) -> None:
    for n in range(300):
        lane.append("user", f"q{n}")
        lane.append("assistant", f"a{n}")
    names = LiveNames(lane.transcript, lane.outbox)
    names.page(LANE, CONVERSATION, 10, None)
    read: list[str] = []
    conn = lane.transcript._connect
    lane.transcript._connect = lambda: _traced(conn(), read)  # type: ignore[method-assign]
    messages, more = names.page(LANE, CONVERSATION, 10, None) or ([], False)
    assert [m["text"] for m in messages] == [t for n in range(295, 300) for t in (f"q{n}", f"a{n}")]
    assert more
    assert sum("m.content" in sql for sql in read) == 1
    names.close()


def _traced(conn: object, read: list[str]) -> object:
    assert conn is not None
    conn.set_trace_callback(read.append)  # type: ignore[attr-defined]
    return conn


def test_a_state_db_replaced_by_another_file_is_named_from_the_new_one(tmp_path: Path) -> None:
    first = Lane(tmp_path / "a")
    first.append("user", "from the first file")
    names = LiveNames(first.transcript, first.outbox)
    assert names.page(LANE, CONVERSATION, 5, None) == first.uncached(5, None)
    first.db.close()
    (tmp_path / "a" / "state.db").unlink()
    for suffix in ("-wal", "-shm"):
        (tmp_path / "a" / f"state.db{suffix}").unlink(missing_ok=True)
    second = SessionDB(db_path=tmp_path / "a" / "state.db")
    second.create_session("x", "android", chat_id=LANE[0], chat_type="dm", session_key="x")
    second.append_message("x", "user", "from the second file", timestamp=T0)
    second.close()
    messages, _ = names.page(LANE, CONVERSATION, 5, None) or ([], False)
    assert [m["text"] for m in messages] == ["from the second file"]
    names.close()
    first.outbox.close()


@pytest.mark.parametrize("change", ["undo", "compress"])
def test_rows_hermes_takes_back_leave_the_history_once_read_before(lane: Lane, change: str) -> None:
    for kind, text in [("send before", "hi"), ("assistant", "hello"), ("send before", "more")]:
        _step(lane, kind, text)
    names = LiveNames(lane.transcript, lane.outbox)
    assert names.page(LANE, CONVERSATION, 10, None) == lane.uncached(10, None)
    _step(lane, change, "")
    assert names.page(LANE, CONVERSATION, 10, None) == lane.uncached(10, None)
    assert names.ids({LANE: CONVERSATION}, range(1, 100)) == lane.uncached_ids()
    names.close()
