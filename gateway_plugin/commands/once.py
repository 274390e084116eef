"""Effectively-once device commands: the pure rules (the controller does the I/O).

The command stream is at-least-once: an entry whose XACK failed stays pending and is
delivered again (reclaimed at start, or read again after Redis restored an older snapshot).
The plugin records every entry it carried out, with the replies it sent, in outbox.db;
an entry found there is not carried out again, its replies are sent again instead.

Why outbox.db and not Redis: the effects a command has are the plugin's SQLite state (every
change a device can see is an event sequenced in outbox.db, sends also leave their
idempotency record there), which survives what Redis may lose or roll back. A record kept
in Redis could vanish with a Redis restart while the effect stays, and the command would run
again; in outbox.db the record lives and is backed up with what it protects.

Bounded: records are pruned by age. So that a pruned record can never let an entry run
twice, an entry older than the command window (the outbox retention) is never carried out,
and records are kept that window plus a margin for the clocks of Redis (which dates entry
ids) and the plugin (which dates records) disagreeing.
"""

from __future__ import annotations

import json

from canonical.jsonenc import dumps
from canonical.model import Json
from canonical.protocol import CLOSE, REPLY

Reply = tuple[str, Json]  # (kind, body) of a direct reply

CLOCK_MARGIN_S = 3600.0
# Replays are not kept: they are rebuilt from the outbox from the device's cursor, and a
# page of events is too big to store per command. Nor are large replies: what a change
# answers (a result, an ack, an error) is small; pages of history, lists and search hits
# are reads a device asks for again, and keeping them for days would grow outbox.db.
KEPT_KINDS = (REPLY, CLOSE)
KEPT_REPLIES_MAX_BYTES = 4096
# Answers to reads (by the body's type): short ones too, or every list, history page and
# search a device makes would leave up to 4 KiB in outbox.db for the command window.
READ_REPLIES = frozenset(
    {
        "attachment.found",
        "channel.list",
        "history",
        "model.current",
        "models.snapshot",
        "reasoning.snapshot",
        "search.results",
        "yolo.snapshot",
    }
)


def entry_time(entry_id: str) -> float | None:
    """When the stream entry was added (unix seconds), from its `<ms>-<seq>` id."""
    millis, _, seq = entry_id.partition("-")
    if not millis.isdigit() or not seq.isdigit():
        return None
    return int(millis) / 1000


def outlived_window(entry_id: str, now: float, window_s: float) -> bool:
    """True for an entry older than the command window: its record may be pruned, so it
    must not run (it might have run already)."""
    added = entry_time(entry_id)
    return added is not None and added < now - window_s


def record_cutoff(now: float, window_s: float) -> float:
    """Records made before this (unix seconds) may go: no entry they protect can run."""
    return now - window_s - CLOCK_MARGIN_S


def replies_to_keep(command: Json, replies: list[Reply]) -> str | None:
    """The replies worth sending again on a redelivery, encoded; None when there are none
    (or they are too large, or an admin command's: admin replies stay out of outbox.db)."""
    if str(command.get("cmd", "")).startswith("admin."):
        return None
    kept = [
        [kind, body]
        for kind, body in replies
        if kind in KEPT_KINDS and body.get("type") not in READ_REPLIES
    ]
    if not kept:
        return None
    encoded = dumps(kept)
    return encoded if len(encoded) <= KEPT_REPLIES_MAX_BYTES else None


def kept_replies(encoded: str | None) -> list[Reply]:
    if not encoded:
        return []
    return [(str(kind), body) for kind, body in json.loads(encoded)]
