"""Reading a lane's history from Hermes' state.db (read-only, the transcript of record).

A lane (chat_id, thread_id) owns every session Hermes ever started for it (resets,
compression splits), so history spans all of them. Assistant texts between two user
messages are merged into one message: that is what `message.complete` carried live.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from canonical.model import Json, Lane
from canonical.protocol import iso_from_unix
from gateway_plugin.hermes import state_db

CHUNK_ROWS = 64  # transcript rows a history page reads at a time


@dataclass(frozen=True)
class Turn:
    """One turn as Hermes stored it. `answered`: it ends with the model's answer; a turn
    the agent could not finish (the provider failed) ends with the user's message or a
    tool call, or stored nothing."""

    answered: bool
    reasoning: str | None


class Transcript:
    """A lane's history in state.db: every statement is `state_db`'s."""

    def __init__(self, state_db: Path, platform: str = "android") -> None:
        self.state_db = state_db
        self.platform = platform

    def _connect(self) -> sqlite3.Connection | None:
        return state_db.open_readonly(self.state_db)

    def sessions(self, lane: Lane) -> list[Json]:
        conn = self._connect()
        if conn is None:
            return []
        try:
            return state_db.lane_sessions(conn, self.platform, lane)
        finally:
            conn.close()

    def latest(self, lane: Lane) -> tuple[str | None, str | None]:
        """(session_id, last_active ISO) of the lane's newest session."""
        conn = self._connect()
        if conn is None:
            return None, None
        try:
            session_id, last = state_db.latest_session(conn, self.platform, lane)
        finally:
            conn.close()
        if session_id is None:
            return None, None
        return session_id, iso_from_unix(last)

    def turn_since(self, lane: Lane, since: float) -> Turn | None:
        """What Hermes stored for this lane's turn that started at `since`; None when
        state.db cannot be read."""
        try:
            conn = self._connect()
            if conn is None:
                return None
            try:
                return turn_of(state_db.turn_rows(conn, self.platform, lane, since))
            finally:
                conn.close()
        except sqlite3.Error:
            return None

    def messages(
        self, lane: Lane, limit: int, before_message_id: str | None = None
    ) -> tuple[list[Json], bool]:
        """The newest `limit` display messages (chronological) before an exclusive cursor
        (as `page` over `merged`), reading only the rows they need, newest first in chunks
        of `CHUNK_ROWS`: a long lane's page costs its own rows, not the whole transcript."""
        conn = self._connect()
        if conn is None:
            return [], False
        try:
            rows = self._rows_of_page(conn, lane, limit, before_message_id)
        finally:
            conn.close()
        merged = merge(rows)
        if before_message_id is not None:
            merged = [m for m in merged if m["rows"][0] < _num(before_message_id)]
        return page(merged, limit)

    def _rows_of_page(
        self, conn: sqlite3.Connection, lane: Lane, limit: int, before: str | None
    ) -> list[Json]:
        end = None if before is None else _num(before)
        newest_first: list[Json] = []
        cursor = end
        while True:
            chunk = state_db.lane_rows_before(conn, self.platform, lane, cursor, CHUNK_ROWS)
            newest_first.extend(chunk)
            if len(chunk) < CHUNK_ROWS:
                break  # the lane's first row: every message before `end` is here, whole
            cursor = int(chunk[-1]["id"])
            # A user row starts a message whatever came before it: from the oldest one read,
            # the messages are whole. Enough of them (and one more: "has_more") ends it.
            users = [i for i, row in enumerate(newest_first) if row["role"] == "user"]
            if users:
                whole = newest_first[: users[-1] + 1]
                if len(merge(whole[::-1])) > limit:
                    newest_first = whole
                    break
        rows = newest_first[::-1]
        if end is not None:
            # The message `end` falls inside (a cursor that is no message's first row)
            # goes on up to the next user row, as in the whole transcript.
            start = end
            while True:
                chunk = state_db.lane_rows_from(conn, self.platform, lane, start, CHUNK_ROWS)
                users = [i for i, row in enumerate(chunk) if row["role"] == "user"]
                rows.extend(chunk[: users[0]] if users else chunk)
                if users or len(chunk) < CHUNK_ROWS:
                    break
                start = int(chunk[-1]["id"]) + 1
        return rows

    def merged(self, lane: Lane) -> list[Json]:
        """Every display message of the lane, chronological, each named by its first
        transcript row (``m<id>``), with the rows it is made of (``rows``) and its first
        row's unix time (``at``): both internal, dropped by `page`."""
        conn = self._connect()
        if conn is None:
            return []
        try:
            rows = state_db.lane_messages(conn, self.platform, lane)
        finally:
            conn.close()
        return merge(rows)


SKIP, JOIN, START = "skip", "join", "start"


def row_place(role: str, text: str, *, in_assistant: bool) -> str:
    """Where a transcript row goes among the display messages, after a model's message
    (`in_assistant`) or not: `SKIP` a blank assistant row (a tool call), `JOIN` more of the
    model's message, `START` a new message."""
    if role != "assistant":
        return START
    if not text.strip():
        return SKIP
    return JOIN if in_assistant else START


def merge(rows: list[Json]) -> list[Json]:
    """Display messages from transcript rows: assistant texts between two user messages
    become one message; blank assistant rows (tool calls) are dropped. Linear in the rows:
    a lane Hermes only ever answered in (a cron channel) is one message of all of them."""
    merged: list[Json] = []
    parts: list[str] = []  # the texts of merged[-1] while it is an assistant message
    last_at: float | None = None  # its newest row's stored time
    for row in rows:
        text = row["content"] or ""
        role = row["role"]
        place = row_place(role, text, in_assistant=bool(parts))
        if place == SKIP:
            continue
        if place == JOIN:
            parts.append(text)
            last_at = row["timestamp"]
            merged[-1]["rows"].append(row["id"])
            continue
        _close(merged, parts, last_at)
        parts, last_at = ([text] if role == "assistant" else []), row["timestamp"]
        merged.append(
            {
                "message_id": f"m{row['id']}",
                "role": role,
                "text": text,
                "ts": iso_from_unix(row["timestamp"]),
                "rows": [row["id"]],
                "at": float(row["timestamp"] or 0.0),
            }
        )
    _close(merged, parts, last_at)
    return merged


def _close(merged: list[Json], parts: list[str], last_at: float | None) -> None:
    """An assistant message made of several rows: their texts, joined once, and the time
    of the last."""
    if len(parts) > 1:
        merged[-1]["text"] = "".join(parts)
        merged[-1]["ts"] = iso_from_unix(last_at)


def page(
    merged: list[Json], limit: int, before_message_id: str | None = None
) -> tuple[list[Json], bool]:
    """The newest `limit` of `merged` before an exclusive cursor (an id of the list, or a
    transcript id ``m<n>`` no longer in it: the messages of rows before it), without
    the internal fields. True when older messages remain."""
    if before_message_id is not None:
        ids = [m["message_id"] for m in merged]
        if before_message_id in ids:
            merged = merged[: ids.index(before_message_id)]
        else:
            merged = [m for m in merged if m["rows"][0] < _num(before_message_id)]
    has_more = len(merged) > limit
    return [_wire(m) for m in merged[-limit:]], has_more


def _wire(message: Json) -> Json:
    return {k: v for k, v in message.items() if k not in ("rows", "at")}


def _num(message_id: str) -> int:
    try:
        return int(message_id.lstrip("m"))
    except ValueError:
        return 0


def turn_of(rows: list[Json]) -> Turn:
    """The turn made of its rows (`state_db.turn_rows`: only rows written since the run
    started, its own turn; with slack, the previous turn's reasoning, written a moment
    before, would be taken for this one's)."""
    reasoning = next((str(r["reasoning"]) for r in reversed(rows) if r["reasoning"]), None)
    last = rows[-1] if rows else None
    answered = (
        last is not None
        and last["role"] == "assistant"
        and (not last["tool_calls"] or last["tool_calls"] in ("[]", "null"))
    )
    return Turn(answered=answered, reasoning=reasoning)
