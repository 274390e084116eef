"""Every statement the plugin runs against Hermes' state.db, as plain functions.

state.db is Hermes' file: its schema is Hermes' to change, so every SQL statement the
plugin runs against it lives here, next to the schema check (`contract.STATE_DB_SCHEMA`).
The readers take an open connection and return plain data; they are synchronous and
blocking, so callers run them off the event loop. The file is opened read-only
(``mode=ro``, ``query_only``): the plugin writes to it only through Hermes' own
``SessionDB`` (:func:`delete_sessions`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from canonical.model import Json, Lane
from gateway_plugin.hermes import contract

FTS_WORDS: Final = "messages_fts"
FTS_TRIGRAM: Final = "messages_fts_trigram"

_schema_lock = threading.Lock()
_schema_checked: set[Path] = set()


def open_readonly(path: Path, *, timeout: float = 5.0) -> sqlite3.Connection | None:
    """A read-only connection to state.db (rows as `sqlite3.Row`), or None while Hermes
    has not created it or when its schema is not the one the readers expect (checked
    on the first open of each file; the mismatch is logged once and history is off)."""
    if not contract.enabled(contract.HISTORY) or not path.exists():
        return None
    # as_uri() percent-encodes: HERMES_HOME may hold spaces, "?" or "#".
    uri = f"{path.resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA query_only = 1")
        with _schema_lock:
            first = path not in _schema_checked
        if first:
            contract.apply(contract.check_schema(conn))
            with _schema_lock:
                _schema_checked.add(path)
    except BaseException:
        conn.close()
        raise
    if not contract.enabled(contract.HISTORY):
        conn.close()
        return None
    return conn


def forget_schema_checks() -> None:
    """Check every state.db again on its next open (a new connect, a test)."""
    with _schema_lock:
        _schema_checked.clear()


# -- a lane's sessions and messages
_LANE = "s.source = ? AND s.chat_id = ? AND s.thread_id IS ?"


def lane_sessions(conn: sqlite3.Connection, platform: str, lane: Lane) -> list[Json]:
    """The lane's sessions (id, started_at, ended_at), oldest first."""
    rows = conn.execute(
        f"SELECT s.id, s.started_at, s.ended_at FROM sessions s WHERE {_LANE} "
        "ORDER BY s.started_at",
        (platform, lane[0], lane[1]),
    ).fetchall()
    return [dict(row) for row in rows]


def latest_session(
    conn: sqlite3.Connection, platform: str, lane: Lane
) -> tuple[str | None, float | None]:
    """(id, unix time of its newest message) of the lane's newest session."""
    row = conn.execute(
        "SELECT s.id, (SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id) "
        f"AS last FROM sessions s WHERE {_LANE} ORDER BY s.started_at DESC LIMIT 1",
        (platform, lane[0], lane[1]),
    ).fetchone()
    if row is None:
        return None, None
    return str(row["id"]), None if row["last"] is None else float(row["last"])


def lane_messages(conn: sqlite3.Connection, platform: str, lane: Lane) -> list[Json]:
    """Every live user and assistant row of the lane (id, role, content, timestamp,
    reasoning), in transcript order."""
    rows = conn.execute(
        "SELECT m.id, m.role, m.content, m.timestamp, m.reasoning FROM messages m "
        f"JOIN sessions s ON s.id = m.session_id WHERE {_LANE} "
        "AND m.role IN ('user', 'assistant') AND m.active = 1 ORDER BY m.id",
        (platform, lane[0], lane[1]),
    ).fetchall()
    return [dict(row) for row in rows]


def lane_rows_before(
    conn: sqlite3.Connection, platform: str, lane: Lane, before: int | None, count: int
) -> list[Json]:
    """Up to `count` of the lane's rows (as `lane_messages`) older than row `before` (all
    when None), newest first: a history page reads its rows in such chunks."""
    older = "" if before is None else "AND m.id < ? "
    rows = conn.execute(
        "SELECT m.id, m.role, m.content, m.timestamp, m.reasoning FROM messages m "
        f"JOIN sessions s ON s.id = m.session_id WHERE {_LANE} "
        f"AND m.role IN ('user', 'assistant') AND m.active = 1 {older}ORDER BY m.id DESC LIMIT ?",
        (platform, lane[0], lane[1], *(() if before is None else (before,)), count),
    ).fetchall()
    return [dict(row) for row in rows]


def lane_rows_from(
    conn: sqlite3.Connection, platform: str, lane: Lane, start: int, count: int
) -> list[Json]:
    """Up to `count` of the lane's rows from row `start` on, oldest first."""
    rows = conn.execute(
        "SELECT m.id, m.role, m.content, m.timestamp, m.reasoning FROM messages m "
        f"JOIN sessions s ON s.id = m.session_id WHERE {_LANE} "
        "AND m.role IN ('user', 'assistant') AND m.active = 1 AND m.id >= ? "
        "ORDER BY m.id LIMIT ?",
        (platform, lane[0], lane[1], start, count),
    ).fetchall()
    return [dict(row) for row in rows]


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: every read inside sees state.db as of its first read (taken
    here), none after; ended (rolled back: nothing is written) on the way out."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT 1 FROM sessions LIMIT 1")
        yield
    finally:
        conn.rollback()


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits to the file (SQLite's
    ``PRAGMA data_version``, for one long-lived connection): an unchanged one means every
    row read before is still as it was."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


# The modulus of the third fingerprint sum: squares of row ids, kept within 64 bits.
_FINGERPRINT_MOD = 2_147_483_647


def lane_fingerprint(
    conn: sqlite3.Connection, platform: str, lane: Lane, upto: int | None = None
) -> tuple[int, int, int, int]:
    """(count, sum of ids, sum of squared ids modulo a prime, newest id) of the lane's live
    rows of every role (up to row `upto` when given; zeros for none). Hermes never changes
    a stored row's text: it appends rows and flips `active` (undo, compression, redo), so
    an unchanged fingerprint says the live rows are the ones read before. One scan of a
    covering index, in SQLite."""
    upto_clause = "" if upto is None else "AND m.id <= ? "
    row = conn.execute(
        f"SELECT count(*), sum(m.id), sum(m.id * m.id % {_FINGERPRINT_MOD}), max(m.id) "
        f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE {_LANE} "
        f"AND m.active = 1 {upto_clause}",
        (platform, lane[0], lane[1], *(() if upto is None else (upto,))),
    ).fetchone()
    return (int(row[0]), int(row[1] or 0), int(row[2] or 0), int(row[3] or 0))


def lane_rows_between(
    conn: sqlite3.Connection, platform: str, lane: Lane, after: int, upto: int
) -> list[Json]:
    """The lane's live user and assistant rows (id, role, content, timestamp) after row
    `after` up to row `upto`, oldest first."""
    rows = conn.execute(
        "SELECT m.id, m.role, m.content, m.timestamp FROM messages m "
        f"JOIN sessions s ON s.id = m.session_id WHERE {_LANE} "
        "AND m.role IN ('user', 'assistant') AND m.active = 1 AND m.id > ? AND m.id <= ? "
        "ORDER BY m.id",
        (platform, lane[0], lane[1], after, upto),
    ).fetchall()
    return [dict(row) for row in rows]


def turn_rows(conn: sqlite3.Connection, platform: str, lane: Lane, since: float) -> list[Json]:
    """The lane's live user, assistant and tool rows written at or after `since` (role,
    tool_calls, reasoning: whichever of Hermes' two reasoning columns holds it)."""
    rows = conn.execute(
        "SELECT m.role, m.tool_calls, "
        "COALESCE(NULLIF(m.reasoning, ''), NULLIF(m.reasoning_content, '')) AS reasoning "
        f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE {_LANE} "
        "AND m.role IN ('user', 'assistant', 'tool') AND m.active = 1 AND m.timestamp >= ? "
        "ORDER BY m.id",
        (platform, lane[0], lane[1], since),
    ).fetchall()
    return [dict(row) for row in rows]


# -- full-text search over Hermes' two FTS5 indexes of `messages` (rowid = messages.id)
@dataclass
class SearchFilter:
    """The WHERE clause of a search, built from plain values; columns stay in here."""

    clauses: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, clause: str, *params: Any) -> None:
        self.clauses.append(clause)
        self.params.extend(params)

    def containing_all(self, terms: Sequence[str]) -> SearchFilter:
        """This filter, narrowed to rows whose content holds every term (LIKE)."""
        extra = SearchFilter(list(self.clauses), list(self.params))
        for term in terms:
            extra.add(r"m.content LIKE ? ESCAPE '\'", f"%{_escape_like(term)}%")
        return extra

    @property
    def sql(self) -> str:
        return " AND ".join(self.clauses)


def search_filter(
    platform: str,
    roles: Sequence[str],
    *,
    chat_ids: Sequence[str] | None = None,
    thread_id: str | None = None,
) -> SearchFilter:
    """Live, non-empty messages of `roles` on `platform`; in `chat_ids` (and `thread_id`)
    when given."""
    where = SearchFilter()
    where.add("s.source = ?", platform)
    where.add("m.active = 1")  # rewound (undone) rows are not part of the history
    where.add(f"m.role IN ({', '.join('?' for _ in roles)})", *roles)
    where.add("s.chat_id IS NOT NULL AND m.content IS NOT NULL AND m.content != ''")
    if chat_ids is not None:
        where.add(f"s.chat_id IN ({', '.join('?' for _ in chat_ids)})", *chat_ids)
    if thread_id:
        where.add("s.thread_id = ?", thread_id)
    return where


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _tuples(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor returning plain tuples: search rows are many and read by position."""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor


def has_trigram_index(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (FTS_TRIGRAM,)).fetchone()
    return row is not None


SearchRow = tuple[Any, ...]  # (id, chat_id, thread_id, role, snippet|content, ts, session, rank)


def fts_rows(
    conn: sqlite3.Connection,
    table: str,
    expr: str,
    where: SearchFilter,
    limit: int,
    snippet_tokens: int,
) -> list[SearchRow]:
    """Best-ranked matches of an FTS5 expression, with FTS5's snippet (``[`` ``]``)."""
    if table not in (FTS_WORDS, FTS_TRIGRAM):
        raise ValueError(f"not a state.db FTS5 index: {table!r}")
    rows: list[SearchRow] = (
        _tuples(conn)
        .execute(
            f"""SELECT m.id, s.chat_id, s.thread_id, m.role,
                   snippet({table}, 0, '[', ']', '…', {int(snippet_tokens)}),
                   m.timestamp, m.session_id, {table}.rank
            FROM {table}
            JOIN messages m ON m.id = {table}.rowid
            JOIN sessions s ON s.id = m.session_id
            WHERE {table} MATCH ? AND {where.sql}
            ORDER BY {table}.rank LIMIT ?""",
            [expr, *where.params, limit],
        )
        .fetchall()
    )
    return rows


def newest_rows(
    conn: sqlite3.Connection, where: SearchFilter, limit: int, scan_rows: int | None = None
) -> list[SearchRow]:
    """Newest matches of a plain filter, with the whole content and rank 0.0; with
    `scan_rows`, among the newest `scan_rows` messages only (a bounded scan)."""
    sql, params = where.sql, list(where.params)
    if scan_rows is not None:
        sql += " AND m.id > (SELECT coalesce(max(id), 0) FROM messages) - ?"
        params.append(int(scan_rows))
    rows: list[SearchRow] = (
        _tuples(conn)
        .execute(
            f"""SELECT m.id, s.chat_id, s.thread_id, m.role, m.content,
                   m.timestamp, m.session_id, 0.0
            FROM messages m JOIN sessions s ON s.id = m.session_id
            WHERE {sql}
            ORDER BY m.timestamp DESC, m.id DESC LIMIT ?""",
            [*params, limit],
        )
        .fetchall()
    )
    return rows


# -- writes: through Hermes' own SessionDB only
def delete_sessions(session_ids: list[str], db_path: Path | None = None) -> int:
    """Delete Hermes sessions (transcript and messages) through Hermes' own SessionDB;
    how many existed."""
    contract.require(contract.HISTORY_DELETE)
    from hermes_state import SessionDB

    db = SessionDB() if db_path is None else SessionDB(db_path=db_path)
    deleted = 0
    try:
        for session_id in session_ids:
            if db.delete_session(session_id):
                deleted += 1
    finally:
        db.close()
    return deleted


__all__ = [
    "FTS_TRIGRAM",
    "FTS_WORDS",
    "SearchFilter",
    "data_version",
    "delete_sessions",
    "forget_schema_checks",
    "fts_rows",
    "has_trigram_index",
    "lane_fingerprint",
    "lane_messages",
    "lane_rows_between",
    "lane_sessions",
    "latest_session",
    "newest_rows",
    "open_readonly",
    "search_filter",
    "turn_rows",
]
