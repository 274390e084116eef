"""Decisions Hermes waits for (approvals, clarifications, pickers) and tool activity.

Controller-side state only (no Hermes import): what is pending per lane, so a second
device sees the same prompt, a reconnecting device gets it in its snapshot, and the
resolution is broadcast once. Hermes itself is reached through the bridge.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from canonical.model import Json, Lane
from canonical.protocol import new_id, now_iso
from gateway_plugin.commands.redact import redact, truncate_error

APPROVAL_CHOICES = ["once", "session", "always", "deny"]

# Hermes stops waiting for approvals and clarifications itself (and says so), but a
# slash command's picker is a callback it keeps for ever. Those expire here, after as long
# as Hermes keeps its own slash-command confirmations (tools/slash_confirm, 300 s).
PICKER_TTL_S: Final = 300.0
EXPIRING_KINDS: Final = frozenset({"model", "choice", "confirm"})


@dataclass
class Pending:
    """One decision Hermes is waiting for."""

    kind: str  # approval | clarify | model | choice | confirm
    picker_id: str
    lane: Lane
    session_key: str
    request: Json
    created: float = field(default_factory=time.time)
    callback: Any = None  # Hermes' on_selected for model/choice pickers
    confirm_id: str | None = None
    expires_at: float | None = None  # set by Interactive.add for EXPIRING_KINDS


@dataclass
class ToolState:
    tool_call_id: str
    tool_name: str
    status: str
    started: float
    event: Json


class Interactive:
    def __init__(
        self, clock: Callable[[], float] = time.time, picker_ttl_s: float = PICKER_TTL_S
    ) -> None:
        self.pending: dict[str, Pending] = {}
        self.tools: dict[Lane, dict[str, ToolState]] = {}
        self.clock = clock
        self.picker_ttl_s = picker_ttl_s

    # -- pending decisions
    def add(self, item: Pending) -> None:
        if item.kind in EXPIRING_KINDS:
            item.expires_at = self.clock() + self.picker_ttl_s
        self.pending[item.picker_id] = item

    def is_expired(self, item: Pending) -> bool:
        return item.expires_at is not None and self.clock() >= item.expires_at

    def take_expired(self) -> list[Pending]:
        """Remove and return every picker past its expiry (never an approval or a
        clarification: Hermes reports when it stops waiting for those)."""
        expired = [p for p in self.pending.values() if self.is_expired(p)]
        for item in expired:
            del self.pending[item.picker_id]
        return expired

    def get(self, picker_id: str, kind: str | None = None) -> Pending | None:
        item = self.pending.get(picker_id)
        if item is None or (kind is not None and item.kind != kind):
            return None
        return item

    def pop(self, picker_id: str) -> Pending | None:
        return self.pending.pop(picker_id, None)

    def for_lane(self, lane: Lane, kind: str | None = None) -> list[Pending]:
        """What is still pending in a lane: an expired picker is not offered again."""
        return [
            p
            for p in self.pending.values()
            if p.lane == lane and (kind is None or p.kind == kind) and not self.is_expired(p)
        ]

    def oldest_for_session(self, session_key: str, kind: str) -> Pending | None:
        items = [
            p for p in self.pending.values() if p.session_key == session_key and p.kind == kind
        ]
        return min(items, key=lambda p: p.created) if items else None

    # -- tools
    def tool_started(
        self, lane: Lane, base: Json, tool_call_id: str, tool_name: str, args: Any
    ) -> Json:
        event = {
            **base,
            "type": "tool.event",
            "tool_call_id": tool_call_id,
            "tool_name": tool_name,
            "status": "running",
            "args_redacted": redact(args if isinstance(args, dict) else {"args": args}),
            "ts": now_iso(),
        }
        self.tools.setdefault(lane, {})[tool_call_id] = ToolState(
            tool_call_id, tool_name, "running", time.monotonic(), event
        )
        return event

    def tool_finished(
        self,
        lane: Lane,
        base: Json,
        tool_call_id: str,
        tool_name: str,
        status: str,
        duration_ms: Any,
        error: Any,
    ) -> Json:
        state = self.tools.setdefault(lane, {}).get(tool_call_id)
        if duration_ms is None and state is not None:
            duration_ms = int((time.monotonic() - state.started) * 1000)
        event: Json = {
            **base,
            "type": "tool.event",
            "tool_call_id": tool_call_id,
            "tool_name": tool_name,
            "status": status,
            "duration_ms": int(duration_ms) if isinstance(duration_ms, (int, float)) else None,
            "ts": now_iso(),
        }
        if status == "failed":
            event["error"] = truncate_error(error) or "the tool failed"
        self.tools[lane][tool_call_id] = ToolState(
            tool_call_id, tool_name, status, state.started if state else time.monotonic(), event
        )
        return event

    def tool_states(self, lane: Lane) -> list[Json]:
        return [state.event for state in self.tools.get(lane, {}).values()]

    def running_tools(self, lane: Lane) -> list[ToolState]:
        return [s for s in self.tools.get(lane, {}).values() if s.status == "running"]

    def clear_tools(self, lane: Lane) -> None:
        self.tools.pop(lane, None)


def approval_request(item: Pending, base: Json) -> Json:
    return {
        **base,
        "type": "approval.request",
        "approval_id": item.picker_id,
        "picker_id": item.picker_id,
        **item.request,
        "ts": now_iso(),
    }


def clarify_request(item: Pending, base: Json) -> Json:
    return {
        **base,
        "type": "clarify.request",
        "clarify_id": item.picker_id,
        "picker_id": item.picker_id,
        **item.request,
        "ts": now_iso(),
    }


def resolved_event(
    item: Pending,
    base: Json,
    *,
    status: str,
    choice: Any = None,
    request_id: Any = None,
    accepted: bool = True,
) -> Json:
    """The one broadcast that closes a prompt on every device."""
    kind = {"approval": "approval.resolved", "clarify": "clarify.resolved"}.get(
        item.kind, "picker.resolved"
    )
    event: Json = {
        **base,
        "type": kind,
        "picker_id": item.picker_id,
        "picker_kind": item.kind,
        "accepted": accepted,
        "status": status,
        "ts": now_iso(),
    }
    if item.kind == "approval":
        event["approval_id"] = item.picker_id
        event["choice"] = choice
    elif item.kind == "clarify":
        event["clarify_id"] = item.picker_id
    else:
        event["value"] = choice
    if request_id is not None:
        event["request_id"] = request_id
    return event


def new_picker_id() -> str:
    return new_id(6)
