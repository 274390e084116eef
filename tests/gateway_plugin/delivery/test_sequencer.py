"""gateway_plugin.delivery.sequencer: group commit of the outbox, on a real SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canonical.model import Json
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.delivery.sequencer import Batches, Sequencer
from gateway_plugin.storage import locked
from gateway_plugin.storage.threads import StorageBusy

# -------------------------------------------------------------------- the batches (pure)

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(), max_size=4)),
        st.tuples(st.just("take"), st.just([])),
        st.tuples(st.just("done"), st.just([])),
    ),
    max_size=60,
)


@given(_OPS)
def test_batches_keep_every_item_once_in_the_order_queued(ops: list[tuple[str, list[int]]]) -> None:
    batches: Batches[int] = Batches()
    queued: list[int] = []
    taken: list[int] = []
    numbers: list[int] = []
    in_flight: list[int] = []
    counter = 0
    for op, items in ops:
        if op == "add":
            fresh = list(range(counter, counter + len(items)))
            counter += len(items)
            number = batches.add(fresh)
            if fresh or number not in numbers:
                queued.extend(fresh)
            assert batches.newest() == number
        elif op == "take":
            ready = batches.ready()
            batch = batches.take()
            assert ready == (batch is not None and not in_flight)
            if batch is not None:
                assert not numbers or batch.number > numbers[-1]  # taken in order
                numbers.append(batch.number)
                in_flight.append(batch.number)
                taken.extend(batch.items)
        elif in_flight:
            batches.done(in_flight.pop(0))
    rest = batches.take()
    if rest is not None:
        taken.extend(rest.items)
    assert taken == queued  # nothing lost, nothing twice, nothing reordered


def test_a_batch_done_out_of_order_is_refused() -> None:
    batches: Batches[int] = Batches()
    batches.add([1])
    first = batches.take()
    batches.add([2])
    second = batches.take()
    assert first is not None and second is not None
    with pytest.raises(RuntimeError):
        batches.done(second.number)


def test_what_is_queued_while_a_batch_is_in_flight_waits_for_it() -> None:
    batches: Batches[int] = Batches()
    batches.add([1])
    first = batches.take()
    assert first is not None
    batches.add([2])
    batches.add([3])
    assert not batches.ready() and len(batches) == 2
    batches.done(first.number)
    assert batches.ready()
    second = batches.take()
    assert second is not None and second.items == [2, 3]


# -------------------------------------------------------------------- the sequencer


class _Bell:
    """What the sequencer hands to the publisher, in order."""

    def __init__(self) -> None:
        self.frames: list[Json] = []

    def ring(self, sequenced: list[Json], payloads: list[bytes]) -> None:
        assert len(sequenced) == len(payloads)
        self.frames.extend(sequenced)

    def publish(self, events: list[Json]) -> None:
        self.frames.extend(events)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[tuple[Sequencer, _Bell, Outbox]]:
    outbox = Outbox(tmp_path / "outbox.db")
    bell = _Bell()
    sequencer = Sequencer(outbox, ring=bell.ring, publish=bell.publish)
    yield sequencer, bell, outbox
    await sequencer.stop()
    outbox.close()


def _message(n: int) -> Json:
    return {"type": "message", "text": str(n)}


async def test_the_events_of_one_loop_turn_are_one_transaction_published_once_committed(
    rig: tuple[Sequencer, _Bell, Outbox],
) -> None:
    sequencer, bell, outbox = rig
    for n in range(50):
        sequencer.emit([_message(n)])
    assert bell.frames == [] and outbox.head() == 0  # queued only
    await sequencer.durable()
    assert sequencer.batches_committed == 1 and sequencer.events_committed == 50
    assert [e["cursor"] for e in bell.frames] == list(range(1, 51))
    assert [e["text"] for e in outbox.since(0)[0]] == [str(n) for n in range(50)]


async def test_events_queued_while_a_batch_commits_form_the_next_one_in_cursor_order(
    rig: tuple[Sequencer, _Bell, Outbox],
) -> None:
    sequencer, bell, outbox = rig
    for n in range(200):
        sequencer.emit([_message(n)])
        if n % 7 == 0:
            await asyncio.sleep(0)
    await sequencer.durable()
    assert 1 < sequencer.batches_committed < 200
    assert [e["cursor"] for e in bell.frames] == list(range(1, 201))
    assert [e["text"] for e in bell.frames] == [str(n) for n in range(200)]


async def test_an_unsequenced_event_goes_out_in_its_place_and_is_never_stored(
    rig: tuple[Sequencer, _Bell, Outbox],
) -> None:
    sequencer, bell, outbox = rig
    sequencer.emit([_message(1)])
    sequencer.publish([{"type": "typing", "on": False}])
    sequencer.emit([_message(2)])
    await sequencer.durable()
    assert [e["type"] for e in bell.frames] == ["message", "typing", "message"]
    assert outbox.head() == 2


async def test_a_job_runs_behind_the_events_queued_before_it_and_publishes_in_order(
    rig: tuple[Sequencer, _Bell, Outbox],
) -> None:
    sequencer, bell, outbox = rig
    sequencer.emit([_message(1)])
    run = {"run_id": "r1", "lane": ["android:default", None], "conversation_id": "c"}
    sent = await sequencer.run(
        outbox.record_send, "k1", {"ok": True}, [_message(2)], run, then=bell.publish
    )
    assert [e["cursor"] for e in sent] == [2]
    assert [e["cursor"] for e in bell.frames] == [1, 2]
    assert [r["run_id"] for r in outbox.active_runs()] == ["r1"]
    sequencer.emit([_message(3)], finished=["r1"])  # the run's row goes with its end
    assert [e["cursor"] for e in await sequencer.append([_message(4)])] == [4]
    assert outbox.active_runs() == []


async def test_stop_commits_and_publishes_what_is_queued(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.db")
    bell = _Bell()
    sequencer = Sequencer(outbox, ring=bell.ring, publish=bell.publish)
    for n in range(10):
        sequencer.emit([_message(n)])
    await sequencer.stop()
    assert len(bell.frames) == 10 and outbox.head() == 10
    outbox.close()
    reopened = Outbox(tmp_path / "outbox.db")
    assert reopened.head() == 10
    reopened.close()


async def test_a_file_another_process_holds_locked_delays_the_batch_never_the_loop(
    rig: tuple[Sequencer, _Bell, Outbox], tmp_path: Path
) -> None:
    sequencer, bell, outbox = rig
    other = sqlite3.connect(str(tmp_path / "outbox.db"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    released = threading.Event()
    try:
        sequencer.emit([_message(1)])
        ticks = 0
        for _ in range(20):  # the loop keeps turning while the storage thread waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and bell.frames == []  # nothing published before it is durable
        other.execute("COMMIT")
        released.set()
        await sequencer.durable()
        assert [e["cursor"] for e in bell.frames] == [1]
    finally:
        if not released.is_set():
            other.execute("ROLLBACK")
        other.close()


async def test_a_reserved_place_holds_back_what_follows_until_it_is_filled(
    rig: tuple[Sequencer, _Bell, Outbox],
) -> None:
    sequencer, bell, outbox = rig
    sequencer.emit([_message(1)])
    place = sequencer.reserve()
    sequencer.emit([_message(3)])
    job = asyncio.ensure_future(sequencer.run(outbox.head))
    for _ in range(5):
        await asyncio.sleep(0.01)
    assert bell.frames == [] and outbox.head() == 0 and not job.done()
    sequencer.fill(place, [_message(2)])
    assert await job == 3  # the job ran behind all three
    assert [e["text"] for e in bell.frames] == ["1", "2", "3"]
    assert [e["cursor"] for e in bell.frames] == [1, 2, 3]


async def test_a_job_locked_out_past_its_retries_is_an_unavailable_error(
    rig: tuple[Sequencer, _Bell, Outbox], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locked, "FIRST_WAIT_S", 0.001)
    monkeypatch.setattr(locked, "MAX_WAIT_S", 0.002)
    sequencer, _, _ = rig
    path = tmp_path / "other.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=0.02)
    try:
        with pytest.raises(StorageBusy) as caught:
            await sequencer.run(writer.execute, "INSERT INTO t VALUES (1)")
        assert caught.value.code == "unavailable" and "outbox.db" in caught.value.message
        holder.execute("COMMIT")
        await sequencer.run(writer.execute, "INSERT INTO t VALUES (2)")
        assert holder.execute("SELECT x FROM t").fetchall() == [(2,)]
    finally:
        writer.close()
        holder.close()
