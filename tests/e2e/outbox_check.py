"""Checking what a device received against the outbox: none lost, none duplicated, in order."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from canonical.model import Json


def outbox_events(home: Path) -> list[Json]:
    db = sqlite3.connect(f"file:{home / 'android' / 'outbox.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT body FROM events ORDER BY cursor").fetchall()
    finally:
        db.close()
    return [json.loads(row[0]) for row in rows]


@dataclass
class Delivery:
    scenario: str
    expected: int
    received: int
    lost: int
    duplicated: int
    out_of_order: int

    def line(self) -> str:
        return (
            f"FAULT {self.scenario}: expected={self.expected} received={self.received} "
            f"lost={self.lost} duplicated={self.duplicated} out_of_order={self.out_of_order}"
        )


def check_delivery(scenario: str, frames: list[Json], home: Path, after: int) -> Delivery:
    """Every outbox event after `after` reached the device once, in cursor order.

    A device may also have seen deltas the outbox later dropped (superseded by a newer
    delta or by the complete message): those are fine, but never twice or out of order.
    """
    received = [
        f["cursor"] for f in frames if isinstance(f.get("cursor"), int) and f["cursor"] > after
    ]
    expected = [e["cursor"] for e in outbox_events(home) if e["cursor"] > after]
    got = set(received)
    result = Delivery(
        scenario,
        expected=len(expected),
        received=len([c for c in expected if c in got]),
        lost=len([c for c in expected if c not in got]),
        duplicated=len(received) - len(got),
        out_of_order=sum(1 for a, b in zip(received, received[1:], strict=False) if b <= a),
    )
    print(result.line())
    return result
