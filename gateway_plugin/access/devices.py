"""The device registry (devices.db): every iris device that said hello, and which are revoked.

A device is known by the ``device_id`` it presents at hello. The registry records its name,
capabilities and push address, when it was first and last seen, and whether it was
revoked. A revoked device is refused at every later hello (close 4403) until the record is
forgotten; the app gets a new device id when it is paired again.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canonical.jsonenc import dumps_ascii
from canonical.model import Json
from gateway_plugin.storage.sqlite_file import open_wal

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    device_id TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    caps TEXT NOT NULL DEFAULT '[]',
    fcm_token TEXT,
    ntfy_topic TEXT,
    last_seen REAL NOT NULL,
    created REAL NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    revoked_at REAL
);
"""
_COLUMNS = "device_id, name, caps, fcm_token, ntfy_topic, last_seen, created, revoked, revoked_at"
_UPSERT = """
INSERT INTO devices (device_id, name, caps, fcm_token, last_seen, created)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT(device_id) DO UPDATE SET
    name = CASE WHEN excluded.name != '' THEN excluded.name ELSE devices.name END,
    caps = excluded.caps,
    fcm_token = COALESCE(excluded.fcm_token, devices.fcm_token),
    last_seen = excluded.last_seen
"""
_SQL_VARS = 900  # below SQLite's default limit of bound parameters per statement


@dataclass(frozen=True)
class Hello:
    """What a hello tells the registry about its device."""

    device_id: str
    name: str = ""
    caps: list[Any] = field(default_factory=list)
    fcm_token: str | None = None


@dataclass(frozen=True)
class Device:
    device_id: str
    name: str
    caps: list[str]
    fcm_token: str | None
    ntfy_topic: str | None
    last_seen: float
    created: float
    revoked: bool
    revoked_at: float | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Device:
        caps = json.loads(row[2]) if row[2] else []
        return cls(
            device_id=row[0],
            name=row[1],
            caps=[str(c) for c in caps] if isinstance(caps, list) else [],
            fcm_token=row[3],
            ntfy_topic=row[4],
            last_seen=float(row[5]),
            created=float(row[6]),
            revoked=bool(row[7]),
            revoked_at=float(row[8]) if row[8] is not None else None,
        )

    def to_wire(self) -> Json:
        """What an operator sees: push addresses are reduced to the backend's name."""
        push = "fcm" if self.fcm_token else ("ntfy" if self.ntfy_topic else None)
        return {
            "device_id": self.device_id,
            "name": self.name,
            "caps": self.caps,
            "push": push,
            "last_seen": self.last_seen,
            "created": self.created,
            "revoked": self.revoked,
            "revoked_at": self.revoked_at,
        }


class DeviceRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_wal(path, _SCHEMA, SCHEMA_VERSION)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _one(self, device_id: str) -> Device | None:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM devices WHERE device_id = ?", (device_id,)
        ).fetchone()
        return Device.from_row(row) if row else None

    def get(self, device_id: str) -> Device | None:
        with self._lock:
            return self._one(device_id)

    def seen(
        self,
        device_id: str,
        *,
        name: str = "",
        caps: list[str] | None = None,
        fcm_token: str | None = None,
        now: float | None = None,
    ) -> Device:
        """Record a hello: create the device or refresh it (a revoked one stays revoked)."""
        return self.seen_many([Hello(device_id, name, caps or [], fcm_token)], now=now)[device_id]

    def seen_many(self, hellos: list[Hello], *, now: float | None = None) -> dict[str, Device]:
        """Record several hellos in one transaction; each device's record after them."""
        self.record_hellos(hellos, now=now)
        ids = list(dict.fromkeys(hello.device_id for hello in hellos))
        with self._lock:
            rows = self._rows_of(ids, f"SELECT {_COLUMNS} FROM devices WHERE device_id IN")
        return {str(row[0]): Device.from_row(row) for row in rows}

    def record_hellos(self, hellos: list[Hello], *, now: float | None = None) -> set[str]:
        """Record several hellos in one transaction (a revoked device stays revoked); the
        ids among them that are revoked. What a connection storm costs per hello: one
        upsert, no record read back."""
        if not hellos:
            return set()
        at = time.time() if now is None else now
        params = [
            (
                hello.device_id,
                hello.name[:128],
                dumps_ascii([str(c) for c in hello.caps][:64]),
                hello.fcm_token,
                at,
                at,
            )
            for hello in hellos
        ]
        ids = list(dict.fromkeys(hello.device_id for hello in hellos))
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.executemany(_UPSERT, params)  # in order: a later hello wins
                revoked = self._rows_of(
                    ids, "SELECT device_id FROM devices WHERE revoked != 0 AND device_id IN"
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return {str(row[0]) for row in revoked}

    def _rows_of(self, ids: list[str], query: str) -> list[tuple[Any, ...]]:
        """``query`` (ending in ``IN``) for these ids, a chunk of bound parameters at a time."""
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(ids), _SQL_VARS):
            chunk = ids[start : start + _SQL_VARS]
            marks = ",".join("?" * len(chunk))
            rows += self._db.execute(f"{query} ({marks})", chunk).fetchall()
        return rows

    def set_push(
        self, device_id: str, *, fcm_token: str | None = None, ntfy_topic: str | None = None
    ) -> bool:
        """Update a device's push address; False if the device is unknown."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE devices SET fcm_token = COALESCE(?, fcm_token), "
                "ntfy_topic = COALESCE(?, ntfy_topic) WHERE device_id = ?",
                (fcm_token, ntfy_topic, device_id),
            )
        return cur.rowcount > 0

    def drop_fcm_tokens(self, tokens: set[str]) -> list[str]:
        """Clear push tokens FCM called dead; the ids of the devices that held them.

        Only the dead token itself is cleared: a device that registered a new one since
        keeps it, and one that registers again later is pushed again."""
        if not tokens:
            return []
        marks = ",".join("?" * len(tokens))
        with self._lock:
            rows = self._db.execute(
                f"UPDATE devices SET fcm_token = NULL WHERE fcm_token IN ({marks}) "
                "RETURNING device_id",
                tuple(tokens),
            ).fetchall()
        return sorted(str(row[0]) for row in rows)

    def list(self, *, include_revoked: bool = True) -> list[Device]:
        query = f"SELECT {_COLUMNS} FROM devices"
        if not include_revoked:
            query += " WHERE revoked = 0"
        with self._lock:
            rows = self._db.execute(query + " ORDER BY last_seen DESC, device_id").fetchall()
        return [Device.from_row(row) for row in rows]

    def revoke(self, device_id: str, *, now: float | None = None) -> Device | None:
        """Mark a device revoked (idempotent); None if it was never seen."""
        at = time.time() if now is None else now
        with self._lock:
            self._db.execute(
                "UPDATE devices SET revoked = 1, revoked_at = COALESCE(revoked_at, ?) "
                "WHERE device_id = ?",
                (at, device_id),
            )
            return self._one(device_id)

    def is_revoked(self, device_id: str) -> bool:
        device = self.get(device_id)
        return device is not None and device.revoked

    def forget(self, device_id: str) -> bool:
        """Delete a device's record (a revoked id may then connect again)."""
        with self._lock:
            cur = self._db.execute("DELETE FROM devices WHERE device_id = ?", (device_id,))
        return cur.rowcount > 0

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute(
                "SELECT revoked, COUNT(*) FROM devices GROUP BY revoked"
            ).fetchall()
        found = {bool(r[0]): int(r[1]) for r in rows}
        return {"active": found.get(False, 0), "revoked": found.get(True, 0)}


__all__ = ["Device", "DeviceRegistry", "Hello"]
