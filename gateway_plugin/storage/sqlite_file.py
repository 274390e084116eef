"""How the plugin opens its SQLite files (outbox.db, devices.db, attachments.db)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

# How long a statement waits for another connection's write lock (a `hermes cron run`
# process appending a delivery) before SQLite reports the file locked; storage jobs then
# retry a few times (locked.py).
BUSY_TIMEOUT_S = 5.0


def open_wal(
    path: Path, schema: str, version: int | None = None, *, busy_timeout_s: float = BUSY_TIMEOUT_S
) -> sqlite3.Connection:
    """`path` (its directory made if missing) in WAL mode with `schema` applied.

    One connection shared by the owner's threads (callers serialise with their own lock);
    autocommit, so callers write their own BEGIN IMMEDIATE … COMMIT. synchronous=NORMAL in
    WAL mode survives a process crash (kill -9); only power loss can drop the last
    transactions, and the plugin's promise is about process faults. Another process holding
    the write lock makes a statement wait up to `busy_timeout_s`, then fail ("database is
    locked"): on a storage thread, never on the event loop."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(
        str(path), timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
    )
    db.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    if version is not None:
        db.execute(f"PRAGMA user_version={int(version)}")
    return db


def data_version(db: sqlite3.Connection) -> int:
    """SQLite's ``PRAGMA data_version``: it changes only when another connection commits."""
    return int(db.execute("PRAGMA data_version").fetchone()[0])


def data_version_nowait(db: sqlite3.Connection, lock: threading.Lock) -> int | None:
    """`data_version` under the owner's `lock`, or None at once while this process is
    using the file (the watch thread asks again later; `storage/watch.py`)."""
    if not lock.acquire(blocking=False):
        return None
    try:
        return data_version(db)
    finally:
        lock.release()


__all__ = ["BUSY_TIMEOUT_S", "data_version", "data_version_nowait", "open_wal"]
