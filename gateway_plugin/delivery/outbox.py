"""The outbox (outbox.db): the log every device replays from.

Every device-visible event gets a monotonic cursor here *before* it is published.
Streaming deltas are cumulative, so only the newest delta of a message is kept, and a
message's deltas are dropped once it completes. Alongside: idempotency records for client
sends, per-device acknowledged cursors, and the runs still in flight (so a restart can
close them honestly).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from canonical.jsonenc import dumps, dumps_clean
from canonical.model import Json
from gateway_plugin.delivery.message_ids import SentMessage
from gateway_plugin.storage.sqlite_file import data_version, data_version_nowait, open_wal

SCHEMA_VERSION = 1
_SQL_VARS = 500  # bound parameters per query, well under SQLite's limit
_EVENTS_COLUMNS = """(
    cursor INTEGER PRIMARY KEY,
    created REAL NOT NULL,
    type TEXT NOT NULL,
    coalesce_key TEXT,
    body TEXT NOT NULL
)"""
# When retention has emptied the table, how far it trimmed: what `_last_cursor` falls back on.
_CURSOR_FLOOR = "SELECT MAX(CAST(value AS INTEGER)) FROM meta WHERE key = 'trimmed_upto'"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS events {_EVENTS_COLUMNS};
-- No index on `created` or on `coalesce_key`: each was another page written by every
-- append (~25 % of an append's cost each). Retention walks the oldest rows in cursor
-- order (`trim`); the delta each message still has is looked up in memory (`_live`).
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    created REAL NOT NULL,
    result TEXT NOT NULL,
    dispatched INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS device_acks (
    device_id TEXT PRIMARY KEY,
    cursor INTEGER NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS active_runs (
    run_id TEXT PRIMARY KEY,
    lane TEXT NOT NULL,
    conversation_id TEXT,
    started REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- Command stream entries carried out, with the replies to send again on a redelivery
-- (gateway_plugin/commands/once.py).
CREATE TABLE IF NOT EXISTS processed (entry_id TEXT PRIMARY KEY, at REAL NOT NULL, replies TEXT);
-- Each send's message ids, to name Hermes' transcript rows as devices saw them live
-- (gateway_plugin/delivery/message_ids.py). Kept as long as the transcript: no text, a digest.
CREATE TABLE IF NOT EXISTS sent_messages (
    message_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    run_id TEXT,
    created REAL NOT NULL,
    text_len INTEGER NOT NULL,
    text_sha TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sent_messages_conversation ON sent_messages(conversation_id, created);
"""


class Outbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_wal(path, _SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._lock = threading.Lock()
        # message id -> cursor of the one delta row kept for it, loaded from the file on
        # first need. Between transactions only the controller's Outbox leaves a delta in
        # place (a cron run in another process appends a message's deltas and its
        # completion in one transaction), so once loaded this stays the file's truth.
        self._live: dict[str, int] | None = None
        # data_version as last seen by `changed_elsewhere`: it changes only when another
        # connection commits (a CLI cron run appending deliveries).
        self._seen_version = data_version(self._db)
        # Sends recorded so far (sent_messages: only the controller's Outbox writes it): a
        # reader that finds the same number knows the sends it read are still all there is.
        self.sends_recorded = 0

    def changed_elsewhere(self) -> bool:
        """Whether another process committed to the file since the last call. Never
        waits: while this process is using the file, False (asked again later)."""
        version = data_version_nowait(self._db, self._lock)
        if version is None:
            return False
        changed, self._seen_version = version != self._seen_version, version
        return changed

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- events
    def append(self, events: list[Json]) -> list[Json]:
        """Sequence events atomically; return them with `cursor` set (and `ts` if missing)."""
        return [event for event, _ in self.append_encoded(events)]

    def append_encoded(
        self, events: list[Json], opened: Sequence[Json] = (), finished: Sequence[str] = ()
    ) -> list[tuple[Json, str]]:
        """As `append`, with each event's JSON as stored (what the publisher sends on). In
        the same transaction: the runs `opened` (active_runs rows, as `record_send`'s
        `run`) and then those `finished` (run ids), so a run's row goes with its events."""
        now = time.time()
        out: list[tuple[Json, str]] = []
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                for run in opened:
                    _open_run(cur, run, now)
                live = self._live_deltas(cur)
                out, changed = _sequence(cur, events, now, live)
                if finished:
                    cur.executemany(
                        "DELETE FROM active_runs WHERE run_id = ?", [(r,) for r in finished]
                    )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            _apply(live, changed)
        return out

    def _live_deltas(self, cur: sqlite3.Cursor) -> dict[str, int]:
        if self._live is None:
            live: dict[str, int] = {}
            for key, cursor in cur.execute(
                "SELECT coalesce_key, cursor FROM events WHERE coalesce_key IS NOT NULL "
                "ORDER BY cursor"
            ):
                live[str(key).removeprefix("delta:")] = int(cursor)
            self._live = live
        return self._live

    def head(self) -> int:
        with self._lock:
            return _last_cursor(self._db.cursor())

    def trimmed_upto(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'trimmed_upto'").fetchone()
        return int(row[0]) if row else 0

    def since(self, cursor: int, limit: int = 10_000) -> tuple[list[Json], bool]:
        """Events after `cursor`, oldest first, and whether retention left a gap before them."""
        gap = cursor < self.trimmed_upto()
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM events WHERE cursor > ? ORDER BY cursor LIMIT ?", (cursor, limit)
            ).fetchall()
        return [json.loads(row[0]) for row in rows], gap

    def count_after(self, cursor: int, upto: int) -> int:
        """How many events are held with a cursor in (cursor, upto]."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM events WHERE cursor > ? AND cursor <= ?", (cursor, upto)
            ).fetchone()
        return int(row[0])

    def trim(self, older_than: float) -> int:
        """Drop the oldest events, in cursor order, up to the first one created at or after
        `older_than` (unix time); return how many. (A clock stepped back can leave an older
        row behind a newer one: it stays until a later pass, never the reverse.)"""
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                upto = _expired_prefix(cur, older_than)
                deleted = (
                    cur.execute("DELETE FROM events WHERE cursor <= ?", (upto,)).rowcount
                    if upto
                    else 0
                )
                if upto:
                    cur.execute(
                        "INSERT INTO meta(key, value) VALUES ('trimmed_upto', ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = MAX(CAST(value AS INTEGER), excluded.value)",
                        (str(upto),),
                    )
                cur.execute("DELETE FROM idempotency WHERE created < ?", (older_than,))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            if upto and self._live:  # the deltas retention dropped (only once committed)
                self._live = {m: c for m, c in self._live.items() if c > upto}
        return int(deleted)

    # -- idempotency
    def idem_get(self, key: str) -> tuple[Json, bool] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT result, dispatched FROM idempotency WHERE key = ?", (key,)
            ).fetchone()
        return (json.loads(row[0]), bool(row[1])) if row else None

    def record_send(
        self,
        key: str | None,
        result: Json,
        events: list[Json],
        run: Json | None,
        sent: SentMessage | None = None,
        conversation_id: str | None = None,
    ) -> list[Json]:
        """Store a send's result, its events, its run and its message ids (``sent``, in
        ``conversation_id``) in one transaction."""
        now = time.time()
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                if sent is not None and conversation_id is not None:
                    cur.execute(
                        "INSERT OR IGNORE INTO sent_messages(message_id, conversation_id, run_id, "
                        "created, text_len, text_sha) VALUES (?, ?, ?, ?, ?, ?)",
                        (
                            sent.message_id,
                            conversation_id,
                            sent.run_id,
                            sent.created,
                            sent.text_len,
                            sent.text_sha,
                        ),
                    )
                if key is not None:
                    cur.execute(
                        "INSERT INTO idempotency(key, created, result, dispatched) VALUES (?, ?, ?, 0)",
                        (key, now, dumps(result)),
                    )
                if run is not None:
                    _open_run(cur, run, now)
                live = self._live_deltas(cur)
                sequenced, changed = _sequence(cur, events, now, live)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            _apply(live, changed)
            if sent is not None:
                self.sends_recorded += 1
        return [event for event, _ in sequenced]

    def sent_messages(self, conversation_id: str) -> list[SentMessage]:
        """The sends recorded in a conversation, oldest first (read off the loop)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT message_id, run_id, created, text_len, text_sha FROM sent_messages "
                "WHERE conversation_id = ? ORDER BY created, rowid",
                (conversation_id,),
            ).fetchall()
        return [SentMessage(str(r[0]), r[1], float(r[2]), int(r[3]), str(r[4])) for r in rows]

    def mark_dispatched(self, key: str) -> None:
        with self._lock:
            self._db.execute("UPDATE idempotency SET dispatched = 1 WHERE key = ?", (key,))

    def last_delta_text(self, message_id: str) -> str:
        """The newest cumulative text streamed for a message (kept by coalescing)."""
        with self._lock:
            cursor = self._live_deltas(self._db.cursor()).get(message_id)
            row = (
                self._db.execute("SELECT body FROM events WHERE cursor = ?", (cursor,)).fetchone()
                if cursor is not None
                else None
            )
        return str(json.loads(row[0]).get("text", "")) if row else ""

    # -- small persistent settings (e.g. YOLO per session, which Hermes keeps in memory only)
    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def delete_meta(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def meta_keys(self, prefix: str) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key FROM meta WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
            ).fetchall()
        return [str(row[0])[len(prefix) :] for row in rows]

    # -- inbound commands already carried out (redelivered after a failed XACK or a crash)
    def was_processed(self, entry_id: str) -> bool:
        return entry_id in self.processed_replies([entry_id])

    def processed_among(self, entry_ids: list[str]) -> set[str]:
        """Which of these entries were carried out already (one query for a whole batch)."""
        return set(self.processed_replies(entry_ids))

    def processed_replies(self, entry_ids: list[str]) -> dict[str, str | None]:
        """The entries among these carried out already, each with its kept replies."""
        found: dict[str, str | None] = {}
        with self._lock:
            for start in range(0, len(entry_ids), _SQL_VARS):
                chunk = entry_ids[start : start + _SQL_VARS]
                rows = self._db.execute(
                    "SELECT entry_id, replies FROM processed "
                    f"WHERE entry_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                found.update((str(row[0]), row[1]) for row in rows)
        return found

    def mark_processed(self, entry_id: str, replies: str | None = None) -> None:
        """Record an entry as carried out, with the replies to send again if it comes back."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO processed(entry_id, at, replies) VALUES (?, ?, ?)",
                (entry_id, time.time(), replies),
            )

    def mark_processed_many(self, entry_ids: list[str]) -> None:
        """Record entries as carried out, in one transaction (no replies kept)."""
        now = time.time()
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.executemany(
                    "INSERT OR IGNORE INTO processed(entry_id, at) VALUES (?, ?)",
                    [(entry_id, now) for entry_id in entry_ids],
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def prune_processed(self, before: float) -> int:
        """Forget the entries carried out before `before` (unix time); return how many."""
        with self._lock:
            return int(self._db.execute("DELETE FROM processed WHERE at < ?", (before,)).rowcount)

    def processed_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM processed").fetchone()[0])

    # -- runs
    def finish_run(self, run_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM active_runs WHERE run_id = ?", (run_id,))

    def active_runs(self) -> list[Json]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, lane, conversation_id FROM active_runs"
            ).fetchall()
        return [{"run_id": r[0], "lane": json.loads(r[1]), "conversation_id": r[2]} for r in rows]

    # -- acknowledgements
    def ack(self, device_id: str, cursor: int) -> int:
        """Record how far a device got; cursors only move forward. Returns the stored cursor."""
        return self.ack_many([(device_id, cursor)])[device_id]

    def ack_many(self, acks: list[tuple[str, int]]) -> dict[str, int]:
        """Several devices' acks in one transaction; the stored cursor of each. An ack past
        the last cursor given out counts as that one: a device's clock of cursors cannot
        run ahead (it would silence pushes to every device for events it never saw)."""
        now = time.time()
        stored: dict[str, int] = {}
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                head = _last_cursor(cur)
                for device_id, asked in acks:
                    cursor = min(asked, head)
                    cur.execute(
                        "INSERT INTO device_acks(device_id, cursor, updated) VALUES (?, ?, ?) "
                        "ON CONFLICT(device_id) DO UPDATE SET cursor = MAX(cursor, excluded.cursor), "
                        "updated = excluded.updated RETURNING cursor",
                        (device_id, cursor, now),
                    )
                    stored[device_id] = int(cur.fetchone()[0])
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return stored

    def acks(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT device_id, cursor FROM device_acks").fetchall()
        return {r[0]: int(r[1]) for r in rows}


def _open_run(cur: sqlite3.Cursor, run: Json, now: float) -> None:
    cur.execute(
        "INSERT OR REPLACE INTO active_runs(run_id, lane, conversation_id, started) VALUES (?, ?, ?, ?)",
        (run["run_id"], dumps(run["lane"]), run.get("conversation_id"), now),
    )


def _last_cursor(cur: sqlite3.Cursor) -> int:
    """The last cursor ever given out. The newest row holds it whenever there is one: trim
    drops only a prefix, and a delta coalesces away only in the transaction that appends a
    newer row (its number read first). Only an emptied table needs the floor."""
    newest = cur.execute("SELECT MAX(cursor) FROM events").fetchone()[0]
    if newest is not None:
        return int(newest)
    floor = cur.execute(_CURSOR_FLOOR).fetchone()[0]
    return int(floor) if floor is not None else 0


def _expired_prefix(cur: sqlite3.Cursor, older_than: float, chunk: int = 1000) -> int:
    """The last cursor of the run of oldest events created before `older_than` (0: none).
    Reads only that run and one chunk more, through the primary key."""
    upto = 0
    while True:
        rows = cur.execute(
            "SELECT cursor, created FROM events WHERE cursor > ? ORDER BY cursor LIMIT ?",
            (upto, chunk),
        ).fetchall()
        for cursor, created in rows:
            if created >= older_than:
                return upto
            upto = int(cursor)
        if len(rows) < chunk:
            return upto


def _sequence(
    cur: sqlite3.Cursor, events: list[Json], now: float, live: dict[str, int]
) -> tuple[list[tuple[Json, str]], dict[str, int | None]]:
    """Give each event the next cursor inside the caller's transaction. A delta replaces
    its message's previous delta; a complete message drops its deltas (they are cumulative).
    `live` (message id -> its kept delta's cursor) is only read: the changes come back for
    the caller to apply once the transaction has committed (None: no delta kept).

    The write lock is held (BEGIN IMMEDIATE), so the next cursor is the last one given out
    + 1, read before any delta coalesces away: the row goes in once, body and cursor
    together."""
    cursor = _last_cursor(cur)
    out: list[tuple[Json, str]] = []
    changed: dict[str, int | None] = {}
    for event in events:
        kind = event["type"]
        key = None
        if kind in ("message.delta", "message.complete"):
            message = str(event["message_id"])
            stale = changed[message] if message in changed else live.get(message)
            if stale is not None:
                cur.execute("DELETE FROM events WHERE cursor = ?", (stale,))
            changed[message] = None
            if kind == "message.delta":
                key = f"delta:{message}"
                changed[message] = cursor + 1
        cursor += 1
        sequenced = {**event, "cursor": cursor}
        body, scrubbed = dumps_clean(sequenced)
        if scrubbed:  # a lone surrogate (from a model, say): what is stored is what goes out
            sequenced = json.loads(body)
        cur.execute(
            "INSERT INTO events(cursor, created, type, coalesce_key, body) VALUES (?, ?, ?, ?, ?)",
            (cursor, now, kind, key, body),
        )
        out.append((sequenced, body))
    return out, changed


def _apply(live: dict[str, int], changed: dict[str, int | None]) -> None:
    for message, cursor in changed.items():
        if cursor is None:
            live.pop(message, None)
        else:
            live[message] = cursor
