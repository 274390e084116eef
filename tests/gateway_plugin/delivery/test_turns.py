"""gateway_plugin.delivery.turns: Hermes' send-then-edit stream -> canonical run events (pure)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_plugin.delivery.turns import TurnTracker, classify, notice_events, strip_cursor

LANE = ("android:default", None)
THREAD = ("android:default", "t_1")
CID = "conv-1"
TOOLS = {"terminal", "web_search", "read_file"}


# --------------------------------------------------------------------------- classify


@pytest.mark.parametrize(
    "content",
    [
        '💻 terminal: "ls -la"',
        "💻 terminal",
        '🔍 web_search: "cats"',
        "⚙️ read_file(...)",
        "📖 read_file...",
        "  🔍 web_search: indented",
        "🛠️ some_unknown_tool: args",
        "💻 terminal\n```\nls\n```",
    ],
)
def test_a_tool_progress_send_is_progress(content: str) -> None:
    assert classify(content, None, TOOLS) == "progress"


@pytest.mark.parametrize("content", ["```\nprint('hi')\n```", "```python\nx = 1\n```"])
def test_a_code_fence_send_is_progress(content: str) -> None:
    assert classify(content, None, TOOLS) == "progress"


def test_a_thinking_send_is_progress() -> None:
    assert classify("💬 Let me look at the files first…", None, TOOLS) == "progress"


@pytest.mark.parametrize(
    "content",
    [
        "⚡ Gateway restarting — your run was interrupted",
        "📬 You have 2 queued messages",
        "⚠️ Gateway shutting down — Your current task will be interrupted.",
        "⚠️ Gateway restarting — Your current task will be interrupted. Send any message after",
    ],
)
def test_gateway_notices_are_notices(content: str) -> None:
    assert classify(content, None, TOOLS) == "notice"


@pytest.mark.parametrize(
    "meta", [{"expect_edits": True}, {"notify": True}, {"notify": True, "thread_id": "t"}]
)
@pytest.mark.parametrize(
    "content", ['💻 terminal: "ls"', "⚡ looks like a notice", "```\ncode\n```"]
)
def test_a_send_with_expect_edits_or_notify_metadata_is_text(
    meta: dict[str, object], content: str
) -> None:
    assert classify(content, meta, TOOLS) == "text"


@pytest.mark.parametrize(
    "content",
    [
        "Hello! How can I help?",
        "Sure: here is the plan",
        "terminal: is a tool name but no emoji",
        "- a bullet list\n- of things",
        "# A heading",
        "> a quote",
        "**bold** start",
        "(parenthesised) start",
        '"quoted" start',
        "1. numbered",
        "",
    ],
)
def test_plain_text_is_text(content: str) -> None:
    assert classify(content, None, TOOLS) == "text"


@pytest.mark.parametrize("meta", [None, {}, {"expect_edits": False, "notify": False}])
def test_metadata_without_the_flags_does_not_make_progress_text(
    meta: dict[str, object] | None,
) -> None:
    assert classify('💻 terminal: "ls"', meta, TOOLS) == "progress"


# --------------------------------------------------------------------------- strip_cursor


@pytest.mark.parametrize(
    ("content", "stripped"),
    [
        ("Hello ▉", "Hello"),
        ("Hello▉", "Hello"),
        ("Hello \n▉  ", "Hello"),
        ("Hello", "Hello"),
        ("▉ is not at the end", "▉ is not at the end"),
        ("▉", ""),
        ("", ""),
    ],
)
def test_strip_cursor_removes_only_a_trailing_cursor(content: str, stripped: str) -> None:
    assert strip_cursor(content) == stripped


# --------------------------------------------------------------------------- TurnTracker


def test_accept_opens_a_run_with_run_accepted_then_message_start() -> None:
    turns = TurnTracker()
    run, events = turns.accept(LANE, CID, run_id="r1", request_id="req-6", client_id="cl-1")
    accepted, start = events
    assert accepted == {
        "type": "run.accepted",
        "lane": ["android:default", None],
        "conversation_id": CID,
        "run_id": "r1",
        "request_id": "req-6",
        "client_id": "cl-1",
    }
    assert start == {
        "type": "message.start",
        "lane": ["android:default", None],
        "conversation_id": CID,
        "run_id": "r1",
        "message_id": "draft-r1",
        "kind": "reply",
    }
    assert turns.active(LANE) is run
    assert turns.by_run_id("r1") is run
    assert turns.active(THREAD) is None


def test_accept_without_request_or_client_id_leaves_them_out() -> None:
    run, events = TurnTracker().accept(LANE, CID)
    assert "request_id" not in events[0] and "client_id" not in events[0]
    assert re.fullmatch(r"[0-9a-f]{32}", run.run_id)
    assert events[1]["message_id"] == f"draft-{run.run_id}"


def test_the_first_send_emits_a_delta_with_the_cursor_stripped() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1")
    segment, events = turns.on_send(run, "It's ▉")
    assert segment.startswith("seg-")
    assert len(events) == 1
    delta = events[0]
    assert delta["type"] == "message.delta"
    assert delta["message_id"] == "draft-r1"
    assert delta["text"] == "It's"
    assert delta["run_id"] == "r1" and delta["conversation_id"] == CID
    assert delta["ts"]


def test_edits_grow_the_cumulative_text() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    segment, _ = turns.on_send(run, "It's ▉")
    assert [e["text"] for e in turns.on_edit(segment, "It's currently ▉")] == ["It's currently"]
    assert [e["text"] for e in turns.on_edit(segment, "It's currently 27°C.")] == [
        "It's currently 27°C."
    ]


def test_segments_before_and_after_a_tool_concatenate_into_one_cumulative_text() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    first, _ = turns.on_send(run, "Let me check. ▉")
    turns.on_edit(first, "Let me check.")
    second, events = turns.on_send(run, "\n\nIt is ▉")
    assert [e["text"] for e in events] == ["Let me check.\n\nIt is"]
    events = turns.on_edit(second, "\n\nIt is 27°C.")
    assert [e["text"] for e in events] == ["Let me check.\n\nIt is 27°C."]
    complete, _ = turns.finish(LANE, "completed")
    assert complete["text"] == "Let me check.\n\nIt is 27°C."


def test_an_identical_edit_emits_nothing() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    segment, _ = turns.on_send(run, "Hello ▉")
    assert turns.on_edit(segment, "Hello ▉") == []
    assert turns.on_edit(segment, "Hello") == []  # only the cursor went away


def test_an_empty_first_send_emits_no_delta() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    assert turns.on_send(run, " ▉")[1] == []


def test_edits_of_an_unknown_segment_are_ignored() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    turns.on_send(run, "Hello")
    assert turns.on_edit("seg-unknown", "Goodbye") == []
    assert turns.on_edit("progress-123", "💻 terminal") == []
    complete, _ = turns.finish(LANE, "completed")
    assert complete["text"] == "Hello"


def test_edits_after_the_run_finished_are_ignored() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    segment, _ = turns.on_send(run, "Hello")
    turns.finish(LANE, "completed")
    assert turns.on_edit(segment, "Hello again") == []
    assert turns.segment_index == {}


def test_finish_emits_message_complete_equal_to_the_last_delta_then_run_finished() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1", client_id="cl-1")
    segment, _ = turns.on_send(run, "Hi ▉")
    last = turns.on_edit(segment, "Hi there ▉")[-1]
    complete, finished = turns.finish(LANE, "completed")
    assert complete["type"] == "message.complete"
    assert complete["text"] == last["text"] == "Hi there"
    assert complete["message_id"] == "draft-r1"
    assert complete["role"] == "assistant" and complete["kind"] == "reply"
    assert complete["client_id"] == "cl-1"
    assert complete["lane"] == ["android:default", None]
    assert finished == {
        "type": "run.finished",
        "lane": ["android:default", None],
        "conversation_id": CID,
        "run_id": "r1",
        "status": "completed",
    }
    assert turns.active(LANE) is None


def test_a_cancelled_run_finishes_without_an_error() -> None:
    turns = TurnTracker()
    turns.accept(LANE, CID)
    _, finished = turns.finish(LANE, "cancelled", "ignored")
    assert finished["status"] == "cancelled" and "error" not in finished


def test_a_failed_run_finishes_with_its_error_truncated_to_500_characters() -> None:
    turns = TurnTracker()
    turns.accept(LANE, CID)
    _, finished = turns.finish(LANE, "failed", "x" * 900)
    assert finished["status"] == "failed" and finished["error"] == "x" * 500


def test_a_failed_run_without_an_error_text_still_carries_one() -> None:
    turns = TurnTracker()
    turns.accept(LANE, CID)
    _, finished = turns.finish(LANE, "failed")
    assert finished["error"] == "the run failed"


def test_a_run_without_text_completes_with_empty_text() -> None:
    turns = TurnTracker()
    turns.accept(LANE, CID)
    complete, _ = turns.finish(LANE, "completed")
    assert complete["text"] == ""


def test_finishing_a_lane_with_no_run_emits_nothing() -> None:
    assert TurnTracker().finish(LANE, "completed") == []


def test_an_implicit_cron_run_completes_with_kind_cron() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, implicit=True, kind="cron")
    turns.on_send(run, "Nightly report")
    complete, _ = turns.finish(LANE, "completed")
    assert complete["kind"] == "cron" and complete["text"] == "Nightly report"


def test_runs_of_two_lanes_do_not_mix() -> None:
    turns = TurnTracker()
    a, _ = turns.accept(LANE, "c-a")
    b, _ = turns.accept(THREAD, "c-b")
    seg_a, _ = turns.on_send(a, "A")
    turns.on_send(b, "B")
    assert [e["text"] for e in turns.on_edit(seg_a, "AA")] == ["AA"]
    complete_b, _ = turns.finish(THREAD, "completed")
    assert complete_b["text"] == "B" and complete_b["conversation_id"] == "c-b"
    complete_a, _ = turns.finish(LANE, "completed")
    assert complete_a["text"] == "AA"


def test_a_notice_is_its_own_complete_message_of_kind_notice() -> None:
    (event,) = notice_events(LANE, CID, "⚡ Gateway restarting", "r1")
    assert event["type"] == "message.complete"
    assert event["kind"] == "notice" and event["role"] == "assistant"
    assert event["text"] == "⚡ Gateway restarting"
    assert event["run_id"] == "r1" and event["conversation_id"] == CID
    assert event["message_id"].startswith("notice-")
    assert event["lane"] == ["android:default", None]


# --------------------------------------------------------------------------- property

TEXT = st.text(
    alphabet=st.characters(blacklist_characters="▉", blacklist_categories=("Cs",)), max_size=6
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), TEXT, st.booleans()),  # a new segment (maybe post-tool)
        st.tuples(st.just("edit"), TEXT, st.just(True)),  # streaming edit: grows, with cursor
        st.tuples(st.just("final"), TEXT, st.just(False)),  # last edit of the segment, no cursor
        st.tuples(st.just("stray"), TEXT, st.booleans()),  # an edit of some unknown message
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(STEPS, st.booleans())
def test_deltas_are_cumulative_prefixes_and_the_complete_text_is_the_last_delta(
    steps: list[tuple[str, str, bool]], post_tool_gap: bool
) -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID)
    segments: list[str] = []  # the model: each segment's displayed text
    open_segment: tuple[str, str] | None = None  # (segment id, text so far) still streaming
    deltas: list[str] = []
    for kind, text, cursor in steps:
        if kind == "send":
            if segments and post_tool_gap:
                text = "\n\n" + text
            content = text + (" ▉" if cursor else "")
            segment_id, events = turns.on_send(run, content)
            segments.append(strip_cursor(content))
            open_segment = (segment_id, text) if cursor else None
        elif kind in ("edit", "final") and open_segment is not None:
            segment_id, so_far = open_segment
            grown = so_far + text
            content = grown + (" ▉" if kind == "edit" else "")
            events = turns.on_edit(segment_id, content)
            segments[-1] = strip_cursor(content)
            open_segment = (segment_id, grown) if kind == "edit" else None
        elif kind == "stray":
            events = turns.on_edit(f"seg-{text}-stray", text)
        else:
            events = []
        for event in events:
            assert event["type"] == "message.delta"
            assert event["text"] == "".join(segments)
            deltas.append(event["text"])

    for before, after in zip(deltas, deltas[1:], strict=False):
        assert before != after
        assert after.startswith(before), (before, after)
    complete, finished = turns.finish(LANE, "completed")
    assert complete["text"] == "".join(segments)
    if deltas:
        assert complete["text"] == deltas[-1]
    else:
        assert complete["text"] == ""
    assert finished["status"] == "completed"


# --------------------------------------------------------------------------- commentary, statuses


def test_commentary_whose_final_edit_trails_the_tool_hook_is_sent_whole() -> None:
    # Hermes' order when its tool hook beats the stream consumer's final edit.
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1")
    segment, _ = turns.on_send(run, "Let me check that with a ▉")
    assert turns.close_commentary(run) == []
    events = turns.on_edit(segment, "Let me check that with a tool first.", final=True)
    commentary = [e for e in events if e["type"] == "commentary"]
    assert [c["text"] for c in commentary] == ["Let me check that with a tool first."]
    assert commentary[0]["message_id"] == segment
    turns.on_send(run, "\n\nDone.", final=True)
    complete, _ = turns.finish(LANE, "completed")
    assert complete["reply"] == "Done."
    assert complete["text"] == "Let me check that with a tool first.\n\nDone."


def test_finished_commentary_is_sent_at_the_tool_call_and_never_twice() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1")
    segment, _ = turns.on_send(run, "Checking ▉")
    turns.on_edit(segment, "Checking.", final=True)
    assert [e["text"] for e in turns.close_commentary(run)] == ["Checking."]
    assert turns.on_edit(segment, "Checking.", final=True) == []
    assert [e["type"] for e in turns.finish(LANE, "completed")] == [
        "message.complete",
        "run.finished",
    ]


def test_commentary_hermes_never_finished_is_sent_before_the_runs_end() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1")
    turns.on_send(run, "Let me ▉")
    turns.close_commentary(run)
    events = turns.finish(LANE, "completed")
    assert [e["type"] for e in events] == ["commentary", "message.complete", "run.finished"]
    assert events[0]["text"] == "Let me"


def test_a_response_repeating_the_runs_status_is_not_shown_twice() -> None:
    failure = "⚠️ The model provider failed after retries."
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1")
    status_id, events = turns.on_send(run, failure, status=True)
    assert [e["text"] for e in events] == [failure]
    assert turns.on_send(run, failure) == (status_id, [])
    complete, _ = turns.finish(LANE, "failed", failure)
    assert complete["text"] == failure


def test_text_equal_to_earlier_text_that_was_no_status_is_kept() -> None:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, CID, run_id="r1")
    turns.on_send(run, "Checking.")
    turns.on_send(run, "Checking.")
    complete, _ = turns.finish(LANE, "completed")
    assert complete["text"] == "Checking.Checking."
