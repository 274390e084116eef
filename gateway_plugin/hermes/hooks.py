"""Hermes' plugin hooks: structured tool events and approval outcomes for devices.

Hermes calls them on agent worker threads with a session, not a lane or an adapter: the
lane comes from the session's context variables, and each event is handed to the
controller's loop of every live adapter of this process (`ADAPTERS`).
"""

from __future__ import annotations

from typing import Any

from gateway.session_context import get_session_env

from canonical.model import Lane
from gateway_plugin.hermes.bridge import PLATFORM

# Live adapters of this process, for the plugin hooks (which Hermes calls without one).
ADAPTERS: list[Any] = []


def _hook_lane() -> Lane | None:
    if get_session_env("HERMES_SESSION_PLATFORM") != PLATFORM:
        return None
    chat_id = get_session_env("HERMES_SESSION_CHAT_ID")
    if not chat_id:
        return None
    return (chat_id, get_session_env("HERMES_SESSION_THREAD_ID") or None)


def _hand_off(method: str, *args: Any) -> None:
    """Call a decision-desk method on the controller's loop without blocking the agent thread."""
    for adapter in list(ADAPTERS):
        controller, loop = adapter.controller, adapter.loop
        if controller is None or loop is None or loop.is_closed():
            continue
        loop.call_soon_threadsafe(getattr(controller.desk, method), *args)


# Tool calls refused because their run was cancelled: Hermes reports them "blocked".
_REFUSED: set[str] = set()
CANCELLED_TOOL_MESSAGE = "Not run: the user cancelled this turn."


def _cancelled(lane: Lane) -> bool:
    return any(
        adapter.controller is not None and lane in adapter.controller.cancels.cancelled
        for adapter in list(ADAPTERS)
    )


def _on_pre_tool_call(**kwargs: Any) -> dict[str, str] | None:
    lane = _hook_lane()
    name = str(kwargs.get("tool_name") or "")
    if lane is None or not name:
        return None
    call_id = str(kwargs.get("tool_call_id") or f"{name}-{kwargs.get('turn_id')}")
    if _cancelled(lane):
        # The turn's interrupt may reach the agent only after the model asked for a tool
        # (Hermes hands it over within 0.2 s): a cancelled run starts no tool at all.
        _REFUSED.add(call_id)
        return {"action": "block", "message": CANCELLED_TOOL_MESSAGE}
    _hand_off("on_tool_start", lane, call_id, name, kwargs.get("args"))
    return None


def _on_post_tool_call(**kwargs: Any) -> None:
    lane = _hook_lane()
    name = str(kwargs.get("tool_name") or "")
    if lane is None or not name:
        return
    call_id = str(kwargs.get("tool_call_id") or f"{name}-{kwargs.get('turn_id')}")
    if call_id in _REFUSED:
        _REFUSED.discard(call_id)
        return
    status = str(kwargs.get("status") or "ok")
    interrupted = "interrupt" in str(kwargs.get("error_type") or "").lower()
    outcome = (
        "completed"
        if status in ("ok", "success", "completed")
        else ("cancelled" if interrupted or status == "cancelled" else "failed")
    )
    error = kwargs.get("error_message") or kwargs.get("error_type")
    _hand_off("on_tool_end", lane, call_id, name, outcome, kwargs.get("duration_ms"), error)


def _on_post_approval_response(**kwargs: Any) -> None:
    if kwargs.get("surface") not in (None, "gateway"):
        return
    session_key = str(kwargs.get("session_key") or "")
    if session_key:
        _hand_off("on_approval_outcome", session_key, str(kwargs.get("choice") or ""))


def register_hooks(register_hook: Any) -> None:
    register_hook("pre_tool_call", _on_pre_tool_call)
    register_hook("post_tool_call", _on_post_tool_call)
    register_hook("post_approval_response", _on_post_approval_response)


__all__ = ["ADAPTERS", "CANCELLED_TOOL_MESSAGE", "register_hooks"]
