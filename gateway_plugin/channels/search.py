"""Read-only full-text search over Hermes' state.db for the app's search screen.

Hermes keeps two FTS5 indexes over ``messages`` (rowid = messages.id): ``messages_fts``
(unicode61 words) and ``messages_fts_trigram`` (substrings, any script). Word search goes
first; CJK text, ``mode="substring"`` or a word search with no hits use the trigram index.
Terms shorter than a trigram are matched with LIKE, which is also the last resort when the
trigram table is missing. The statements are `gateway_plugin.hermes.state_db`'s (read-only).
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from gateway_plugin.channels.search_query import ParsedQuery, parse_query
from gateway_plugin.errors import CommandError
from gateway_plugin.hermes import state_db
from gateway_plugin.hermes.state_db import FTS_TRIGRAM, FTS_WORDS, SearchFilter

logger = logging.getLogger(__name__)

Scope = Literal["all", "chat"]
Mode = Literal["auto", "substring"]
ChannelResolver = Callable[[str], list[str]]

MAX_LIMIT: Final = 200
# snippet() counts tokens; a trigram "token" is one character, so it needs a wider window
# for roughly the same ~12 words of context.
SNIPPET_TOKENS: Final = {FTS_WORDS: 12, FTS_TRIGRAM: 48}
_LIKE_WINDOW: Final = 64  # characters of context in a LIKE-path snippet
# The LIKE fallback scans rows one by one: at most the newest LIKE_SCAN_ROWS messages, and
# no longer than LIKE_BUDGET_S (an interrupted scan answers no hits; the wire has no
# "partial" marker). It runs on the read pool, so the bound protects the pool, not the loop.
LIKE_SCAN_ROWS: Final = 20_000
LIKE_BUDGET_S: Final = 0.25
_PROGRESS_STEPS: Final = 10_000  # SQLite VM steps between two looks at the clock


class SearchError(CommandError):
    """A search request the caller must fix (always ``bad_request``)."""

    def __init__(self, message: str) -> None:
        super().__init__("bad_request", message)


@dataclass(frozen=True)
class SearchHit:
    message_id: str
    chat_id: str
    thread_id: str | None
    role: str
    snippet: str
    ts: str  # ISO-8601 UTC
    session_id: str
    rank: float  # bm25: lower is better; 0.0 for LIKE-only matches (newest first)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def like_snippet(content: str, terms: Sequence[str]) -> str:
    """FTS5-style snippet for rows found by LIKE: ``[term]`` marks, ``…`` at cut ends."""
    alternatives = sorted({t for t in terms if t}, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, alternatives)), re.IGNORECASE)
    first = pattern.search(content) if alternatives else None
    start = max(0, first.start() - _LIKE_WINDOW // 3) if first else 0
    end = min(len(content), start + _LIKE_WINDOW)
    window = content[start:end]
    if alternatives:
        window = pattern.sub(lambda m: f"[{m.group(0)}]", window)
    return ("…" if start else "") + window + ("…" if end < len(content) else "")


class SearchIndex:
    def __init__(self, state_db_path: Path, platform: str = "android") -> None:
        self.state_db_path = state_db_path
        self.platform = platform
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._trigram: bool | None = None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connect(self) -> sqlite3.Connection | None:
        # Hermes creates state.db on its first session; until then there is nothing to find.
        if self._conn is None:
            self._conn = state_db.open_readonly(self.state_db_path)
        return self._conn

    def _has_trigram(self, conn: sqlite3.Connection) -> bool:
        if self._trigram is None:
            self._trigram = state_db.has_trigram_index(conn)
        return self._trigram

    def search(
        self,
        query: str,
        *,
        scope: Scope = "all",
        chat_id: str | None = None,
        thread_id: str | None = None,
        limit: int = 50,
        channel_resolver: ChannelResolver | None = None,
        mode: Mode = "auto",
    ) -> list[SearchHit]:
        """Hits for ``query`` on this platform, best first. ``scope="chat"`` needs
        ``chat_id``; without ``thread_id`` it covers the chat and all its threads."""
        if scope not in ("all", "chat"):
            raise SearchError(f"unknown scope {scope!r}")
        if scope == "chat" and not chat_id:
            raise SearchError("scope 'chat' needs a chat_id")
        if mode not in ("auto", "substring"):
            raise SearchError(f"unknown mode {mode!r}")
        try:
            limit = max(1, min(MAX_LIMIT, int(limit)))
        except (TypeError, ValueError):
            raise SearchError("limit must be an integer") from None
        parsed = parse_query(query)
        where = (
            None
            if parsed.is_empty
            else self._where(parsed, scope, chat_id, thread_id, channel_resolver)
        )
        if where is None:
            return []
        with self._lock:
            try:
                conn = self._connect()
                if conn is None:
                    return []
                if mode == "auto" and not parsed.has_cjk:
                    expr = parsed.word_match()
                    hits = self._fts(conn, FTS_WORDS, expr, where, limit) if expr else []
                    if hits:
                        return hits
                return self._substring(conn, parsed, where, limit)
            except sqlite3.Error:
                # A busy, half-initialised or damaged state.db degrades to "no results";
                # user input cannot cause this (every term is a quoted FTS5 string).
                logger.warning("state.db search failed", exc_info=True)
                return []

    def _where(
        self,
        parsed: ParsedQuery,
        scope: Scope,
        chat_id: str | None,
        thread_id: str | None,
        channel_resolver: ChannelResolver | None,
    ) -> SearchFilter | None:
        chats: list[str] | None = None
        if scope == "chat":
            chats = [str(chat_id)]
        if parsed.channels:
            named: list[str] = []
            for name in parsed.channels:
                found = channel_resolver(name) if channel_resolver else [name]
                named.extend(c for c in found if c not in named)
            if not named:
                return None  # a channel that does not exist holds no messages
            chats = named if chats is None else [c for c in chats if c in named]
            if not chats:
                return None
        return state_db.search_filter(
            self.platform,
            parsed.roles or ("user", "assistant"),
            chat_ids=chats,
            thread_id=thread_id if scope == "chat" else None,
        )

    def _substring(
        self, conn: sqlite3.Connection, parsed: ParsedQuery, where: SearchFilter, limit: int
    ) -> list[SearchHit]:
        expr = parsed.trigram_match()
        if expr is not None and self._has_trigram(conn):
            narrowed = where.containing_all(parsed.short_terms)
            return self._fts(conn, FTS_TRIGRAM, expr, narrowed, limit)
        return self._like(conn, parsed.terms, where.containing_all(parsed.terms), limit)

    def _fts(
        self, conn: sqlite3.Connection, table: str, expr: str, where: SearchFilter, limit: int
    ) -> list[SearchHit]:
        rows = state_db.fts_rows(conn, table, expr, where, limit, SNIPPET_TOKENS[table])
        return [_hit(row) for row in rows]

    def _like(
        self, conn: sqlite3.Connection, terms: Sequence[str], where: SearchFilter, limit: int
    ) -> list[SearchHit]:
        deadline = time.monotonic() + LIKE_BUDGET_S
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
        try:
            rows = state_db.newest_rows(conn, where, limit, scan_rows=LIKE_SCAN_ROWS)
        except sqlite3.OperationalError as exc:
            if "interrupted" not in str(exc):
                raise
            logger.info("substring search cut at %.0f ms: no hits returned", LIKE_BUDGET_S * 1000)
            return []
        finally:
            conn.set_progress_handler(None, 0)
        return [_hit((*row[:4], like_snippet(str(row[4]), terms), *row[5:])) for row in rows]


def _hit(row: tuple[Any, ...]) -> SearchHit:
    message_id, chat_id, thread_id, role, snippet, timestamp, session_id, rank = row
    return SearchHit(
        message_id=str(message_id),
        chat_id=str(chat_id),
        thread_id=thread_id or None,
        role=str(role),
        snippet=(snippet or "").strip(),  # Hermes indexes "content tool_name tool_calls"
        ts=_iso(float(timestamp)),
        session_id=str(session_id),
        rank=float(rank),
    )
