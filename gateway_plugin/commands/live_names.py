"""A lane's history named as devices saw it live, kept per lane between requests.

`message_ids.assign` names a lane's messages from its whole transcript and every send
recorded in its conversation: over a long lane that is the whole transcript read, merged
and named for each history page and each search. Here each lane keeps what naming needs
and nothing else (every message's first row, the rows kept in messages, the ids sends
gave, `message_ids.Naming`'s place in the sends) and catches up on what changed since:

- state.db: nothing committed since (``PRAGMA data_version`` of one long-lived
  connection), or the lane's live rows unchanged (`state_db.lane_fingerprint`), or only
  rows appended (the fingerprint of the rows read before unchanged: the new ones are
  named on). Anything else (an undo, a compression, a purge) names the lane afresh.
- outbox.db: no send recorded since (`Outbox.sends_recorded`), or the messages that looked
  at the sends that differ are named again (`Naming.resend`).

A page then reads only its own rows. Everything is in memory: a restart starts afresh.
The methods run on read-pool threads (one lane at a time each, under the lane's lock).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from canonical.model import Json, Lane
from gateway_plugin.delivery.message_ids import Naming
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.hermes import state_db
from gateway_plugin.hermes.transcript import JOIN, SKIP, Transcript, merge, row_place

LANES_KEPT = 256  # lanes kept named, the most recently read
HISTORY_ID = re.compile(r"m\d{1,18}")  # a transcript row (gateway_plugin.hermes.transcript)

T = TypeVar("T")


@dataclass
class _Named:
    """One lane's messages as named so far (rows up to `upto`)."""

    naming: Naming
    starts: array[int] = field(default_factory=lambda: array("q"))  # first row per message
    kept: array[int] = field(default_factory=lambda: array("q"))  # rows of some message
    assistant: bytearray = field(default_factory=bytearray)  # 1: that message is the model's
    upto: int = 0  # the newest row (of any role) read
    fingerprint: tuple[int, int, int, int] = (0, 0, 0, 0)  # of the live rows up to `upto`
    seen: tuple[int, int] | None = None  # (watch connection, data_version) then
    sends_recorded: int = -1  # `Outbox.sends_recorded` when the sends were read
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, rows: list[Json]) -> None:
        """Rows after the last one kept, in order (`merge`'s rules, without the texts)."""
        for row in rows:
            text = row["content"] or ""
            role = row["role"]
            place = row_place(role, text, in_assistant=bool(self.assistant and self.assistant[-1]))
            if place == SKIP:
                continue
            if place == JOIN:
                self.kept.append(row["id"])  # more of the model's message
                continue
            self.starts.append(row["id"])
            self.kept.append(row["id"])
            self.assistant.append(role == "assistant")
            self.naming.add(row["id"], role, float(row["timestamp"] or 0.0), text)

    def reset(self, naming: Naming, sends_recorded: int) -> None:
        """No message named yet, `naming` to name them (the sends as read)."""
        self.naming, self.sends_recorded = naming, sends_recorded
        self.starts, self.kept, self.assistant = array("q"), array("q"), bytearray()

    def forget_from(self, first: int) -> None:
        """Forget the messages from row `first` on (Naming forgot them already)."""
        index = bisect_left(self.starts, first)
        del self.starts[index:]
        del self.assistant[index:]
        del self.kept[bisect_left(self.kept, first) :]

    def id_of(self, row: int) -> str | None:
        """The id of the message row `row` is part of; None when it is in none."""
        at = bisect_left(self.kept, row)
        if at == len(self.kept) or self.kept[at] != row:
            return None
        first = self.starts[bisect_right(self.starts, row) - 1]
        return self.naming.names.get(first, f"m{first}")

    def index_of(self, message_id: str) -> int | None:
        """The index of the first message named `message_id` (a live id), if any."""
        firsts = [row for row, name in self.naming.names.items() if name == message_id]
        return bisect_left(self.starts, min(firsts)) if firsts else None


class LiveNames:
    def __init__(self, transcript: Transcript, outbox: Outbox) -> None:
        self.transcript = transcript
        self.outbox = outbox
        self._lanes: OrderedDict[tuple[Lane, str], _Named] = OrderedDict()
        self._lanes_lock = threading.Lock()
        self._watch: sqlite3.Connection | None = None
        self._watch_file: tuple[int, int] | None = None  # (device, inode) it is open on
        self._watch_count = 0  # which watch connection: data versions are its own
        self._watch_lock = threading.Lock()

    # -- reads
    def page(
        self, lane: Lane, conversation_id: str, limit: int, before: str | None
    ) -> tuple[list[Json], bool] | None:
        """As `transcript.page` over the lane's named messages: the newest `limit` (>= 1)
        before an exclusive cursor (``m<row>``: the messages of rows before it; a live
        id: the messages before the first so named), and whether older ones remain. None
        when `before` is a live id no message has."""
        conn = self.transcript._connect()
        if conn is None:
            return None if before is not None and not HISTORY_ID.fullmatch(before) else ([], False)
        try:
            return self._read(
                conn,
                lane,
                conversation_id,
                lambda named: self._page(conn, named, lane, limit, before),
            )
        finally:
            conn.close()

    def ids(self, lanes: dict[Lane, str], rows: Iterable[int]) -> dict[int, str]:
        """Transcript row -> the id of the message it is part of, for those of `rows` in
        messages of these lanes."""
        wanted = sorted(set(rows))
        ids: dict[int, str] = {}

        def look_up(named: _Named) -> None:
            for row in wanted:
                message_id = named.id_of(row)
                if message_id is not None:
                    ids[row] = message_id

        conn = self.transcript._connect()
        if conn is None:
            return ids
        try:
            for lane, conversation_id in lanes.items():
                self._read(conn, lane, conversation_id, look_up)
        finally:
            conn.close()
        return ids

    def _page(
        self, conn: sqlite3.Connection, named: _Named, lane: Lane, limit: int, before: str | None
    ) -> tuple[list[Json], bool] | None:
        starts = named.starts
        if before is None:
            end = len(starts)
        elif HISTORY_ID.fullmatch(before):
            end = bisect_left(starts, int(before[1:]))
        else:
            found = named.index_of(before)
            if found is None:
                return None
            end = found
        begin = max(0, end - limit)
        if begin == end:
            return [], begin > 0
        last = starts[end] - 1 if end < len(starts) else named.upto
        rows = state_db.lane_rows_between(
            conn, self.transcript.platform, lane, starts[begin] - 1, last
        )
        names = named.naming.names
        return [
            {
                "message_id": names.get(m["rows"][0], m["message_id"]),
                "role": m["role"],
                "text": m["text"],
                "ts": m["ts"],
            }
            for m in merge(rows)
        ], begin > 0

    # -- catching up
    def _read(
        self,
        conn: sqlite3.Connection,
        lane: Lane,
        conversation_id: str,
        then: Callable[[_Named], T],
    ) -> T:
        """`then(names)` of the lane, caught up with state.db as one read transaction of
        `conn` sees it (begun once the lane is ours: nothing named from a newer one) and
        with the sends recorded."""
        with self._lanes_lock:
            key = (lane, conversation_id)
            named = self._lanes.get(key)
            if named is None:
                named = self._lanes[key] = _Named(Naming([]))
            self._lanes.move_to_end(key)
            while len(self._lanes) > LANES_KEPT:
                self._lanes.popitem(last=False)
        with named.lock:
            before = self._data_version()
            with state_db.snapshot(conn):
                # Unchanged since the catch-up before (read before its snapshot began):
                # nothing was committed in between.
                after = self._data_version()
                if after is None or after != named.seen:
                    self._catch_up_rows(conn, named, lane, conversation_id)
                    named.seen = before
                self._catch_up_sends(conn, named, lane, conversation_id)
                return then(named)

    def _catch_up_rows(
        self, conn: sqlite3.Connection, named: _Named, lane: Lane, conversation_id: str
    ) -> None:
        platform = self.transcript.platform
        now = state_db.lane_fingerprint(conn, platform, lane)
        if now == named.fingerprint:
            return
        if named.upto and (
            state_db.lane_fingerprint(conn, platform, lane, named.upto) == named.fingerprint
        ):
            named.add(state_db.lane_rows_between(conn, platform, lane, named.upto, now[3]))
        else:  # new, or rows gone (an undo, a compression, a purge): named afresh
            recorded = self.outbox.sends_recorded
            named.reset(Naming(self.outbox.sent_messages(conversation_id)), recorded)
            named.add(state_db.lane_rows_between(conn, platform, lane, 0, now[3]))
        named.upto, named.fingerprint = now[3], now

    def _catch_up_sends(
        self, conn: sqlite3.Connection, named: _Named, lane: Lane, conversation_id: str
    ) -> None:
        recorded = self.outbox.sends_recorded
        if recorded == named.sends_recorded:
            return
        first = named.naming.resend(self.outbox.sent_messages(conversation_id))
        if first is not None:
            named.forget_from(first)
            rows = state_db.lane_rows_between(
                conn, self.transcript.platform, lane, first - 1, named.upto
            )
            named.add(rows)
        named.sends_recorded = recorded

    def _data_version(self) -> tuple[int, int] | None:
        """(which watch connection, its data_version) of state.db; None while it cannot be
        read. A file replaced (another inode) gets a connection of its own."""
        path = self.transcript.state_db
        with self._watch_lock:
            try:
                stat = os.stat(path)
            except OSError:
                return None
            where = (stat.st_dev, stat.st_ino)
            if self._watch is None or where != self._watch_file:
                if self._watch is not None:
                    self._watch.close()
                self._watch = state_db.open_readonly(path)
                self._watch_file = where
                self._watch_count += 1
            if self._watch is None:
                return None
            try:
                return self._watch_count, state_db.data_version(self._watch)
            except sqlite3.Error:
                self._watch.close()
                self._watch = None
                return None

    def close(self) -> None:
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None


__all__ = ["HISTORY_ID", "LANES_KEPT", "LiveNames"]
