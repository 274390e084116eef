"""The canonical model's constants: what crosses the bus between edges and the plugin
(its typed shapes: ``canonical.model``).

Commands (edge → plugin) and events (plugin → edges) are JSON objects. Events are
device-visible and sequenced by the plugin: every one carries a monotonic ``cursor``
assigned by the outbox before it is published. Direct replies answer one connection.

A *lane* is ``(chat_id, thread_id)``: a channel's flat lane (thread_id None) or a
thread. The pheby dialect exposes each lane as a conversation (``conversation_id``).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

MAX_TEXT_CHARS = 64_000
MAX_FRAME_BYTES = 2 * 1024 * 1024
# Cursors and offsets are SQLite integers (signed 64-bit): a larger one is a bad request.
MAX_CURSOR = 2**63 - 1
MAX_HISTORY = 500
# Arrays and objects in a frame, nested: far above any frame's shape, far below the
# recursion limit of json and of whatever handles the frame next.
MAX_JSON_DEPTH = 64
HELLO_TIMEOUT_S = 10.0
LOCKOUT_FAILURES = 5
LOCKOUT_WINDOW_S = 60.0

# Events whose loss a client would notice: never dropped under back-pressure.
COALESCABLE_EVENTS = frozenset({"message.delta", "typing"})

# Canonical event types (plugin → devices, sequenced).
EV_RUN_ACCEPTED = "run.accepted"
EV_MESSAGE_START = "message.start"
EV_MESSAGE_DELTA = "message.delta"
EV_MESSAGE_COMPLETE = "message.complete"
EV_RUN_FINISHED = "run.finished"
EV_USER_MESSAGE = "user.message"
EV_TOOL = "tool.event"
EV_TYPING = "typing"
EV_CHANNEL_CREATED = "channel.created"
EV_CHANNEL_RENAMED = "channel.renamed"
EV_CHANNEL_DELETED = "channel.deleted"

# Direct-reply envelope kinds (plugin → one connection).
REPLY = "reply"
REPLAY = "replay"
CLOSE = "close"

PHEBY_ERROR_CODES = frozenset(
    {
        "unauthorized",
        "auth_timeout",
        "version_mismatch",
        "bad_request",
        "invalid_json",
        "unknown_type",
        "not_found",
        "conversation_not_found",
        "approval_not_found",
        "clarify_not_found",
        "too_large",
        "rate_limited",
        "run_active",
        "internal_error",
        "not_implemented",
        "unavailable",
    }
)


# The date and the hour, for the hour last formatted: a timestamp costs a few integer
# operations and one small f-string (half of datetime.isoformat's), whether it comes from
# a stream of events (one second after another) or a transcript (rows minutes apart).
_hour_text: tuple[int, str] = (-1, "")
# iso_ms's range: from the epoch to the end of year 9999, as datetime prints it.
_ISO_END = 253_402_300_800


def iso_ms(ts: float) -> str:
    """ISO-8601 UTC timestamp of unix time ``ts`` (>= 0) in milliseconds, exactly as
    ``datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")`` prints it."""
    global _hour_text
    second = int(ts)
    micro = round((ts - second) * 1e6)  # datetime's own rounding: to µs, half to even
    if micro >= 1_000_000:
        second += 1
        micro -= 1_000_000
    within = second % 3600
    hour = second - within
    cached = _hour_text  # one read: another thread may replace it meanwhile
    if cached[0] != hour:
        cached = _hour_text = (hour, time.strftime("%Y-%m-%dT%H:", time.gmtime(hour)))
    return f"{cached[1]}{within // 60:02d}:{within % 60:02d}.{micro // 1000:03d}+00:00"


def now_iso() -> str:
    """ISO-8601 UTC timestamp, as both dialects print it."""
    return iso_ms(time.time())


def iso_from_unix(ts: float | None) -> str | None:
    """`iso_ms` of a stored unix time (None stays None; outside iso_ms's range, datetime
    prints it, or refuses it, itself)."""
    if ts is None:
        return None
    if 0 <= ts < _ISO_END:
        return iso_ms(ts)
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def new_id(nbytes: int = 16) -> str:
    """Opaque random hex id (32 hex chars by default, as pheby ids are)."""
    return os.urandom(nbytes).hex()


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def error_body(code: str, message: str, request_id: Any = None) -> dict[str, Any]:
    """A canonical error reply; dialect codecs render it in their own shape."""
    body: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if request_id is not None:
        body["request_id"] = request_id
    return body
