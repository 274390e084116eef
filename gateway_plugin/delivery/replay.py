"""The outbox reads of a replay (a hello's, a sync's), each run as one job on the
outbox's storage thread (`Sequencer.run`), never on the loop."""

from __future__ import annotations

from canonical.model import Json
from gateway_plugin.delivery.outbox import Outbox

REPLAY_CHUNK = 500


def replay_body(outbox: Outbox, cursor: int, before: list[Json], head: int | None = None) -> Json:
    """Events after ``cursor`` (a chunk), and the head: a device whose cursor is past it
    starts again from there."""
    events, _ = outbox.since(cursor, REPLAY_CHUNK)
    return {
        "before": before,
        "events": events,
        "more": len(events) == REPLAY_CHUNK,
        "head": outbox.head() if head is None else head,
    }


def sync_reads(outbox: Outbox, cursor: int) -> tuple[bool, Json]:
    """A sync's reads: whether the cursor is past a trim, and its first chunk."""
    return cursor < outbox.trimmed_upto(), replay_body(outbox, cursor, [])


def hello_reads(
    outbox: Outbox, acks: list[tuple[str, int]], cursors: list[int]
) -> tuple[dict[str, int], int, int, dict[int, Json]]:
    """A batch of hellos' outbox work in one job: their devices' acks (stored), the head,
    where the outbox was trimmed up to, and the first replay chunk from each cursor."""
    stored = outbox.ack_many(acks) if acks else {}
    head = outbox.head()
    bodies = {cursor: replay_body(outbox, cursor, [], head) for cursor in set(cursors)}
    return stored, head, outbox.trimmed_upto(), bodies


__all__ = ["REPLAY_CHUNK", "hello_reads", "replay_body", "sync_reads"]
