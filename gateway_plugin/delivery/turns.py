"""Turning Hermes' send-then-edit streaming into canonical run events (pure, no I/O).

Hermes gives an adapter only text: a `send` opens a message, `edit_message` replaces its
text (cumulative, with a trailing cursor " ▉"), tool progress is a separate `send`, and
text after a tool starts a new message beginning with "\\n\\n". A run here is one
assistant message: its text is the concatenation of the turn's text segments, so deltas
stay cumulative and `message.complete` carries what history later shows for the turn.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from canonical.model import Json, Lane
from canonical.protocol import new_id, now_iso

_CURSOR_RE = re.compile(r"\s*▉\s*$")
# "💻 terminal", "🔍 web_search: \"cats\"", "⚙️ tool(...)", "💬 thinking…"
_PROGRESS_RE = re.compile(r"^[^\w\s`\"'(\[*#>-]{1,4}\s+([A-Za-z_][\w.-]*)(\.\.\.|:|\(|\s*$|\n)")
# "⚡ Stopped…", "📬 …", and the warning Hermes sends every active chat as it stops or
# restarts ("⚠️ Gateway shutting down — …"), mid-turn: never part of the reply's text.
_NOTICE_PREFIXES = ("⚡", "📬", "⚠️ Gateway ")


def strip_cursor(text: str) -> str:
    return _CURSOR_RE.sub("", text)


def is_final(text: str) -> bool:
    """Hermes' stream consumer ends every update of a segment it will edit again with its
    cursor; the segment's final text (at a tool boundary or the turn's end) has none."""
    return _CURSOR_RE.search(text) is None


_REASONING_CODE = re.compile(r"^💭 \*\*Reasoning:\*\*\n```\n(.*?)\n```\n\n", re.DOTALL)
_REASONING_QUOTE = re.compile(r"^> 💭 \*\*Reasoning:\*\*\n((?:>.*\n)*)\n", re.DOTALL)
_REASONING_SUBTEXT = re.compile(r"^-# 💭 Reasoning\n((?:-#.*\n)*)\n", re.DOTALL)


def final_send(content: str, metadata: dict[str, Any] | None) -> bool:
    """Whether Hermes will edit this send again: its stream consumer flags the messages
    it will edit (`expect_edits`), unless it sends one already whole (`notify`)."""
    meta = metadata or {}
    return is_final(content) and (not meta.get("expect_edits") or bool(meta.get("notify")))


def split_reasoning(content: str) -> tuple[str | None, str]:
    """Hermes' `show_reasoning` prefix (any of its three styles) split off the reply text."""
    for pattern, prefix in (
        (_REASONING_CODE, ""),
        (_REASONING_QUOTE, ">"),
        (_REASONING_SUBTEXT, "-#"),
    ):
        match = pattern.match(content)
        if match:
            body = match.group(1)
            if prefix:
                body = "\n".join(line[len(prefix) :].lstrip() for line in body.splitlines())
            return body.strip(), content[match.end() :]
    return None, content


def classify(content: str, metadata: dict[str, Any] | None, known_tools: set[str]) -> str:
    """ "text", "progress" or "notice" for one outbound `send`."""
    meta = metadata or {}
    if meta.get("expect_edits") or meta.get("notify"):
        return "text"
    stripped = content.lstrip()
    if stripped.startswith(_NOTICE_PREFIXES):
        return "notice"
    if stripped.startswith("```") or stripped.startswith("💬 "):
        return "progress"
    match = _PROGRESS_RE.match(stripped)
    if match and (match.group(1) in known_tools or "\n" not in stripped[:200]):
        first = stripped[0]
        if not first.isalnum():
            return "progress"
    return "text"


@dataclass
class Run:
    run_id: str
    lane: Lane
    conversation_id: str | None
    message_id: str
    request_id: Any = None
    client_id: str | None = None
    implicit: bool = False
    kind: str = "reply"
    segments: list[str] = field(default_factory=list)
    segment_ids: list[str] = field(default_factory=list)
    last_text: str = ""
    # segments[:commentary_upto] were interim messages closed by a tool call.
    commentary_upto: int = 0
    # Segments whose last update still carried the cursor: Hermes will edit them again.
    open_segments: set[int] = field(default_factory=set)
    # Commentary closed by a tool call before Hermes delivered its final text: sent then.
    commentary_pending: set[int] = field(default_factory=set)
    # Status texts Hermes showed in this run (its status callback), by their segment id.
    statuses: dict[str, str] = field(default_factory=dict)
    reasoning: str | None = None
    started: float = field(default_factory=time.time)

    def text(self) -> str:
        """Everything the assistant said this turn (pheby's one message)."""
        return "".join(self.segments)

    def reply(self) -> str:
        """The answer without the interim commentary (iris' message text)."""
        return "".join(self.segments[self.commentary_upto :]).lstrip("\n")


def _base(run: Run, kind: str) -> Json:
    return {
        "type": kind,
        "lane": list(run.lane),
        "conversation_id": run.conversation_id,
        "run_id": run.run_id,
    }


@dataclass
class TurnTracker:
    runs: dict[Lane, Run] = field(default_factory=dict)
    segment_index: dict[str, tuple[str, int]] = field(default_factory=dict)
    known_tools: set[str] = field(default_factory=set)

    def active(self, lane: Lane) -> Run | None:
        return self.runs.get(lane)

    def by_run_id(self, run_id: str) -> Run | None:
        for run in self.runs.values():
            if run.run_id == run_id:
                return run
        return None

    def accept(
        self,
        lane: Lane,
        conversation_id: str | None,
        *,
        run_id: str | None = None,
        request_id: Any = None,
        client_id: str | None = None,
        implicit: bool = False,
        kind: str = "reply",
    ) -> tuple[Run, list[Json]]:
        rid = run_id or new_id()
        run = Run(rid, lane, conversation_id, f"draft-{rid}", request_id, client_id, implicit, kind)
        self.runs[lane] = run
        accepted = _base(run, "run.accepted")
        if request_id is not None:
            accepted["request_id"] = request_id
        if client_id is not None:
            accepted["client_id"] = client_id
        # The kind rides on the start too, so a device styles a cron delivery from its
        # first frame on.
        start = {**_base(run, "message.start"), "message_id": run.message_id, "kind": kind}
        return run, [accepted, start]

    def complete_run(
        self, lane: Lane, conversation_id: str | None, content: str, *, kind: str
    ) -> tuple[str, list[Json]]:
        """A whole run at once (cron, background output), beside any run streaming in the
        lane, which goes on untouched. Its segment's id and its events."""
        streaming = self.runs.pop(lane, None)
        try:
            run, events = self.accept(lane, conversation_id, implicit=True, kind=kind)
            segment_id, deltas = self.on_send(run, content)
            return segment_id, events + deltas + self.finish(lane, "completed")
        finally:
            if streaming is not None:
                self.runs[lane] = streaming

    def _delta(self, run: Run) -> list[Json]:
        text = run.text()
        if text == run.last_text:
            return []
        run.last_text = text
        return [
            {
                **_base(run, "message.delta"),
                "message_id": run.message_id,
                "text": text,
                "reply": run.reply(),
                "ts": now_iso(),
            }
        ]

    def on_send(
        self, run: Run, content: str, *, status: bool = False, final: bool | None = None
    ) -> tuple[str, list[Json]]:
        """A new text segment of the run; returns the segment's message id and events.
        `status`: the text comes from Hermes' status callback, not from the model.
        `final`: Hermes will not edit it again (None: judged by the cursor)."""
        reasoning, content = split_reasoning(content)
        if reasoning:
            run.reasoning = reasoning
        text = strip_cursor(content)
        repeated = run.statuses.get(text.strip())
        if repeated is not None and not status:
            # A failed turn: Hermes reports the failure through its status callback, then
            # sends the same text again as the turn's response. One copy is the message.
            return repeated, []
        segment_id = f"seg-{new_id(8)}"
        run.segments.append(text)
        run.segment_ids.append(segment_id)
        index = len(run.segments) - 1
        self.segment_index[segment_id] = (run.run_id, index)
        if not (is_final(content) if final is None else final):
            run.open_segments.add(index)
        if status and text.strip():
            run.statuses[text.strip()] = segment_id
        return segment_id, self._delta(run)

    def close_commentary(self, run: Run) -> list[Json]:
        """A tool call started: the text so far was interim commentary, not the reply.
        A segment Hermes has not finished yet (its final edit trails the tool hook) is
        sent as commentary once its final text arrives."""
        events: list[Json] = []
        for index in range(run.commentary_upto, len(run.segments)):
            if index in run.open_segments:
                run.commentary_pending.add(index)
            else:
                events.extend(_commentary(run, index))
        run.commentary_upto = len(run.segments)
        return events

    def on_edit(self, segment_id: str, content: str, *, final: bool | None = None) -> list[Json]:
        """A segment's new text. `final`: Hermes' last edit of it (None: judged by the
        cursor)."""
        located = self.segment_index.get(segment_id)
        if located is None:
            return []
        run = self.by_run_id(located[0])
        if run is None:
            return []
        index = located[1]
        run.segments[index] = strip_cursor(content)
        events = self._delta(run)
        if is_final(content) if final is None else final:
            run.open_segments.discard(index)
            if index in run.commentary_pending:
                run.commentary_pending.discard(index)
                events.extend(_commentary(run, index))
        return events

    def finish(
        self, lane: Lane, status: str, error: str | None = None, reasoning: str | None = None
    ) -> list[Json]:
        run = self.take(lane)
        return [] if run is None else finished_events(run, status, error, reasoning)

    def take(self, lane: Lane) -> Run | None:
        """The lane's run, no longer active (its end is `finished_events`)."""
        run = self.runs.pop(lane, None)
        if run is not None:
            for segment_id in [k for k, v in self.segment_index.items() if v[0] == run.run_id]:
                del self.segment_index[segment_id]
        return run


def finished_events(
    run: Run, status: str, error: str | None = None, reasoning: str | None = None
) -> list[Json]:
    """The end of a run taken from its lane: commentary left open, its message, its end."""
    if reasoning and not run.reasoning:
        run.reasoning = reasoning
    # Commentary whose final edit never came: what it said is all there is.
    pending = [e for index in sorted(run.commentary_pending) for e in _commentary(run, index)]
    run.commentary_pending.clear()
    complete = {
        **_base(run, "message.complete"),
        "message_id": run.message_id,
        "role": "assistant",
        "kind": run.kind,
        "text": run.text(),
        "reply": run.reply(),
        "ts": now_iso(),
    }
    if run.client_id is not None:
        complete["client_id"] = run.client_id
    if run.reasoning:
        complete["reasoning"] = run.reasoning
    finished = {**_base(run, "run.finished"), "status": status}
    if status == "failed":
        finished["error"] = (error or "the run failed")[:500]
    return [*pending, complete, finished]


def _commentary(run: Run, index: int) -> list[Json]:
    text = run.segments[index].strip()
    if not text:
        return []
    return [
        {
            **_base(run, "commentary"),
            "message_id": run.segment_ids[index],
            "text": text,
            "ts": now_iso(),
        }
    ]


def notice_events(
    lane: Lane, conversation_id: str | None, text: str, run_id: str | None
) -> list[Json]:
    """A gateway notice: its own message, outside the run's reply text."""
    return [
        {
            "type": "message.complete",
            "lane": list(lane),
            "conversation_id": conversation_id,
            "run_id": run_id,
            "message_id": f"notice-{new_id(8)}",
            "role": "assistant",
            "kind": "notice",
            "text": text,
            "ts": now_iso(),
        }
    ]
