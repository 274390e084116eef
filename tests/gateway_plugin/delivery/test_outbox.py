"""gateway_plugin.delivery.outbox.Outbox: the sequenced log devices replay from, on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
import types
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gateway_plugin.delivery.outbox as outbox_module
from canonical.model import Json
from gateway_plugin.delivery.message_ids import SentMessage, text_digest
from gateway_plugin.delivery.outbox import Outbox


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[Outbox]:
    box = Outbox(tmp_path / "android" / "outbox.db")
    yield box
    box.close()


class Clock:
    def __init__(self, now: float = 1_767_225_600.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(outbox_module, "time", types.SimpleNamespace(time=fake.time))
    return fake


def delta(message: str, text: str) -> Json:
    return {"type": "message.delta", "message_id": message, "text": text, "lane": ["c", None]}


def complete(message: str, text: str = "done") -> Json:
    return {"type": "message.complete", "message_id": message, "text": text}


def other(n: int = 0) -> Json:
    return {"type": "run.accepted", "run_id": f"r{n}", "lane": ["c", None]}


def cursors(events: list[Json]) -> list[int]:
    return [e["cursor"] for e in events]


# --------------------------------------------------------------------------- events


def test_a_new_outbox_is_empty_at_cursor_zero(outbox: Outbox) -> None:
    assert outbox.head() == 0
    assert outbox.since(0) == ([], False)
    assert outbox.trimmed_upto() == 0


def test_append_assigns_increasing_cursors_and_returns_the_sequenced_events(
    outbox: Outbox,
) -> None:
    first = outbox.append([other(1), other(2)])
    second = outbox.append([other(3)])
    assert cursors(first) == [1, 2]
    assert cursors(second) == [3]
    assert first[0] == {**other(1), "cursor": 1}
    assert outbox.head() == 3


def test_stored_events_round_trip_unicode_and_nesting(outbox: Outbox) -> None:
    event = {"type": "tool.event", "args_redacted": {"q": ["猫", None, 1.5]}, "text": "⚡ é"}
    outbox.append([event])
    assert outbox.since(0)[0] == [{**event, "cursor": 1}]


def test_a_lone_surrogate_is_stored_sent_and_returned_as_the_replacement_character(
    outbox: Outbox,
) -> None:
    # A model's "\\ud83d" escape decodes to half a pair, which UTF-8 (SQLite, sockets) cannot hold.
    [(event, body)] = outbox.append_encoded([{"type": "message", "text": "cut \ud83d here"}])
    assert event["text"] == "cut \ufffd here" == json.loads(body.encode("utf-8"))["text"]
    assert outbox.since(0)[0] == [event]


def test_an_empty_append_changes_nothing(outbox: Outbox) -> None:
    assert outbox.append([]) == []
    assert outbox.head() == 0


def test_only_the_latest_delta_of_a_message_survives(outbox: Outbox) -> None:
    outbox.append([delta("m1", "He")])
    outbox.append([delta("m2", "Other")])
    outbox.append([delta("m1", "Hello")])
    outbox.append([delta("m1", "Hello, world")])
    events, _ = outbox.since(0)
    assert [(e["cursor"], e["message_id"], e["text"]) for e in events] == [
        (2, "m2", "Other"),
        (4, "m1", "Hello, world"),
    ]


def test_deltas_coalesce_within_one_append(outbox: Outbox) -> None:
    outbox.append([delta("m1", "a"), delta("m1", "ab"), other()])
    assert [(e["type"], e["cursor"]) for e in outbox.since(0)[0]] == [
        ("message.delta", 2),
        ("run.accepted", 3),
    ]


def test_message_complete_removes_its_deltas_but_not_other_messages(outbox: Outbox) -> None:
    outbox.append([delta("m1", "Hel"), delta("m2", "x")])
    outbox.append([complete("m1", "Hello")])
    events, _ = outbox.since(0)
    assert [(e["type"], e["message_id"]) for e in events] == [
        ("message.delta", "m2"),
        ("message.complete", "m1"),
    ]


def test_a_reopened_outbox_still_replaces_and_completes_a_delta_written_before(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox.db"
    first = Outbox(path)
    first.append([delta("m1", "He"), delta("m2", "x")])
    first.close()
    # A gateway restart: the kept deltas are read back from the file.
    with closing(Outbox(path)) as box:
        assert box.last_delta_text("m1") == "He"
        box.append([delta("m1", "Hello")])
        assert [(e["message_id"], e["text"]) for e in box.since(0)[0]] == [
            ("m2", "x"),
            ("m1", "Hello"),
        ]
        box.append([complete("m2", "xy")])
        assert [(e["type"], e["message_id"]) for e in box.since(0)[0]] == [
            ("message.delta", "m1"),
            ("message.complete", "m2"),
        ]


def test_a_failed_append_leaves_the_kept_delta_in_place_and_known(outbox: Outbox) -> None:
    outbox.append([delta("m1", "a")])
    with pytest.raises(TypeError):
        outbox.append([delta("m1", object())])  # type: ignore[arg-type]  # not JSON
    assert outbox.last_delta_text("m1") == "a"
    outbox.append([delta("m1", "ab")])
    assert [(e["cursor"], e["text"]) for e in outbox.since(0)[0]] == [(2, "ab")]  # 2: rolled back


def test_another_processs_cron_run_and_the_controllers_stream_coalesce_independently(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox.db"
    with closing(Outbox(path)) as controller:
        controller.append([delta("m1", "Hel")])
        with closing(Outbox(path)) as cron:  # a cron delivery from a CLI process
            cron.append([delta("cron-1", "Report"), complete("cron-1", "Report")])
        controller.append([delta("m1", "Hello")])
        controller.append([complete("m1", "Hello!")])
        assert [(e["type"], e["message_id"]) for e in controller.since(0)[0]] == [
            ("message.complete", "cron-1"),
            ("message.complete", "m1"),
        ]


def test_trimmed_deltas_are_forgotten(outbox: Outbox, clock: Clock) -> None:
    outbox.append([delta("m1", "a")])
    clock.now += 60
    outbox.trim(older_than=clock.now)
    assert outbox.last_delta_text("m1") == ""
    outbox.append([delta("m1", "ab")])
    assert [(e["cursor"], e["text"]) for e in outbox.since(0)[0]] == [(2, "ab")]


def test_cursors_are_never_reused_after_coalescing(outbox: Outbox) -> None:
    outbox.append([delta("m1", "a")])
    outbox.append([complete("m1")])
    assert cursors(outbox.append([other()])) == [3]
    assert outbox.head() == 3


def test_cursors_continue_after_the_newest_rows_were_coalesced_or_trimmed_away(
    outbox: Outbox, clock: Clock
) -> None:
    outbox.append([other(1), delta("m1", "a")])
    outbox.append([complete("m1")])  # drops cursor 2, the newest row but one
    clock.now += 60
    assert outbox.trim(older_than=clock.now) == 2  # the table is empty now
    assert cursors(outbox.append([other(2)])) == [4]


def test_the_encoded_body_is_the_stored_event_with_its_cursor(outbox: Outbox) -> None:
    [(event, body)] = outbox.append_encoded([other(1)])
    assert json.loads(body) == event == {**other(1), "cursor": 1}
    assert outbox.since(0)[0] == [event]


def test_since_returns_events_after_the_cursor_oldest_first(outbox: Outbox) -> None:
    outbox.append([other(n) for n in range(6)])
    events, gap = outbox.since(3)
    assert cursors(events) == [4, 5, 6]
    assert gap is False
    assert outbox.since(6) == ([], False)
    assert cursors(outbox.since(0, limit=2)[0]) == [1, 2]


def test_trim_drops_older_events_and_later_replays_from_before_it_report_a_gap(
    outbox: Outbox, clock: Clock
) -> None:
    outbox.append([other(1), other(2)])
    clock.now += 3600
    outbox.append([other(3)])
    clock.now += 10
    assert outbox.trim(older_than=clock.now - 1800) == 2
    assert outbox.trimmed_upto() == 2
    events, gap = outbox.since(0)
    assert cursors(events) == [3]
    assert gap is True
    assert outbox.since(1)[1] is True
    assert outbox.since(2) == (events, False)


def test_trim_keeps_newer_events(outbox: Outbox, clock: Clock) -> None:
    outbox.append([other(1)])
    clock.now += 10
    outbox.append([other(2), delta("m", "x")])
    assert outbox.trim(older_than=clock.now - 5) == 1
    assert cursors(outbox.since(0)[0]) == [2, 3]
    assert outbox.trim(older_than=clock.now - 5) == 0
    assert outbox.trimmed_upto() == 1


def test_trimmed_upto_never_moves_back(outbox: Outbox, clock: Clock) -> None:
    outbox.append([other(1), other(2)])
    clock.now += 10
    outbox.trim(older_than=clock.now)
    assert outbox.trimmed_upto() == 2
    outbox.trim(older_than=clock.now - 100)
    assert outbox.trimmed_upto() == 2


def test_trim_walks_past_more_old_events_than_one_chunk_reads(outbox: Outbox, clock: Clock) -> None:
    outbox.append([other(n) for n in range(2500)])
    clock.now += 3600
    outbox.append([other(9999)])
    assert outbox.trim(older_than=clock.now - 1800) == 2500
    assert cursors(outbox.since(0)[0]) == [2501]
    assert outbox.trimmed_upto() == 2500


def test_trim_stops_at_the_first_newer_event_even_if_an_older_one_follows_it(
    outbox: Outbox, clock: Clock
) -> None:
    outbox.append([other(1)])
    clock.now += 3600
    outbox.append([other(2)])
    clock.now -= 3600  # the wall clock stepped back
    outbox.append([other(3)])
    clock.now += 3600
    assert outbox.trim(older_than=clock.now - 1800) == 1
    assert cursors(outbox.since(0)[0]) == [2, 3]


# --------------------------------------------------------------------------- idempotency


def test_record_send_stores_the_result_events_and_run_together(outbox: Outbox) -> None:
    result = {"run_id": "r1", "conversation_id": "c"}
    run = {"run_id": "r1", "lane": ["android:default", None], "conversation_id": "c"}
    sequenced = outbox.record_send("iris:cl-1", result, [other(1), other(2)], run)
    assert cursors(sequenced) == [1, 2]
    assert outbox.idem_get("iris:cl-1") == (result, False)
    assert outbox.since(0)[0] == sequenced
    assert outbox.active_runs() == [
        {"run_id": "r1", "lane": ["android:default", None], "conversation_id": "c"}
    ]


def test_record_send_without_a_key_or_run_only_sequences_events(outbox: Outbox) -> None:
    assert cursors(outbox.record_send(None, {}, [other()], None)) == [1]
    assert outbox.active_runs() == []


def test_a_sends_message_ids_are_recorded_with_it_per_conversation_in_order(
    outbox: Outbox,
) -> None:
    first = SentMessage("u-a", "r1", 10.0, 2, text_digest("hi"))
    second = SentMessage("u-b", "r2", 20.0, 4, text_digest("more"))
    outbox.record_send("iris:b", {}, [other()], None, second, "c")
    outbox.record_send("iris:a", {}, [other()], None, first, "c")
    outbox.record_send("iris:x", {}, [other()], None, SentMessage("u-x", None, 5.0, 0, ""), "d")
    assert outbox.sent_messages("c") == [first, second]
    assert outbox.sent_messages("nowhere") == []


def test_count_after_counts_the_events_held_in_a_cursor_range(outbox: Outbox) -> None:
    outbox.append([other(n) for n in range(6)])
    assert outbox.count_after(0, 6) == 6
    assert outbox.count_after(2, 5) == 3
    assert outbox.count_after(6, 6) == 0


def test_an_unknown_idempotency_key_has_no_record(outbox: Outbox) -> None:
    assert outbox.idem_get("iris:nope") is None


def test_mark_dispatched_flags_the_record(outbox: Outbox) -> None:
    outbox.record_send("k", {"run_id": "r1"}, [], None)
    outbox.mark_dispatched("k")
    assert outbox.idem_get("k") == ({"run_id": "r1"}, True)
    outbox.mark_dispatched("unknown")  # harmless


def test_a_duplicate_key_raises_integrity_error_and_stores_nothing_of_the_second_send(
    outbox: Outbox,
) -> None:
    run = {"run_id": "r1", "lane": ["c", None]}
    outbox.record_send("k", {"run_id": "r1"}, [other(1)], run)
    with pytest.raises(sqlite3.IntegrityError):
        outbox.record_send("k", {"run_id": "r2"}, [other(2)], {"run_id": "r2", "lane": ["c", None]})
    assert outbox.idem_get("k") == ({"run_id": "r1"}, False)
    assert cursors(outbox.since(0)[0]) == [1]
    assert [r["run_id"] for r in outbox.active_runs()] == ["r1"]
    assert cursors(outbox.append([other(3)])) == [2]


def test_trim_drops_old_idempotency_records(outbox: Outbox, clock: Clock) -> None:
    outbox.record_send("old", {"run_id": "r1"}, [], None)
    clock.now += 100
    outbox.record_send("new", {"run_id": "r2"}, [], None)
    outbox.trim(older_than=clock.now - 50)
    assert outbox.idem_get("old") is None
    assert outbox.idem_get("new") is not None


# --------------------------------------------------------------------------- runs, acks, misc


def test_finish_run_removes_it_from_the_active_runs(outbox: Outbox) -> None:
    for n in (1, 2):
        outbox.record_send(None, {}, [], {"run_id": f"r{n}", "lane": ["c", f"t{n}"]})
    outbox.finish_run("r1")
    assert outbox.active_runs() == [{"run_id": "r2", "lane": ["c", "t2"], "conversation_id": None}]
    outbox.finish_run("r1")
    outbox.finish_run("r2")
    assert outbox.active_runs() == []


def test_device_acks_only_move_forward(outbox: Outbox) -> None:
    outbox.append([other(n) for n in range(10)])
    assert outbox.ack("phone", 5) == 5
    assert outbox.ack("phone", 3) == 5
    assert outbox.ack("phone", 9) == 9
    assert outbox.ack("tablet", 1) == 1
    assert outbox.acks() == {"phone": 9, "tablet": 1}


def test_an_ack_past_the_last_cursor_given_out_counts_as_that_cursor(outbox: Outbox) -> None:
    outbox.append([other(n) for n in range(3)])
    assert outbox.ack("phone", 2**62) == 3
    assert outbox.ack_many([("tablet", 10**15), ("desk", 2)]) == {"tablet": 3, "desk": 2}


def test_last_delta_text_is_the_newest_streamed_text_until_the_message_completes(
    outbox: Outbox,
) -> None:
    assert outbox.last_delta_text("m1") == ""
    outbox.append([delta("m1", "Hel")])
    outbox.append([delta("m1", "Hello")])
    assert outbox.last_delta_text("m1") == "Hello"
    outbox.append([complete("m1", "Hello!")])
    assert outbox.last_delta_text("m1") == ""


def test_processed_entries_are_remembered_with_their_replies_and_pruned_with_age(
    outbox: Outbox, clock: Clock
) -> None:
    assert outbox.was_processed("1-1") is False
    outbox.mark_processed("1-1", '[["reply", {"type": "result"}]]')
    outbox.mark_processed("1-1")  # again: the first record stays
    assert outbox.processed_replies(["1-1", "3-1"]) == {"1-1": '[["reply", {"type": "result"}]]'}
    clock.now += 100
    outbox.mark_processed("2-1")
    outbox.trim(older_than=clock.now)  # the events' retention leaves the records alone
    assert outbox.processed_count() == 2
    assert outbox.prune_processed(before=clock.now - 50) == 1
    assert outbox.was_processed("1-1") is False
    assert outbox.was_processed("2-1") is True


def test_a_batch_of_entries_is_checked_and_marked_at_once_and_survives_a_reopen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    ids = [f"{n}-0" for n in range(1200)]  # more than one query's worth of parameters
    box.mark_processed_many(ids[:700])
    box.mark_processed_many(ids[600:700])  # again: ignored
    assert box.processed_among(ids) == set(ids[:700])
    assert box.processed_among([]) == set()
    box.close()
    again = Outbox(path)
    try:
        assert again.processed_among(["0-0", "699-0", "700-0"]) == {"0-0", "699-0"}
    finally:
        again.close()


def test_acks_of_several_devices_are_stored_at_once_and_only_move_forward(
    outbox: Outbox,
) -> None:
    outbox.append([other(n) for n in range(10)])
    outbox.ack("phone", 7)
    assert outbox.ack_many([("phone", 5), ("tablet", 3), ("desk", 9)]) == {
        "phone": 7,
        "tablet": 3,
        "desk": 9,
    }
    assert outbox.ack_many([("tablet", 4), ("tablet", 2)]) == {"tablet": 4}
    assert outbox.acks() == {"phone": 7, "tablet": 4, "desk": 9}


def test_meta_values_are_listed_by_prefix(outbox: Outbox) -> None:
    outbox.set_meta("yolo:s1", "1")
    outbox.set_meta("yolo:s2", "1")
    outbox.set_meta("other:x", "1")
    assert sorted(outbox.meta_keys("yolo:")) == ["s1", "s2"]
    outbox.delete_meta("yolo:s1")
    assert outbox.meta_keys("yolo:") == ["s2"]


def test_a_reopened_outbox_continues_the_cursor_sequence_and_keeps_everything(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    box.append([other(1), delta("m", "x")])
    box.record_send("k", {"run_id": "r"}, [other(2)], {"run_id": "r", "lane": ["c", None]})
    box.ack("phone", 2)
    box.mark_processed("9-9")
    clock.now += 10
    box.trim(older_than=clock.now - 5)  # everything so far is older: the log is empty
    box.close()

    again = Outbox(path)
    try:
        assert again.head() == 3
        assert cursors(again.append([other(3)])) == [4]
        assert again.trimmed_upto() == 3
        assert again.since(0) == ([{**other(3), "cursor": 4}], True)
        assert again.acks() == {"phone": 2}
        assert again.active_runs()[0]["run_id"] == "r"
    finally:
        again.close()


def test_the_outbox_file_uses_write_ahead_logging(outbox: Outbox) -> None:
    conn = sqlite3.connect(outbox.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


# --------------------------------------------------------------------------- property

OPS = st.lists(
    st.lists(
        st.one_of(
            st.tuples(st.just("delta"), st.integers(0, 3), st.text(max_size=5)),
            st.tuples(st.just("complete"), st.integers(0, 3), st.text(max_size=5)),
            st.tuples(st.just("other"), st.integers(0, 3), st.just("")),
        ),
        min_size=1,
        max_size=4,
    ),
    max_size=15,
)


def build(op: tuple[str, int, str]) -> Json:
    kind, message, text = op
    if kind == "delta":
        return delta(f"m{message}", text)
    if kind == "complete":
        return complete(f"m{message}", text)
    return other(message)


@settings(max_examples=120, deadline=None)
@given(OPS, st.data())
def test_any_append_sequence_keeps_cursors_increasing_and_one_delta_per_message(
    batches: list[list[tuple[str, int, str]]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as root:
        box = Outbox(Path(root) / "outbox.db")
        try:
            model: list[Json] = []  # what should survive, in cursor order
            last = 0
            for batch in batches:
                if data.draw(st.booleans(), label="reopen first"):  # a gateway restart
                    box.close()
                    box = Outbox(Path(root) / "outbox.db")
                sequenced = box.append([build(op) for op in batch])
                for event in sequenced:
                    assert event["cursor"] > last
                    last = event["cursor"]
                    if event["type"] in ("message.delta", "message.complete"):
                        model = [
                            e
                            for e in model
                            if not (
                                e["type"] == "message.delta"
                                and e["message_id"] == event["message_id"]
                            )
                        ]
                    model.append(event)

            survivors, gap = box.since(0)
            assert survivors == model
            assert gap is False
            deltas = [e["message_id"] for e in survivors if e["type"] == "message.delta"]
            assert len(deltas) == len(set(deltas))
            assert box.head() == last

            cut = data.draw(st.integers(0, last + 1), label="since")
            assert box.since(cut)[0] == [e for e in model if e["cursor"] > cut]
        finally:
            box.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("append"),
                st.lists(st.sampled_from(["delta", "complete", "other"]), min_size=1, max_size=3),
            ),
            st.tuples(st.just("trim"), st.just([])),
            st.tuples(st.just("reopen"), st.just([])),
        ),
        max_size=20,
    )
)
def test_cursors_are_never_given_out_twice_across_coalescing_trimming_and_reopening(
    steps: list[tuple[str, list[str]]],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "outbox.db"
        box = Outbox(path)
        try:
            last = 0
            for action, kinds in steps:
                if action == "append":
                    made = box.append([build((kind, 0, "t")) for kind in kinds])
                    assert cursors(made) == list(range(last + 1, last + 1 + len(made)))
                    last += len(made)
                elif action == "trim":
                    box.trim(older_than=time.time() + 60)  # everything
                    assert box.since(0)[0] == []
                else:
                    box.close()
                    box = Outbox(path)
                assert box.head() == last
        finally:
            box.close()
