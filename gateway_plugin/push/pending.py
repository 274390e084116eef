"""Queued pushes, remembered until their job has an outcome, in both modes.

A push waiting out ``ANDROID_PUSH_DELAY_S`` must outlive a restart of whoever holds it.
This file (``pending_pushes.db`` beside ``outbox.db``) remembers every push from the
moment it is queued until its job reaches an outcome of its own (sent, skipped as read,
failed). Embedded, the in-process runner holds the delay on an asyncio timer and the next
process queues what is left, due at the same instant. Scaled, the push is an arq deferred
job in Redis, and the plugin checks its records against Redis (``JobQueue.reconcile``): a
job with a result is done, one Redis lost (a restart without persistence) is queued again.
A push is at least once: one sent just before a crash may be sent again, and the job's
ack check before each send keeps a read event from being pushed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from canonical.model import Json
from gateway_plugin.storage.sqlite_file import open_wal

SCHEMA = """
CREATE TABLE IF NOT EXISTS pending_push (
    job_id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    not_before REAL NOT NULL
);
"""


@dataclass(frozen=True)
class PendingPush:
    job_id: str
    body: Json
    not_before: float  # epoch seconds: when the push may go out


class PendingPushes:
    def __init__(self, path: Path) -> None:
        self._db = open_wal(path, SCHEMA)
        self._lock = threading.Lock()

    def add(self, job_id: str, body: Json, not_before: float) -> None:
        """Remember a queued push; one already remembered keeps its first due time."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO pending_push (job_id, body, not_before) VALUES (?, ?, ?)",
                (job_id, json.dumps(body), not_before),
            )

    def remove(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM pending_push WHERE job_id = ?", (job_id,))

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pending_push").fetchone()[0])

    def clear(self) -> int:
        with self._lock:
            return self._db.execute("DELETE FROM pending_push").rowcount

    def all(self) -> list[PendingPush]:
        """Every remembered push, soonest due first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, body, not_before FROM pending_push ORDER BY not_before, job_id"
            ).fetchall()
        return [
            PendingPush(job_id, json.loads(body), not_before) for job_id, body, not_before in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def remaining_delay(not_before: float, now: float) -> float:
    """Seconds until a push remembered as due at `not_before` may go out (0: now)."""
    return max(0.0, not_before - now)
