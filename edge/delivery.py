"""Exactly-once delivery across the replay seam (pure: no I/O, no clock).

A device tells us the last cursor it has. While its replay is in flight, live events are
held; when the replay arrives, replayed events newer than the device's cursor go first, then
the held live events that are newer still. Anything at or below the last delivered cursor is
a duplicate and is dropped. Unsequenced frames (cursor 0: typing, control) pass through.
"""

from __future__ import annotations

from typing import Generic, TypeVar

P = TypeVar("P")


class ReplayGate(Generic[P]):
    __slots__ = ("_held", "last_cursor", "replaying")

    def __init__(self, last_cursor: int = 0) -> None:
        self.last_cursor = last_cursor
        self.replaying = False
        self._held: list[tuple[int, P]] = []

    def live(self, cursor: int, payload: P) -> list[P]:
        """What to deliver now for a live event."""
        if self.replaying:
            self._held.append((cursor, payload))
            return []
        return self._admit(cursor, payload)

    def _admit(self, cursor: int, payload: P) -> list[P]:
        return [payload] if self.admit(cursor) else []

    def admit(self, cursor: int) -> bool:
        """Outside a replay: whether an event with this cursor is new (and now delivered)."""
        if cursor:
            if cursor <= self.last_cursor:
                return False
            self.last_cursor = cursor
        return True

    def begin_replay(self) -> None:
        self.replaying = True

    @property
    def held(self) -> int:
        """Live events held back for the replay."""
        return len(self._held)

    def replay_chunk(self, replayed: list[tuple[int, P]]) -> list[P]:
        """Part of a long replay (more chunks follow): deliver, keep holding live events."""
        out: list[P] = []
        for cursor, payload in replayed:
            out.extend(self._admit(cursor, payload))
        return out

    def finish_replay(self, replayed: list[tuple[int, P]]) -> tuple[list[P], bool]:
        """What to deliver once the replay arrived: replayed, then held, each once, in order.

        Events sequenced after the replay was read are all published, so the held ones
        must continue the replay without a hole. A hole means the doorbell lost an event:
        delivery stops before it, the rest stays held, and the second value is True — the
        caller must resync from `last_cursor`.
        """
        out = self.replay_chunk(replayed)
        held, self._held = self._held, []
        for index, (cursor, payload) in enumerate(held):
            if cursor and cursor > self.last_cursor + 1:
                self._held = held[index:]
                return out, True
            out.extend(self._admit(cursor, payload))
        self.replaying = False
        return out, False
