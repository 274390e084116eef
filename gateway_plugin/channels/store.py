"""Channel directory (channels.db): the app's source of truth for channels and threads.

Lanes are ``(chat_id, thread_id)`` pairs, exactly what Hermes addresses. Rows are never
hard-deleted: archived lanes stay searchable and their ids retired. Synchronous on purpose
(workers and CLI processes use it directly); the plugin calls its writes on channels.db's
storage thread. Reads come from an in-memory snapshot of the (small) table, reloaded after
every write of this process and whenever another process changed the file, so the
synchronous Hermes callbacks that need a lane on the event loop never touch SQLite: with
``refresh_on_read=False`` (the plugin) a reader never checks the file itself, the storage
thread's periodic ``refresh()`` does.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from gateway_plugin.errors import CommandError
from gateway_plugin.storage.sqlite_file import BUSY_TIMEOUT_S, data_version, data_version_nowait

Kind = Literal["default", "channel", "thread"]
NameSource = Literal["derived", "llm", "user"]

# A lower-ranked source never overwrites a higher one (Hermes' two-stage titling + user).
_NAME_RANK: Final[dict[str, int]] = {"derived": 0, "llm": 1, "user": 2}
MAX_NAME_LEN: Final = 100
DEFAULT_NAME: Final = "Default"

# Index i upgrades user_version i -> i + 1; never edit a released entry, append. Keep them
# idempotent (IF NOT EXISTS): two processes may open a fresh file at the same moment.
_MIGRATIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE IF NOT EXISTS entries (
        chat_id TEXT NOT NULL,
        thread_id TEXT NOT NULL DEFAULT '',  -- '' = flat lane, so the primary key is unique
        name TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('default', 'channel', 'thread')),
        parent_chat_id TEXT,
        is_default INTEGER NOT NULL DEFAULT 0,
        automation INTEGER NOT NULL DEFAULT 0,
        archived INTEGER NOT NULL DEFAULT 0,
        threads_enabled INTEGER NOT NULL DEFAULT 0,
        name_source TEXT NOT NULL DEFAULT 'user',
        auto INTEGER NOT NULL DEFAULT 0,
        conversation_id TEXT NOT NULL UNIQUE,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        PRIMARY KEY (chat_id, thread_id)
    );
    -- One default channel, enforced by the file itself.
    CREATE UNIQUE INDEX IF NOT EXISTS one_default ON entries (is_default) WHERE is_default = 1;
    CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
    """,
)
SCHEMA_VERSION: Final = len(_MIGRATIONS)


class ChannelError(CommandError):
    """Directory errors; each subclass fixes the wire ``code`` answered to the requester."""

    code = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(type(self).code, message)


class NotFoundError(ChannelError):
    code = "not_found"


class BadRequestError(ChannelError):
    code = "bad_request"


class ArchivedError(ChannelError):
    code = "archived"


class UnsupportedError(ChannelError):
    code = "unsupported"


@dataclass(frozen=True)
class ChannelEntry:
    chat_id: str
    thread_id: str | None
    name: str
    kind: Kind
    parent_chat_id: str | None
    is_default: bool
    automation: bool
    archived: bool
    threads_enabled: bool
    name_source: NameSource
    auto: bool
    conversation_id: str
    created: float
    updated: float

    def event(self, kind: str, **extra: Any) -> dict[str, Any]:
        """The canonical event announcing this entry (`channel.created`, `.renamed`...)."""
        return {
            "type": kind,
            "lane": [self.chat_id, self.thread_id],
            "conversation_id": self.conversation_id,
            "entry": self.to_wire(),
            **extra,
        }

    def to_wire(self) -> dict[str, Any]:
        # Every field is a scalar: a shallow copy is asdict's result without its recursion
        # (the channel directory is built for every batch of hellos).
        return dict(self.__dict__)


EntryList = list[ChannelEntry]  # aliases: in ChannelDirectory, `list` is a method
StrList = list[str]


def validate_name(name: str) -> str:
    cleaned = name.strip() if isinstance(name, str) else ""
    if not 1 <= len(cleaned) <= MAX_NAME_LEN:
        raise BadRequestError(f"name must be 1..{MAX_NAME_LEN} characters")
    # Cc/Zl/Zp would break one-line rendering; Cf stays allowed (emoji ZWJ sequences).
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") for ch in cleaned):
        raise BadRequestError("name must not contain control characters")
    return cleaned


_BOOL_FIELDS: Final = ("is_default", "automation", "archived", "threads_enabled", "auto")


def _row_to_entry(row: sqlite3.Row) -> ChannelEntry:
    data = dict(row)
    data["thread_id"] = data["thread_id"] or None
    data.update({f: bool(data[f]) for f in _BOOL_FIELDS})
    return ChannelEntry(**data)


def _named(entries: tuple[ChannelEntry, ...], wanted: str) -> EntryList:
    """Channels (never threads) named `wanted` (casefolded): live ones first, then the
    default, then the oldest."""
    found = [e for e in entries if e.kind != "thread" and e.name.casefold() == wanted]
    found.sort(key=lambda e: (e.archived, not e.is_default, e.created))
    return found


def _suffix_number(value: str, prefix: str) -> int:
    tail = value.removeprefix(prefix)
    return int(tail) if tail != value and tail.isascii() and tail.isdigit() else 0


@dataclass(frozen=True)
class _Snapshot:
    """Every entry, in rowid order, and its indexes; replaced whole, never mutated."""

    entries: tuple[ChannelEntry, ...]
    by_lane: dict[tuple[str, str], ChannelEntry]
    by_conversation: dict[str, ChannelEntry]

    @classmethod
    def of(cls, entries: EntryList) -> _Snapshot:
        return cls(
            tuple(entries),
            {(e.chat_id, e.thread_id or ""): e for e in entries},
            {e.conversation_id: e for e in entries},
        )


class ChannelDirectory:
    def __init__(
        self,
        path: Path,
        home_chat_id: str = "android:default",
        *,
        refresh_on_read: bool = True,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self.home_chat_id = home_chat_id
        # Minted ids share the home channel's platform prefix ("android:chan_7").
        self._prefix = home_chat_id.split(":", 1)[0] + ":" if ":" in home_chat_id else "android:"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._refresh_on_read = refresh_on_read
        self._conn = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=busy_timeout_s
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"channels.db schema v{version} is newer than supported")
        for target in range(version, SCHEMA_VERSION):
            # executescript commits on its own, so the version bump rides in the same script.
            self._conn.executescript(
                f"BEGIN; {_MIGRATIONS[target]} PRAGMA user_version = {target + 1}; COMMIT;"
            )
        self._data_version = -1
        self._snap = _Snapshot.of([])
        with self._lock:
            self._reload()

    def _reload(self) -> None:
        """Read the whole table into a new snapshot (under the lock)."""
        self._data_version = data_version(self._conn)
        rows = self._conn.execute("SELECT * FROM entries ORDER BY rowid").fetchall()
        self._snap = _Snapshot.of([_row_to_entry(r) for r in rows])

    def refresh(self) -> bool:
        """Reload the snapshot if another process changed the file; True if it did."""
        with self._lock:
            version = data_version(self._conn)
            if version == self._data_version:
                return False
            self._reload()
            return True

    def changed_elsewhere(self) -> bool:
        """Whether another process changed the file since the snapshot was read (then
        `refresh` reloads it). Never waits: while the file is in use here, False."""
        version = data_version_nowait(self._conn, self._lock)
        return version is not None and version != self._data_version

    def _snapshot(self) -> _Snapshot:
        if self._refresh_on_read:
            self.refresh()
        return self._snap

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self._reload()

    def _fetch(self, chat_id: str, thread_id: str | None) -> ChannelEntry | None:
        row = self._conn.execute(
            "SELECT * FROM entries WHERE chat_id = ? AND thread_id = ?", (chat_id, thread_id or "")
        ).fetchone()
        return _row_to_entry(row) if row else None

    def _require(self, chat_id: str, thread_id: str | None, live: bool = False) -> ChannelEntry:
        entry = self._fetch(chat_id, thread_id)
        if entry is None:
            raise NotFoundError(f"unknown lane {chat_id}" + (f":{thread_id}" if thread_id else ""))
        if live and entry.archived:
            raise ArchivedError(f"{entry.name!r} is archived")
        return entry

    def list(self, include_archived: bool = True) -> EntryList:
        entries = self._snapshot().entries
        return [e for e in entries if include_archived or not e.archived]

    def get(self, chat_id: str, thread_id: str | None = None) -> ChannelEntry | None:
        return self._snapshot().by_lane.get((chat_id, thread_id or ""))

    def lane_for(self, chat_id: str, thread_id: str | None) -> ChannelEntry:
        """Like ``get`` but raises ``not_found`` (for command handlers)."""
        entry = self.get(chat_id, thread_id)
        if entry is None:
            raise NotFoundError(f"unknown lane {chat_id}" + (f":{thread_id}" if thread_id else ""))
        return entry

    def get_by_conversation_id(self, conversation_id: str) -> ChannelEntry | None:
        return self._snapshot().by_conversation.get(conversation_id)

    def find_by_name(self, name: str) -> ChannelEntry | None:
        """Channel (never a thread) by case-insensitive name; live ones beat archived."""
        found = _named(self._snapshot().entries, name.strip().casefold())
        return found[0] if found else None

    def chat_ids_matching(self, name_or_id: str) -> StrList:
        """Every chat a search ``channel:`` qualifier may mean, archived ones included."""
        snap = self._snapshot()
        ids = [e.chat_id for e in _named(snap.entries, name_or_id.strip().casefold())]
        for candidate in (name_or_id, self._prefix + name_or_id):
            entry = snap.by_lane.get((candidate, ""))
            if entry is not None and entry.chat_id not in ids:
                ids.append(entry.chat_id)
        return ids

    def resolve_target(self, target: str) -> ChannelEntry:
        """Resolve a delivery target without creating anything: ``android:chan_7``,
        ``android:chan_7:t_31``, ``chan_7``, ``default``, ``chan_7:t_31`` or a channel name."""
        target = target.strip()
        entry: ChannelEntry | None = None
        snap = self._snapshot()
        for candidate in (target, self._prefix + target) if target else ():
            entry = snap.by_lane.get((candidate, ""))
            if entry is None and ":" in candidate:
                # Chat ids hold a colon themselves: the thread follows the *last* one.
                chat, thread = candidate.rsplit(":", 1)
                entry = snap.by_lane.get((chat, thread)) if thread else None
            if entry is not None:
                break
        if entry is None and target:
            entry = next(iter(_named(snap.entries, target.casefold())), None)
        if entry is None:
            raise NotFoundError(f"unknown target {target!r}")
        if entry.archived:
            raise ArchivedError(f"target {target!r} is archived")
        return entry

    def _next(self, counter: str, at_least: int = 0) -> int:
        """Monotonic id counter; ``at_least`` retires ids Hermes invented on its own."""
        row = self._conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, max(?, 1)) ON CONFLICT(name) "
            "DO UPDATE SET value = max(value + 1, excluded.value) RETURNING value",
            (counter, at_least),
        ).fetchone()
        return int(row[0])

    def _insert(
        self, chat: str, thread: str | None, name: str, kind: Kind, **flags: Any
    ) -> ChannelEntry:
        # Flags not given fall back to the schema's column defaults.
        now = time.time()
        row = dict(chat_id=chat, thread_id=thread or "", name=name, kind=kind, **flags)
        row.update(conversation_id=secrets.token_hex(16), created=now, updated=now)
        sql = f"INSERT INTO entries ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})"
        self._conn.execute(sql, [*row.values()])
        return self._require(chat, thread)

    def _update(self, entry: ChannelEntry, **fields: Any) -> ChannelEntry:
        changed = {k: v for k, v in fields.items() if getattr(entry, k) != v}
        if not changed:
            return entry  # no-op writes must not bump `updated` (clients reconcile on it)
        sets = "".join(f"{k} = ?, " for k in changed)
        self._conn.execute(
            f"UPDATE entries SET {sets}updated = ? WHERE chat_id = ? AND thread_id = ?",
            (*changed.values(), time.time(), entry.chat_id, entry.thread_id or ""),
        )
        return self._require(entry.chat_id, entry.thread_id)

    def _insert_home(self) -> ChannelEntry:
        # A home id changed in config must not produce a second default.
        has_default = self._conn.execute("SELECT 1 FROM entries WHERE is_default = 1").fetchone()
        home = self.home_chat_id
        return self._insert(home, None, DEFAULT_NAME, "default", is_default=not has_default)

    def ensure_default(self) -> ChannelEntry:
        with self._write():
            return self._fetch(self.home_chat_id, None) or self._insert_home()

    def create_channel(self, name: str) -> ChannelEntry:
        name = validate_name(name)
        with self._write():
            chat_id = f"{self._prefix}chan_{self._next('channel')}"
            return self._insert(chat_id, None, name, "channel")

    def create_thread(
        self,
        parent_chat_id: str,
        name: str,
        *,
        auto: bool = False,
        name_source: NameSource = "user",
    ) -> ChannelEntry:
        name = validate_name(name)
        if name_source not in _NAME_RANK:
            raise BadRequestError(f"bad name_source {name_source!r}")
        with self._write():
            parent = self._require(parent_chat_id, None, live=True)
            if not parent.is_default:
                raise UnsupportedError("threads are only available in the default channel")
            thread_id, chat_id = f"t_{self._next('thread')}", parent.chat_id
            flags = {"parent_chat_id": chat_id, "name_source": name_source, "auto": auto}
            return self._insert(chat_id, thread_id, name, "thread", **flags)

    def get_or_create_lane(self, chat_id: str, thread_id: str | None) -> ChannelEntry:
        """Record a lane Hermes already uses (it is real in state.db, so no policy checks).
        An archived lane comes back as-is: whether to deliver there is the caller's call."""
        if not chat_id:
            raise BadRequestError("chat_id is required")
        with self._write():
            chat = self._fetch(chat_id, None)
            if chat is None and chat_id == self.home_chat_id:
                chat = self._insert_home()
            elif chat is None:
                self._next("channel", _suffix_number(chat_id, self._prefix + "chan_"))
                short = chat_id.removeprefix(self._prefix) or chat_id
                name = short[:MAX_NAME_LEN]
                chat = self._insert(chat_id, None, name, "channel", name_source="derived")
            if not thread_id:
                return chat
            lane = self._fetch(chat_id, thread_id)
            if lane is None:
                self._next("thread", _suffix_number(thread_id, "t_"))
                flags = {"parent_chat_id": chat_id, "archived": chat.archived}
                name = thread_id[:MAX_NAME_LEN]
                lane = self._insert(
                    chat_id, thread_id, name, "thread", name_source="derived", **flags
                )
            return lane

    def rename(
        self, chat_id: str, thread_id: str | None, name: str, source: NameSource
    ) -> tuple[ChannelEntry, bool]:
        """Returns ``(entry, changed)``; unchanged when a higher-precedence name holds."""
        name = validate_name(name)
        if source not in _NAME_RANK:
            raise BadRequestError(f"bad name source {source!r}")
        with self._write():
            entry = self._require(chat_id, thread_id, live=True)
            if _NAME_RANK[source] < _NAME_RANK[entry.name_source]:
                return entry, False
            updated = self._update(entry, name=name, name_source=source)
            return updated, updated is not entry

    def default(self) -> ChannelEntry:
        """The default channel: where threads, auto-threading and the threads toggle live."""
        entry = next((e for e in self._snapshot().entries if e.is_default), None)
        if entry is None:
            raise NotFoundError("there is no default channel yet")
        return entry

    def set_default(self, chat_id: str) -> tuple[ChannelEntry, EntryList]:
        """Make a channel the default, in one transaction. The threads toggle belongs to
        the default channel, so it moves along. Returns ``(new default, changed)``:
        every entry that changed, the old default first, so devices can be told of
        each (empty when it already was the default)."""
        with self._write():
            entry = self._require(chat_id, None, live=True)
            if entry.automation:
                raise UnsupportedError("an automation channel cannot be the default")
            rows = self._conn.execute(
                "SELECT * FROM entries WHERE is_default = 1 AND chat_id != ?", (chat_id,)
            ).fetchall()
            previous = [_row_to_entry(r) for r in rows]
            threads_on = entry.threads_enabled or any(p.threads_enabled for p in previous)
            # The old default loses the flag first: the file allows one default at a time.
            demoted = [self._update(p, is_default=False, threads_enabled=False) for p in previous]
            promoted = self._update(entry, is_default=True, threads_enabled=threads_on)
            return promoted, demoted + ([promoted] if promoted is not entry else [])

    def is_permanent(self, entry: ChannelEntry) -> bool:
        """The default channel and the home channel (the lane of a bare
        ``deliver=android``) are never archived; threads always may be."""
        return entry.kind != "thread" and (entry.is_default or entry.chat_id == self.home_chat_id)

    def delete(self, chat_id: str, thread_id: str | None = None) -> ChannelEntry:
        """Soft delete; a channel takes its threads along. Permanent channels are refused."""
        with self._write():
            entry = self._require(chat_id, thread_id, live=True)
            if entry.kind == "thread":
                return self._update(entry, archived=True)
            if self.is_permanent(entry):
                raise UnsupportedError("the default channel cannot be deleted")
            self._conn.execute(
                "UPDATE entries SET archived = 1, updated = ? WHERE chat_id = ? AND archived = 0",
                (time.time(), chat_id),
            )
            return self._require(chat_id, None)

    def set_automation(self, chat_id: str, on: bool, thread_id: str | None = None) -> ChannelEntry:
        with self._write():
            entry = self._require(chat_id, thread_id, live=True)
            if entry.kind == "thread":
                raise UnsupportedError("threads cannot be automation lanes")
            if entry.is_default or entry.kind == "default":
                raise UnsupportedError("the default channel cannot be an automation channel")
            return self._update(entry, automation=on)

    def set_threads_enabled(self, chat_id: str, on: bool) -> ChannelEntry:
        with self._write():
            entry = self._require(chat_id, None, live=True)
            if not entry.is_default:
                raise UnsupportedError("threads can only be toggled on the default channel")
            return self._update(entry, threads_enabled=on)
