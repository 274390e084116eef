"""Output Hermes sends that no device asked for (cron, background), through a real
controller on a real (memory) bus."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from canonical.model import Json
from edge.dialects.iris import IrisDialect
from edge.dialects.pheby import PhebyDialect
from gateway_plugin import upkeep
from gateway_plugin.channels.store import ChannelError
from gateway_plugin.delivery.outbox import Outbox
from tests.gateway_plugin.access.test_hellos import TENANT, _Rig, make_rig, rig
from tests.gateway_plugin.plugin_parts import IdleAgent

__all__ = ["make_rig", "rig"]  # the fixtures, shared with the hellos' tests

CRON_TEXT = "Cronjob Response: nightly\n(job_id: j1)\n-------------\n\nthe report"
HOME = ("android:default", None)


async def _outbox(rig: _Rig) -> list[Json]:
    """What the outbox holds once everything emitted so far has committed."""
    await rig.controller.sequencer.durable()
    return rig.controller.outbox.since(0)[0]


async def test_cron_output_during_a_users_run_is_a_cron_run_of_its_own(rig: _Rig) -> None:
    controller = rig.controller
    run, accepted = controller.turns.accept(HOME, controller.conversation_id(HOME))
    controller.emit(accepted)
    controller.on_send(HOME, "Roses are red", None)
    controller.on_send(HOME, CRON_TEXT, {"job_id": "j1"})
    controller.on_send(HOME, ", violets are blue", None)
    assert controller.turns.active(HOME) is run and run.text() == "Roses are red, violets are blue"
    cron = [
        e for e in (await _outbox(rig)) if e["type"] == "message.complete" and e["kind"] == "cron"
    ]
    assert len(cron) == 1 and cron[0]["run_id"] != run.run_id
    # Under the seed's header in place of Hermes' wrapper (docs/protocol/iris.md).
    assert cron[0]["text"] == "[Cron delivery: nightly]\n\nthe report"
    assert cron[0]["cron_job"] == {"id": "j1", "name": "nightly"}


async def test_output_for_an_archived_or_unknown_lane_is_refused_and_stored_nowhere(
    rig: _Rig,
) -> None:
    controller = rig.controller
    channel = controller.channels.create_channel("Reports")
    controller.channels.delete(channel.chat_id)
    before = len(await _outbox(rig))
    for lane in ((channel.chat_id, None), ("android:default", "t_999")):
        with pytest.raises(ChannelError):
            controller.on_send(lane, CRON_TEXT, {"job_id": "j1"})
    assert len(await _outbox(rig)) == before


def _command(frame_type: str, request_id: str, *, dialect: str = "iris", **fields: Any) -> Json:
    """A device's frame as its edge puts it on the bus: a canonical command."""
    codec = IrisDialect() if dialect == "iris" else PhebyDialect()
    decoded = codec.decode({"type": frame_type, **fields})
    return {
        "cmd": decoded["cmd"],
        "edge": "e1",
        "conn": f"c-{request_id}",
        "dialect": dialect,
        "device_id": "phone",
        "request_id": request_id,
        "args": decoded["args"],
    }


def _history(chat_id: str, request_id: str, **fields: Any) -> Json:
    return _command("history", request_id, chat_id=chat_id, limit=50, **fields)


async def test_an_archived_channel_keeps_its_history_readable(rig: _Rig) -> None:
    channel = rig.controller.channels.create_channel("Old trip")
    rig.controller.channels.delete(channel.chat_id)
    await rig.submit(_history(channel.chat_id, "h1"))
    [reply] = await rig.replies_for(1)
    assert reply["body"]["type"] == "history" and reply["body"]["chat_id"] == channel.chat_id


@pytest.mark.parametrize("before", ["u-c1", "draft-1f2e", "m12x"])
async def test_paging_from_an_id_of_no_message_in_the_history_is_a_bad_request_not_an_empty_page(
    rig: _Rig, before: str
) -> None:
    await rig.submit(_history("android:default", "h2", before_message_id=before))
    [reply] = await rig.replies_for(1)
    assert reply["body"]["type"] == "error" and reply["body"]["code"] == "bad_request"


class _StoppableAgent(IdleAgent):
    def __init__(self) -> None:
        self.stopped: list[tuple[str, str | None]] = []

    async def interrupt(self, lane: tuple[str, str | None], *, user_id: str) -> None:
        self.stopped.append(lane)


async def test_deleting_a_channel_stops_its_runs_and_announces_each_of_its_threads(
    make_rig: Callable[..., Any],
) -> None:
    agent = _StoppableAgent()
    rig: _Rig = await make_rig(agent=agent)
    try:
        controller = rig.controller
        channel = controller.channels.create_channel("Trips")
        controller.channels.set_default(channel.chat_id)  # threads live in the default one
        thread = controller.channels.create_thread(channel.chat_id, "Lisbon")
        controller.channels.set_default("android:default")
        lane = (thread.chat_id, thread.thread_id)
        controller.emit(controller.turns.accept(lane, thread.conversation_id)[1])
        await rig.submit(_command("channel.delete", "d1", chat_id=channel.chat_id))
        await rig.replies_for(1)
        assert agent.stopped == [lane]
        deleted = [
            (e["entry"]["chat_id"], e["entry"]["thread_id"])
            for e in (await _outbox(rig))
            if e["type"] == "channel.deleted"
        ]
        assert deleted == [(channel.chat_id, None), lane]
    finally:
        await rig.controller.stop()


class _BalkingAgent(IdleAgent):
    """Refuses its first message, as Hermes might when it is not ready."""

    def __init__(self) -> None:
        self.taken: list[str] = []

    async def submit(self, lane: Any, text: str, **kwargs: Any) -> None:
        if not self.taken and text == "first":
            self.taken.append("(refused)")
            raise RuntimeError("not ready")
        self.taken.append(text)


def _send(text: str, client_id: str) -> Json:
    return _command(
        "message.send",
        client_id,
        chat_id="android:default",
        text=text,
        client_id=client_id,
    )


async def test_a_send_the_agent_refuses_fails_its_run_and_frees_the_lane(
    make_rig: Callable[..., Any],
) -> None:
    agent = _BalkingAgent()
    rig: _Rig = await make_rig(agent=agent)
    try:
        await rig.submit(_send("first", "c1"))
        await rig.replies_for(1)  # send.accepted: the send is stored
        finished = [e for e in (await _outbox(rig)) if e["type"] == "run.finished"]
        assert [f["status"] for f in finished] == ["failed"] and "send it again" in finished[0][
            "error"
        ]
        await rig.submit(_send("second", "c2"))
        replies = await rig.replies_for(2)
        assert replies[1]["body"]["type"] == "send.accepted"  # not run_active
        assert agent.taken == ["(refused)", "second"]
    finally:
        await rig.controller.stop()


async def test_the_command_reader_outlives_an_error_and_answers_what_it_had_read(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = rig.controller.outbox.processed_replies
    failures: list[str] = []

    def locked_once(entry_ids: list[str]) -> dict[str, str | None]:
        if not failures:
            failures.append("database is locked")
            raise RuntimeError("database is locked")
        return real(entry_ids)

    monkeypatch.setattr(rig.controller.outbox, "processed_replies", locked_once)
    await rig.submit(_history("android:default", "h3"))
    [reply] = await rig.replies_for(1)
    assert failures and reply["body"]["type"] == "history"


async def test_a_command_marked_before_a_failure_in_its_batch_is_not_answered_again(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = rig.controller.outbox.mark_processed
    marks: list[str] = []

    def locked_at_the_second(entry_id: str, replies: str | None = None) -> None:
        marks.append(entry_id)
        if len(marks) == 2:
            raise RuntimeError("database is locked")
        real(entry_id, replies)

    monkeypatch.setattr(rig.controller.outbox, "mark_processed", locked_at_the_second)
    await rig.submit(_history("android:default", "h4"), _history("android:default", "h5"))
    # h5 was never marked, so it is read again; h4 was, and its XACK is simply owed.
    replies = await rig.replies_for(3)
    assert [r["body"]["request_id"] for r in replies] == ["h4", "h5", "h5"]


async def test_rows_another_process_appends_are_published_even_when_ours_follow_them(
    rig: _Rig, tmp_path: Path
) -> None:
    published: list[int] = []

    def on_event(kind: str, channel: str, payload: bytes) -> None:
        if kind == "event":
            published.append(json.loads(payload).get("cursor"))

    watcher = rig.bus.subscription("e-watch", on_event)
    await watcher.start()
    await watcher.add_tenant(TENANT)
    cron_process = Outbox(tmp_path / "android" / "outbox.db")  # a CLI cron run's own handle
    try:
        cron_process.append([{"type": "message", "text": "nightly"} for _ in range(2)])
    finally:
        cron_process.close()
    rig.controller.emit([{"type": "message", "text": "mine"}])  # cursor 3, right after
    for _ in range(100):
        if {1, 2, 3} <= set(published):
            break
        await asyncio.sleep(0.05)
    assert {1, 2, 3} <= set(published), published
    await watcher.close()


class _RecordingAgent(IdleAgent):
    def __init__(self) -> None:
        self.lanes: list[tuple[str, str | None]] = []

    async def submit(self, lane: tuple[str, str | None], text: str, **kwargs: Any) -> None:
        self.lanes.append(lane)


async def test_an_auto_threaded_send_taken_again_after_a_crash_goes_to_its_thread(
    make_rig: Callable[..., Any], tmp_path: Path
) -> None:
    agent = _RecordingAgent()
    rig: _Rig = await make_rig(agent=agent)
    try:
        rig.controller.channels.set_threads_enabled("android:default", True)
        frame = _send("plan the trip", "c-auto")
        frame["args"]["auto_thread"] = True
        await rig.submit(frame)
        [ack] = await rig.replies_for(1)
        thread = ("android:default", ack["body"]["thread_id"])
        assert thread[1] and agent.lanes == [thread]
        # A crash after the send was stored, before Hermes took it: no run, not dispatched.
        rig.controller.turns.runs.clear()
        with sqlite3.connect(tmp_path / "android" / "outbox.db") as db:
            db.execute("UPDATE idempotency SET dispatched = 0")
        await rig.submit(frame)  # the device sends it again
        await rig.replies_for(2)
        assert agent.lanes == [thread, thread]
    finally:
        await rig.controller.stop()


async def test_moving_the_default_announces_both_channels_and_moves_the_thread_rules(
    make_rig: Callable[..., Any],
) -> None:
    agent = _RecordingAgent()
    rig: _Rig = await make_rig(agent=agent)
    try:
        controller = rig.controller
        controller.channels.set_threads_enabled("android:default", True)  # moves with it
        work = controller.channels.create_channel("Work")
        await rig.submit(_command("channel.set_default", "s1", chat_id=work.chat_id))
        await rig.replies_for(1)
        announced = [
            (e["entry"]["chat_id"], e["entry"]["is_default"])
            for e in (await _outbox(rig))
            if e["type"] == "channel.renamed"
        ]
        assert announced == [("android:default", False), (work.chat_id, True)]
        # Auto-threading follows the default: a thread in Work, a flat send in the old one.
        for chat_id, client_id in ((work.chat_id, "c-w"), ("android:default", "c-d")):
            send = _command(
                "message.send",
                client_id,
                chat_id=chat_id,
                text="plan the trip",
                client_id=client_id,
                auto_thread=True,
            )
            await rig.submit(send)
        await rig.submit(_command("channel.create", "t1", kind="thread", name="Topic"))
        replies = await rig.replies_for(4)
        in_work, in_old, created = (r["body"] for r in replies[1:])
        assert in_work["type"] == "send.accepted" and in_work["thread_id"] is not None
        assert (in_old["type"], in_old["thread_id"]) == ("send.accepted", None)
        assert created["entry"]["parent_chat_id"] == work.chat_id
        assert agent.lanes == [(work.chat_id, in_work["thread_id"]), ("android:default", None)]
    finally:
        await rig.controller.stop()


def _auto_send(text: str, client_id: str) -> Json:
    frame = _send(text, client_id)
    frame["args"]["auto_thread"] = True
    return frame


async def test_an_auto_thread_whose_run_the_agent_refused_awaits_no_title(
    make_rig: Callable[..., Any],
) -> None:
    rig: _Rig = await make_rig(agent=_BalkingAgent())
    try:
        rig.controller.channels.set_threads_enabled("android:default", True)
        await rig.submit(_auto_send("first", "c1"))
        [ack] = await rig.replies_for(1)
        assert ack["body"]["thread_id"] is not None
        assert len(rig.controller.titles.pending) == 0
    finally:
        await rig.controller.stop()


async def test_the_sweep_forgets_titles_awaited_for_runs_that_are_gone(
    make_rig: Callable[..., Any],
) -> None:
    rig: _Rig = await make_rig(agent=_RecordingAgent())
    try:
        controller = rig.controller
        controller.channels.set_threads_enabled("android:default", True)
        await rig.submit(_auto_send("plan the trip", "c1"), _auto_send("pack the bags", "c2"))
        first, second = (
            ("android:default", r["body"]["thread_id"]) for r in await rig.replies_for(2)
        )
        assert first in controller.titles.pending and second in controller.titles.pending
        controller.turns.runs.pop(first)  # a run Hermes never reported the end of
        upkeep.expire_stale(controller)
        assert first not in controller.titles.pending and second in controller.titles.pending
    finally:
        await rig.controller.stop()


class _ForgettingAgent(IdleAgent):
    def __init__(self) -> None:
        self.forgotten: list[tuple[str, str | None]] = []

    def delete_transcript(self, lane: tuple[str, str | None]) -> int:
        self.forgotten.append(lane)
        return 1


async def test_deleting_the_moved_default_conversation_clears_it_and_keeps_the_channel(
    make_rig: Callable[..., Any],
) -> None:
    agent = _ForgettingAgent()
    rig: _Rig = await make_rig(agent=agent)
    try:
        controller = rig.controller
        controller.channels.set_threads_enabled("android:default", True)  # moves with it
        work = controller.channels.create_channel("Work")
        controller.channels.set_default(work.chat_id)
        delete = _command(
            "conversation.delete", "x1", dialect="pheby", conversation_id=work.conversation_id
        )
        await rig.submit(delete)
        [reply] = await rig.replies_for(1)
        assert reply["body"]["type"] == "result" and reply["body"]["op"] == "channel.delete"
        assert agent.forgotten == [(work.chat_id, None)]
        assert not controller.channels.lane_for(work.chat_id, None).archived
    finally:
        await rig.controller.stop()


async def test_a_sync_after_a_long_absence_counts_every_event_its_chunks_will_bring(
    rig: _Rig,
) -> None:
    outbox = rig.controller.outbox
    outbox.append([{"type": "channel.renamed", "lane": list(HOME)} for _ in range(620)])
    head = outbox.head()
    await rig.submit(_command("sync", "s1", cursor=head - 610))
    [reply] = await rig.replies_for(1)
    body = reply["body"]
    [ack] = body["before"]
    assert ack == {
        "type": "sync.ack",
        "from": head - 610,
        "head": head,
        "count": 610,
        "gap": False,
        "request_id": "s1",
    }
    assert body["more"] is True and len(body["events"]) == 500
