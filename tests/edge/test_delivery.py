"""edge.delivery.ReplayGate: exactly-once, in-order delivery across the replay seam."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from edge.delivery import ReplayGate


def test_a_live_event_newer_than_the_last_cursor_is_delivered_and_advances_it() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=3)
    assert gate.live(4, "e4") == ["e4"]
    assert gate.last_cursor == 4


def test_a_live_event_at_or_below_the_last_cursor_is_a_duplicate() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=5)
    assert gate.live(5, "e5") == []
    assert gate.live(2, "e2") == []
    assert gate.last_cursor == 5


def test_a_skipped_cursor_is_not_waited_for() -> None:
    gate: ReplayGate[str] = ReplayGate()
    assert gate.live(1, "e1") == ["e1"]
    assert gate.live(7, "e7") == ["e7"]
    assert gate.live(3, "e3") == []


def test_unsequenced_frames_pass_through_without_moving_the_cursor() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=9)
    assert gate.live(0, "typing") == ["typing"]
    assert gate.live(0, "typing") == ["typing"]
    assert gate.last_cursor == 9


def test_live_events_are_held_while_a_replay_is_in_flight() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=2)
    gate.begin_replay()
    assert gate.replaying is True
    assert gate.live(5, "e5") == []
    assert gate.live(0, "typing") == []
    assert gate.last_cursor == 2


def test_finish_replay_delivers_replayed_then_held_each_once_in_cursor_order() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=2)
    gate.begin_replay()
    gate.live(4, "e4-live")
    gate.live(5, "e5-live")
    gate.live(6, "e6-live")
    out, _ = gate.finish_replay([(3, "e3"), (4, "e4"), (5, "e5")])
    assert out == ["e3", "e4", "e5", "e6-live"]
    assert gate.last_cursor == 6
    assert gate.replaying is False


def test_replayed_events_the_device_already_has_are_dropped() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=4)
    gate.begin_replay()
    assert gate.finish_replay([(3, "e3"), (4, "e4"), (5, "e5")]) == (["e5"], False)


def test_an_empty_replay_releases_the_held_events() -> None:
    gate: ReplayGate[str] = ReplayGate(last_cursor=1)
    gate.begin_replay()
    gate.live(2, "e2")
    gate.live(0, "typing")
    assert gate.finish_replay([]) == (["e2", "typing"], False)
    assert gate.live(3, "e3") == ["e3"]


def test_after_finish_replay_live_events_flow_again() -> None:
    gate: ReplayGate[str] = ReplayGate()
    gate.begin_replay()
    gate.finish_replay([(1, "e1")])
    assert gate.live(1, "e1") == []
    assert gate.live(2, "e2") == ["e2"]


def test_held_events_do_not_leak_into_the_next_replay() -> None:
    gate: ReplayGate[str] = ReplayGate()
    gate.begin_replay()
    gate.live(1, "e1")
    assert gate.finish_replay([]) == (["e1"], False)
    gate.begin_replay()
    assert gate.finish_replay([]) == ([], False)


# --------------------------------------------------------------------------- the property
#
# The world: the plugin appends events to an outbox (cursors 1..n). Streaming deltas are
# cumulative, so a message's older delta is deleted from the outbox when the next one is
# appended. Every event is also published live, but only to the connection that is up at
# that moment, and only delivered when the bus gets round to it (the doorbell is
# at-most-once: a connection that drops loses what was still on its way). A device
# (re)connects with a new gate at the last cursor it received, begins a replay, and the
# replay (outbox events after that cursor, read when the plugin answers) arrives later.


@dataclass
class Event:
    cursor: int
    message: int | None  # a delta of this message, or None for a non-coalescable event


@dataclass
class Link:
    gate: ReplayGate[Event]
    pipe: list[Event] = field(default_factory=list)  # published, not yet delivered
    replay_pending: bool = True


@dataclass
class World:
    outbox: list[Event] = field(default_factory=list)
    next_cursor: int = 1
    link: Link | None = None
    received: list[Event] = field(default_factory=list)
    emitted: dict[int, Event] = field(default_factory=dict)

    @property
    def device_cursor(self) -> int:
        return self.received[-1].cursor if self.received else 0

    def emit(self, message: int | None) -> None:
        event = Event(self.next_cursor, message)
        self.next_cursor += 1
        self.emitted[event.cursor] = event
        if message is not None:
            self.outbox = [e for e in self.outbox if e.message != message]
        self.outbox.append(event)
        if self.link is not None:
            self.link.pipe.append(event)

    def receive(self, events: list[Event]) -> None:
        self.received.extend(events)

    def disconnect(self) -> None:
        self.link = None

    def connect(self) -> None:
        gate: ReplayGate[Event] = ReplayGate(last_cursor=self.device_cursor)
        gate.begin_replay()
        self.link = Link(gate)

    def replay_arrives(self) -> None:
        link = self.link
        if link is None or not link.replay_pending:
            return
        link.replay_pending = False
        after = link.gate.last_cursor
        replayed = [(e.cursor, e) for e in self.outbox if e.cursor > after]
        self.receive(link.gate.finish_replay(replayed)[0])

    def deliver_live(self) -> None:
        link = self.link
        if link is None or not link.pipe:
            return
        event = link.pipe.pop(0)
        self.receive(link.gate.live(event.cursor, event))

    def settle(self) -> None:
        """Let everything in flight land: the device ends connected and caught up."""
        if self.link is None:
            self.connect()
        self.replay_arrives()
        while self.link is not None and self.link.pipe:
            self.deliver_live()


ACTIONS = st.one_of(
    st.tuples(st.just("emit"), st.one_of(st.none(), st.integers(0, 2))),
    st.tuples(st.sampled_from(["disconnect", "reconnect", "replay", "live", "live"]), st.none()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(ACTIONS, max_size=60), st.booleans())
def test_a_device_receives_every_outbox_event_exactly_once_in_cursor_order(
    actions: list[tuple[str, int | None]], starts_connected: bool
) -> None:
    world = World()
    if starts_connected:
        world.connect()
    for action, message in actions:
        if action == "emit":
            world.emit(message)
        elif action == "disconnect":
            world.disconnect()
        elif action == "reconnect":
            world.disconnect()
            world.connect()
        elif action == "replay":
            world.replay_arrives()
        elif action == "live":
            world.deliver_live()
    world.settle()

    cursors = [e.cursor for e in world.received]
    # Strictly increasing: no duplicate, nothing out of order, across every reconnect.
    assert all(a < b for a, b in zip(cursors, cursors[1:], strict=False)), cursors
    # Only real events, exactly as emitted.
    assert all(world.emitted[e.cursor] is e for e in world.received)
    # Every event the outbox still holds reached the device (exactly once, by the above).
    assert {e.cursor for e in world.outbox} <= set(cursors)
    # What the device got beyond the outbox is only superseded deltas, seen live in time.
    for event in world.received:
        if event not in world.outbox:
            assert event.message is not None
            later = [e for e in world.outbox if e.message == event.message]
            assert later and later[0].cursor > event.cursor
    # The device's view of each message ends at that message's newest delta.
    for message in {e.message for e in world.outbox if e.message is not None}:
        newest = max(e.cursor for e in world.emitted.values() if e.message == message)
        assert [e for e in world.received if e.message == message][-1].cursor == newest


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 30), max_size=30), st.lists(st.integers(1, 30), max_size=30))
def test_finish_replay_never_yields_a_cursor_twice_or_backwards(
    held: list[int], replayed: list[int]
) -> None:
    gate: ReplayGate[int] = ReplayGate(last_cursor=5)
    gate.begin_replay()
    for cursor in held:
        gate.live(cursor, cursor)
    out, _ = gate.finish_replay([(c, c) for c in sorted(set(replayed))])
    assert all(c > 5 for c in out)
    assert all(a < b for a, b in zip(out, out[1:], strict=False))
    assert set(c for c in replayed if c > 5) <= set(out)
