"""edge.connection.Connection: a bounded per-device queue drained by its own writer task."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canonical.model import Json
from edge.connection import CLOSE_FLUSH_S, Connection
from edge.dialects.iris import IrisDialect
from edge.dialects.pheby import PhebyDialect
from edge.errors import CLOSE_SLOW_CONSUMER, WireClosed


class Socket:
    """An in-memory WebSocket: records frames and closes; can be made slow."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closes: list[tuple[int, str]] = []
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.in_send = asyncio.Event()
        self.fail_with: Exception | None = None

    async def send_text(self, text: str) -> None:
        self.in_send.set()
        await self.flowing.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append(text)

    async def close(self, code: int, reason: str) -> None:
        self.closes.append((code, reason))

    def block(self) -> None:
        self.flowing.clear()
        self.in_send.clear()

    def release(self) -> None:
        self.flowing.set()


async def eventually(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.001)


async def idle(conn: Connection, socket: Socket) -> None:
    """Wait until the writer has written everything queued."""
    await eventually(lambda: conn.queued == 0 and (socket.flowing.is_set() or conn.closed))
    for _ in range(5):
        await asyncio.sleep(0)


def ev(cursor: int, kind: str = "message.complete", message_id: str = "m1", **extra: Any) -> Json:
    return {"type": kind, "cursor": cursor, "message_id": message_id, **extra}


def text_of(event: Json) -> str:
    return f"{event['type']}#{event['cursor']}@{event.get('message_id')}"


def offer(conn: Connection, event: Json) -> bool:
    return conn.offer_event(event, text_of(event))


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., tuple[Connection, Socket]]]:
    made: list[Connection] = []

    def factory(
        dialect: str = "pheby", max_frames: int = 1024, last_cursor: int = 0
    ) -> tuple[Connection, Socket]:
        socket = Socket()
        codec = PhebyDialect() if dialect == "pheby" else IrisDialect()
        conn = Connection(
            f"conn-{len(made)}",
            codec,
            "tenant",
            f"device-{len(made)}",
            socket.send_text,
            socket.close,
            max_frames=max_frames,
        )
        conn.last_cursor = last_cursor

        made.append(conn)
        return conn, socket

    yield factory
    for conn in made:
        await conn.stop()


async def test_frames_are_written_in_the_order_they_were_queued(make: Any) -> None:
    conn, socket = make()
    conn.send_frame("hello.ack")
    for cursor in (1, 2, 3):
        offer(conn, ev(cursor, message_id=f"m{cursor}"))
    conn.send_frame("pong")
    await idle(conn, socket)
    assert socket.sent == [
        "hello.ack",
        "message.complete#1@m1",
        "message.complete#2@m2",
        "message.complete#3@m3",
        "pong",
    ]
    assert conn.frames_out == 5


async def test_deltas_of_the_same_message_coalesce_to_the_latest_while_queued(
    make: Any,
) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("in flight")
    await socket.in_send.wait()
    for cursor in (1, 2, 3):
        offer(conn, ev(cursor, "message.delta"))
    assert conn.queued == 1
    socket.release()
    await idle(conn, socket)
    assert socket.sent == ["in flight", "message.delta#3@m1"]


async def test_a_delta_sent_before_the_next_arrives_is_not_taken_back(make: Any) -> None:
    conn, socket = make()
    offer(conn, ev(1, "message.delta"))
    await idle(conn, socket)
    offer(conn, ev(2, "message.delta"))
    await idle(conn, socket)
    assert socket.sent == ["message.delta#1@m1", "message.delta#2@m1"]


async def test_a_coalesced_delta_moves_to_the_tail_so_cursors_stay_in_order(make: Any) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("in flight")
    await socket.in_send.wait()
    offer(conn, ev(1, "message.delta", "a"))
    offer(conn, ev(2, "message.delta", "b"))
    offer(conn, ev(3, "message.delta", "a"))
    offer(conn, ev(4, "tool.event", "b"))
    offer(conn, ev(5, "message.delta", "b"))
    socket.release()
    await idle(conn, socket)
    assert socket.sent == [
        "in flight",
        "message.delta#3@a",
        "tool.event#4@b",
        "message.delta#5@b",
    ]


async def test_typing_frames_of_one_lane_coalesce(make: Any) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("in flight")
    await socket.in_send.wait()
    for n in range(3):
        conn.offer_event({"type": "typing", "lane": ["c", None]}, f"typing-{n}")
    conn.offer_event({"type": "typing", "lane": ["d", None]}, "typing-other-lane")
    socket.release()
    await idle(conn, socket)
    assert socket.sent == ["in flight", "typing-2", "typing-other-lane"]


async def test_complete_and_other_frames_are_never_dropped_while_queued(make: Any) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("in flight")
    await socket.in_send.wait()
    expected = []
    for cursor in range(1, 30):
        kind = ("message.complete", "run.finished", "tool.event")[cursor % 3]
        event = ev(cursor, kind, message_id="m1")
        offer(conn, event)
        expected.append(text_of(event))
        conn.send_frame(f"reply-{cursor}")
        expected.append(f"reply-{cursor}")
    socket.release()
    await idle(conn, socket)
    assert socket.sent == ["in flight", *expected]


async def test_a_queue_past_max_frames_closes_the_connection_with_4008(make: Any) -> None:
    conn, socket = make(max_frames=4)
    socket.block()
    conn.send_frame("in flight")
    await socket.in_send.wait()
    for cursor in range(1, 5):
        offer(conn, ev(cursor, message_id=f"m{cursor}"))
    assert not conn.closed
    offer(conn, ev(5, message_id="m5"))
    assert conn.closed
    assert conn.close_code == CLOSE_SLOW_CONSUMER == 4008
    socket.release()
    await eventually(lambda: bool(socket.closes))
    assert socket.closes == [(4008, "slow consumer")]
    # What was queued is abandoned: the device recovers by replay.
    assert socket.sent == ["in flight"]
    assert offer(conn, ev(6)) is False
    conn.send_frame("too late")
    await asyncio.sleep(0.01)
    assert socket.sent == ["in flight"]


async def test_coalescing_deltas_never_fill_the_queue(make: Any) -> None:
    conn, socket = make(max_frames=4)
    socket.block()
    conn.send_frame("in flight")
    await socket.in_send.wait()
    for cursor in range(1, 500):
        offer(conn, ev(cursor, "message.delta"))
    assert not conn.closed and conn.queued == 1
    socket.release()
    await idle(conn, socket)
    assert socket.sent == ["in flight", "message.delta#499@m1"]


async def test_offer_event_drops_cursors_at_or_below_the_last_cursor(make: Any) -> None:
    conn, socket = make(last_cursor=5)
    assert offer(conn, ev(4)) is False
    assert offer(conn, ev(5)) is False
    assert offer(conn, ev(6)) is False
    assert offer(conn, ev(6)) is False
    await idle(conn, socket)
    assert socket.sent == ["message.complete#6@m1"]
    assert conn.last_cursor == 6


async def test_an_event_the_dialect_cannot_show_still_advances_the_cursor(make: Any) -> None:
    conn, socket = make()
    assert conn.offer_event(ev(1), None) is False
    offer(conn, ev(1))
    offer(conn, ev(2))
    await idle(conn, socket)
    assert socket.sent == ["message.complete#2@m1"]


async def test_an_iris_connection_that_sees_a_cursor_gap_holds_the_event_for_a_resync(
    make: Any,
) -> None:
    conn, socket = make("iris", last_cursor=5)
    assert offer(conn, ev(6)) is False
    assert offer(conn, ev(9)) is True  # 7 and 8 never came: resync from 6
    assert conn.replaying
    assert conn.last_cursor == 6
    assert offer(conn, ev(10)) is False  # held while the replay is in flight
    conn.send_frame("unsequenced reply")  # replies are not held
    await idle(conn, socket)
    assert socket.sent == ["message.complete#6@m1", "unsequenced reply"]

    conn.finish_replay([(ev(c), text_of(ev(c))) for c in (7, 8, 9)])
    await idle(conn, socket)
    assert socket.sent[2:] == [
        "message.complete#7@m1",
        "message.complete#8@m1",
        "message.complete#9@m1",
        "message.complete#10@m1",
    ]
    assert not conn.replaying
    assert conn.last_cursor == 10


async def test_a_replay_that_does_not_come_holds_at_most_a_queue_of_events_then_closes(
    make: Any,
) -> None:
    conn, socket = make("iris", max_frames=8, last_cursor=2)
    conn.begin_replay()  # its reply lost on the bus, say
    for cursor in range(3, 3 + 8):
        offer(conn, ev(cursor))
    assert conn.gate.held == 8 and not conn.closed
    offer(conn, ev(11))  # one more than a send queue: reconnect and resume instead
    await eventually(lambda: conn.closed)
    assert conn.close_code == 4008 and conn.gate.held == 8


async def test_a_replay_that_has_not_moved_for_a_while_counts_as_stalled(make: Any) -> None:
    conn, _ = make("iris", last_cursor=2)
    assert not conn.replay_stalled(time.monotonic() + 3600, 60)  # no replay pending
    conn.begin_replay()
    assert not conn.replay_stalled(time.monotonic(), 60)
    assert conn.replay_stalled(time.monotonic() + 61, 60)
    conn.finish_replay([])
    assert not conn.replay_stalled(time.monotonic() + 3600, 60)


async def test_finish_replay_delivers_replayed_then_held_each_once(make: Any) -> None:
    conn, socket = make("iris", last_cursor=2)
    conn.begin_replay()
    offer(conn, ev(3))
    offer(conn, ev(4))
    conn.finish_replay([(ev(c), text_of(ev(c))) for c in (1, 2, 3)])
    await idle(conn, socket)
    assert socket.sent == ["message.complete#3@m1", "message.complete#4@m1"]


async def test_a_fresh_iris_connection_does_not_resync_on_its_first_cursor(make: Any) -> None:
    conn, socket = make("iris", last_cursor=0)
    assert offer(conn, ev(41)) is False
    await idle(conn, socket)
    assert socket.sent == ["message.complete#41@m1"]


async def test_a_pheby_connection_never_asks_for_a_resync(make: Any) -> None:
    conn, socket = make("pheby", last_cursor=5)
    assert offer(conn, ev(9)) is False
    await idle(conn, socket)
    assert socket.sent == ["message.complete#9@m1"]


async def test_a_slow_connection_never_blocks_another_connections_writer(make: Any) -> None:
    slow, slow_socket = make()
    fast, fast_socket = make()
    slow_socket.block()
    slow.send_frame("stuck")
    await slow_socket.in_send.wait()
    for cursor in range(1, 50):
        event = ev(cursor, message_id=f"m{cursor}")
        offer(slow, event)
        offer(fast, event)
    await idle(fast, fast_socket)
    assert len(fast_socket.sent) == 49
    assert slow_socket.sent == []
    assert slow.queued == 49
    slow_socket.release()
    await idle(slow, slow_socket)
    assert slow_socket.sent == ["stuck", *fast_socket.sent]


async def test_request_close_writes_what_is_queued_then_closes_with_the_code(
    make: Any,
) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("a")
    await socket.in_send.wait()
    conn.send_frame("b")
    conn.request_close(1012)
    conn.send_frame("after close")
    socket.release()
    await eventually(lambda: bool(socket.closes))
    assert socket.sent == ["a", "b"]
    assert socket.closes == [(1012, "closing")]


async def test_a_failing_socket_ends_only_its_own_connection(make: Any) -> None:
    broken, broken_socket = make()
    healthy, healthy_socket = make()
    broken_socket.fail_with = ConnectionResetError("gone")
    broken.send_frame("x")
    await eventually(lambda: broken.closed)
    healthy.send_frame("y")
    await idle(healthy, healthy_socket)
    assert healthy_socket.sent == ["y"]
    assert broken_socket.closes == []


async def test_stop_ends_a_writer_blocked_on_a_slow_socket(make: Any) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("stuck")
    await socket.in_send.wait()
    await asyncio.wait_for(conn.stop(), 1)
    assert conn.closed


# --------------------------------------------------------------------------- property

OFFERS = st.lists(
    st.tuples(st.sampled_from(["message.delta", "message.complete", "reply"]), st.integers(0, 2)),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(OFFERS)
def test_a_slow_device_gets_every_complete_and_the_newest_delta_in_cursor_order(
    offers: list[tuple[str, int]],
) -> None:
    async def scenario() -> list[str]:
        socket = Socket()
        conn = Connection("c", PhebyDialect(), "t", "d", socket.send_text, socket.close)

        try:
            socket.block()
            conn.send_frame(json.dumps({"first": True}))
            await socket.in_send.wait()
            for cursor, (kind, message) in enumerate(offers, start=1):
                if kind == "reply":
                    conn.send_frame(json.dumps({"reply": cursor}))
                else:
                    event = {"type": kind, "cursor": cursor, "message_id": f"m{message}"}
                    conn.offer_event(event, json.dumps(event))
            socket.release()
            await idle(conn, socket)
            return socket.sent[1:]
        finally:
            await conn.stop()

    sent = [json.loads(t) for t in asyncio.run(scenario())]
    events = [f for f in sent if "type" in f]
    cursors = [f["cursor"] for f in events]
    assert cursors == sorted(set(cursors))
    # Replies and completes all arrive, in order.
    expected_others = [
        c for c, (kind, _) in enumerate(offers, start=1) if kind in ("message.complete", "reply")
    ]
    got_others = [
        f.get("cursor") or f.get("reply") for f in sent if f.get("type") != "message.delta"
    ]
    assert got_others == expected_others
    # Per message, the newest delta offered arrives (coalescing never loses the latest).
    for message in range(3):
        deltas = [
            c
            for c, (kind, m) in enumerate(offers, start=1)
            if kind == "message.delta" and m == message
        ]
        if deltas:
            got = [
                f["cursor"]
                for f in events
                if f["message_id"] == f"m{message}" and f["type"] == "message.delta"
            ]
            assert got and got[-1] == deltas[-1]


# --------------------------------------------------------------------------- iris resync
#
# An iris device over a doorbell (the edge's bus subscription) that can go down: events
# sequenced while it is down are never published, and whatever was in flight on it (live
# events, the direct reply to a sync) is lost. The edge repairs that the way edge/hub.py
# does: a cursor gap seen by offer_event() starts a resync, and the doorbell coming back
# resyncs every iris connection that is not already replaying. A resync is a `sync` from
# the connection's last cursor (the command stream is not the doorbell: it is not lost);
# the plugin reads the outbox when it handles it and publishes the reply, which lands later.

RESYNC_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("emit"), st.one_of(st.none(), st.integers(0, 1))),
        st.tuples(
            st.sampled_from(["live", "live", "bell_down", "bell_up", "read", "reply"]),
            st.none(),
        ),
    ),
    max_size=50,
)


def flaky_doorbell(actions: list[tuple[str, int | None]]) -> tuple[list[int], list[int]]:
    """Run the world; return (cursors the device received, cursors the outbox holds)."""
    return asyncio.run(_flaky_doorbell(actions))


async def _flaky_doorbell(actions: list[tuple[str, int | None]]) -> tuple[list[int], list[int]]:
    socket = Socket()
    conn = Connection("c", IrisDialect(), "t", "d", socket.send_text, socket.close)

    outbox: list[Json] = [{"type": "run.finished", "cursor": 1, "message_id": None}]
    next_cursor = 2
    conn.offer_event(outbox[0], json.dumps(outbox[0]))  # the device is past cursor 1
    pipe: list[Json] = []
    bell_up = True
    sync_from: int | None = None  # a sync submitted, not yet read by the plugin
    snapshot: list[Json] | None = None  # read, reply on its way

    def resync() -> None:
        nonlocal sync_from, snapshot
        sync_from, snapshot = conn.last_cursor, None

    def read() -> None:
        nonlocal sync_from, snapshot
        if sync_from is not None:
            snapshot = [e for e in outbox if e["cursor"] > sync_from]
            sync_from = None

    def reply() -> None:
        nonlocal snapshot
        if snapshot is not None:
            replayed = snapshot
            snapshot = None
            # published while the doorbell is down: lost; a hole left after it: resync
            if bell_up and conn.finish_replay([(e, json.dumps(e)) for e in replayed]):
                resync()

    def deliver() -> None:
        event = pipe.pop(0)
        if conn.offer_event(event, json.dumps(event)):
            resync()

    def bell_comes_back() -> None:
        nonlocal bell_up
        if not bell_up:
            bell_up = True
            conn.begin_replay()  # hub._resync_all: even a connection already replaying
            resync()

    def emit(message: int | None) -> None:
        nonlocal next_cursor, outbox
        kind = "message.delta" if message is not None else "run.finished"
        event = {"type": kind, "cursor": next_cursor, "message_id": f"m{message}"}
        next_cursor += 1
        if message is not None:
            outbox = [e for e in outbox if e["message_id"] != f"m{message}"]
        outbox.append(event)
        if bell_up:
            pipe.append(event)

    try:
        for action, message in actions:
            if action == "emit":
                emit(message)
            elif action == "live" and pipe:
                deliver()
            elif action == "bell_down":
                bell_up, pipe = False, []
            elif action == "bell_up":
                bell_comes_back()
            elif action == "read":
                read()
            elif action == "reply":
                reply()
        # The doorbell stays up, one more event is sequenced (a gap shows on the next live
        # event at the latest), and everything in flight lands.
        bell_comes_back()
        emit(None)
        for _ in range(10):
            while pipe:
                deliver()
            read()
            reply()
        await idle(conn, socket)
        return [json.loads(t)["cursor"] for t in socket.sent], [e["cursor"] for e in outbox]
    finally:
        await conn.stop()


def assert_every_event_once_in_order(received: list[int], outbox: list[int]) -> None:
    assert received == sorted(set(received)), received
    missing = [c for c in outbox if c not in received]
    assert not missing, f"never delivered: {missing}; got {received}"


def test_a_resync_reply_lost_while_the_doorbell_is_down_does_not_strand_the_device() -> None:
    # The doorbell comes back while the connection is still replaying, so hub._resync_all
    # skips it; the reply never comes and every later live event is held forever
    # (ReplayGate._held grows without bound; the device sees nothing until it reconnects).
    received, outbox = flaky_doorbell(
        [("bell_down", None), ("bell_up", None), ("bell_down", None), ("read", None)]
        + [("reply", None), ("bell_up", None), ("emit", None), ("live", None)]
    )
    assert_every_event_once_in_order(received, outbox)


def test_events_lost_between_a_resyncs_read_and_its_reply_are_resynced_too() -> None:
    # The plugin read the outbox at cursor 1; event 2 is sequenced while the doorbell is
    # down; 3 arrives live and is held; the replay (nothing after 1) releases 3 over the
    # gap, and as 4 follows 3 no later gap check ever notices that 2 is missing.
    received, outbox = flaky_doorbell(
        [("bell_down", None), ("bell_up", None), ("read", None), ("bell_down", None)]
        + [("emit", None), ("bell_up", None), ("emit", None), ("live", None), ("reply", None)]
    )
    assert_every_event_once_in_order(received, outbox)


@settings(max_examples=300, deadline=None)
@given(RESYNC_ACTIONS)
def test_an_iris_device_behind_a_flaky_doorbell_ends_with_every_event_once_in_order(
    actions: list[tuple[str, int | None]],
) -> None:
    assert_every_event_once_in_order(*flaky_doorbell(actions))


# --------------------------------------------------------------------------- direct wire
#
# On uvicorn a connection writes pre-framed bytes straight to the socket (edge.wire) and
# needs a writer task only while the socket's buffer is over its high-water mark.


class PausableWire:
    """A socket buffer that can be paused (over its high-water mark) or closed."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.paused = False
        self.closing = False
        self._drained = asyncio.Event()
        self._drained.set()

    def write(self, frame: bytes) -> bool:
        if self.closing:
            raise WireClosed("closing")
        if self.paused:
            return False
        self.written.append(parse_frame(frame))
        return True

    async def drained(self) -> None:
        await self._drained.wait()

    def pause(self) -> None:
        self.paused = True
        self._drained.clear()

    def resume(self) -> None:
        self.paused = False
        self._drained.set()


def parse_frame(frame: bytes) -> str:
    assert frame[0] == 0x81
    size, start = frame[1], 2
    if size == 126:
        size, start = int.from_bytes(frame[2:4], "big"), 4
    assert len(frame) == start + size
    return frame[start:].decode()


def wired(
    dialect: str = "pheby", max_frames: int = 1024
) -> tuple[Connection, PausableWire, Socket]:
    wire, socket = PausableWire(), Socket()
    codec = PhebyDialect() if dialect == "pheby" else IrisDialect()
    conn = Connection(
        "conn-w", codec, "t", "d", socket.send_text, socket.close, max_frames, wire=wire
    )
    return conn, wire, socket


async def test_a_frame_to_a_writable_socket_is_written_on_the_spot_without_a_task() -> None:
    conn, wire, socket = wired()
    conn.send_frame("hello.ack")
    offer(conn, ev(1))
    assert wire.written == ["hello.ack", "message.complete#1@m1"]
    assert conn.frames_out == 2 and conn.queued == 0
    assert conn._writer is None and conn._queue is None
    assert socket.sent == [], "the ASGI path is not used"


async def test_frames_for_a_paused_socket_queue_coalesce_and_follow_in_order() -> None:
    conn, wire, _ = wired()
    offer(conn, ev(1, "message.delta", "a"))
    wire.pause()
    offer(conn, ev(2, "message.delta", "a"))
    offer(conn, ev(3, "message.complete", "b"))
    offer(conn, ev(4, "message.delta", "a"))
    conn.send_frame("pong")
    assert conn.queued == 3  # the delta of cursor 2 was written or superseded, never both
    wire.resume()
    await eventually(lambda: conn.queued == 0 and conn._writer is None)
    assert wire.written == [
        "message.delta#1@a",
        "message.complete#3@b",
        "message.delta#4@a",
        "pong",
    ]
    conn.send_frame("after")
    assert wire.written[-1] == "after" and conn._writer is None


async def test_a_closing_socket_ends_the_connection_and_drops_later_frames() -> None:
    conn, wire, _ = wired()
    wire.closing = True
    conn.send_frame("lost")
    assert conn.closed
    assert offer(conn, ev(1)) is False
    assert wire.written == []


async def test_request_close_on_an_idle_wired_connection_closes_with_the_code() -> None:
    conn, wire, socket = wired()
    conn.send_frame("bye")
    conn.request_close(4403)
    await eventually(lambda: bool(socket.closes))
    assert socket.closes == [(4403, "closing")] and wire.written == ["bye"]


async def test_stopping_right_after_a_requested_close_still_sends_the_close_code() -> None:
    # The plugin's refusal of a revoked device can arrive before the session starts reading
    # frames; the session then stops the connection at once. The device must still learn
    # why (4403), not see the socket drop (1006) and retry.
    conn, wire, socket = wired()
    conn.send_frame("unauthorized")
    conn.request_close(4403)
    await conn.stop()
    assert wire.written == ["unauthorized"]
    assert socket.closes == [(4403, "closing")]


async def test_stopping_during_a_requested_close_to_a_stalled_socket_gives_up_in_bounded_time(
    make: Any,
) -> None:
    conn, socket = make()
    socket.block()
    conn.send_frame("a")
    conn.request_close(4403)
    await socket.in_send.wait()
    async with asyncio.timeout(CLOSE_FLUSH_S + 2):
        await conn.stop()
    assert socket.closes == []


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["message.delta", "message.complete"]), st.integers(0, 2)),
            st.tuples(st.sampled_from(["pause", "resume", "drain"]), st.just(0)),
        ),
        max_size=60,
    )
)
def test_a_paused_and_resumed_socket_gets_every_complete_and_the_newest_delta_in_order(
    steps: list[tuple[str, int]],
) -> None:
    async def scenario() -> tuple[list[str], list[tuple[int, str, int]]]:
        conn, wire, _ = wired()
        offered: list[tuple[int, str, int]] = []
        cursor = 0
        for kind, message in steps:
            if kind == "pause":
                wire.pause()
            elif kind == "resume":
                wire.resume()
            elif kind == "drain":
                for _ in range(3):
                    await asyncio.sleep(0)
            else:
                cursor += 1
                offered.append((cursor, kind, message))
                offer(conn, ev(cursor, kind, f"m{message}"))
        wire.resume()
        await eventually(lambda: conn.queued == 0 and conn._writer is None)
        await conn.stop()
        return wire.written, offered

    written, offered = asyncio.run(scenario())
    cursors = [int(text.split("#")[1].split("@")[0]) for text in written]
    assert cursors == sorted(set(cursors))
    completes = [c for c, kind, _ in offered if kind == "message.complete"]
    assert [c for c in cursors if c in completes] == completes
    for message in range(3):
        deltas = [c for c, kind, m in offered if kind == "message.delta" and m == message]
        if deltas:
            assert deltas[-1] in cursors
