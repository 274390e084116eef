"""Wrappers of the Hermes functions and gateway-runner internals the plugin calls.

Approvals, clarify, slash-confirm, YOLO, session keys, model and reasoning selection,
start-up resume, titles, cron jobs: each behind a plain function with a stable signature.
The runner internals among them are listed in `contract`; a feature whose internals this
Hermes lacks answers `unavailable` (or does nothing) instead of failing half-way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from canonical.model import Lane
from gateway_plugin.hermes import contract
from gateway_plugin.hermes.bridge import PLATFORM, MessageEvent

log = logging.getLogger("hdg.plugin")


def resolve_approval(session_key: str, choice: str, reason: str | None) -> int:
    from tools.approval import resolve_gateway_approval

    return int(resolve_gateway_approval(session_key, choice, reason=reason))


def resolve_clarify(clarify_id: str, response: str) -> bool:
    from tools.clarify_gateway import resolve_gateway_clarify

    return bool(resolve_gateway_clarify(clarify_id, response))


async def resolve_confirm(session_key: str, confirm_id: str, choice: str) -> str | None:
    from tools import slash_confirm

    reply = await slash_confirm.resolve(session_key, confirm_id, choice)
    return None if reply is None else str(reply)


def set_yolo(session_key: str, enabled: bool) -> None:
    from tools.approval import disable_session_yolo, enable_session_yolo

    (enable_session_yolo if enabled else disable_session_yolo)(session_key)


def yolo_enabled(session_key: str) -> bool:
    from tools.approval import is_session_yolo_enabled

    return bool(is_session_yolo_enabled(session_key))


def session_key_for(runner: Any, source: Any) -> str:
    return str(runner._session_key_for_source(source))


def agent_running(runner: Any, session_key: str) -> bool:
    """Whether the session's turn has its agent (not only Hermes' placeholder for it)."""
    if not contract.enabled(contract.HARD_STOP):
        return False
    from gateway.run import _AGENT_PENDING_SENTINEL

    agent = (getattr(runner, "_running_agents", None) or {}).get(session_key)
    return agent is not None and agent is not _AGENT_PENDING_SENTINEL


# The mark Hermes' start-up sets after an unclean exit on every recently active session
# (SessionStore.suspend_recently_active). Its clean shutdown marks only the turns it
# interrupted ("restart_timeout", "shutdown_timeout"): those it may resume.
_CRASH_RESUME_REASON = "restart_interrupted"


def keep_resumes_of(session_store: Any, unfinished: set[Lane]) -> int:
    """Clear the resume mark Hermes sets after a crash on every android session whose
    lane has no run the plugin knows was unfinished; returns how many. After a crash
    Hermes marks every session active in its last two minutes (``suspend_recently_active``),
    finished ones too, and its start-up restore would answer each again. The marks its
    clean shutdown sets stay. Blocking (it rewrites Hermes' sessions.json): run it in a
    thread, before connect() returns."""
    if session_store is None or not contract.enabled(contract.RESUME_NARROWING):
        return 0
    cleared = 0
    with session_store._lock:
        session_store._ensure_loaded_locked()
        for entry in session_store._entries.values():
            origin = entry.origin
            if (
                not entry.resume_pending
                or entry.resume_reason != _CRASH_RESUME_REASON
                or origin is None
                or getattr(origin.platform, "value", origin.platform) != PLATFORM
                or (str(origin.chat_id), origin.thread_id or None) in unfinished
            ):
                continue
            entry.resume_pending = False
            entry.resume_reason = None
            entry.last_resume_marked_at = None
            cleared += 1
        if cleared:
            session_store._save()
    return cleared


def model_state(runner: Any, session_key: str) -> tuple[str, str, str]:
    """(model, provider, scope) in effect for a session."""
    contract.require(contract.PREFERENCES)
    override = (getattr(runner, "_session_model_overrides", {}) or {}).get(session_key)
    if override and override.get("model"):
        return str(override["model"]), str(override.get("provider") or ""), "conversation"
    from hermes_cli.config import load_config

    model_cfg = (load_config() or {}).get("model") or {}
    if isinstance(model_cfg, str):
        return model_cfg, "", "global"
    return (
        str(model_cfg.get("default") or model_cfg.get("model") or ""),
        str(model_cfg.get("provider") or ""),
        "global",
    )


def reasoning_state(runner: Any, source: Any, session_key: str) -> tuple[str | None, bool, str]:
    """(effort or None for the provider default, enabled, scope) for a session."""
    contract.require(contract.PREFERENCES)
    model = str(
        ((getattr(runner, "_session_model_overrides", {}) or {}).get(session_key) or {}).get(
            "model"
        )
        or ""
    )
    config = runner._resolve_session_reasoning_config(
        source=source, session_key=session_key, model=model
    )
    scope = (
        "conversation"
        if session_key in (getattr(runner, "_session_reasoning_overrides", {}) or {})
        else "global"
    )
    if config is None:
        return None, True, scope
    if config.get("enabled") is False:
        return "none", False, scope
    return str(config.get("effort") or "") or None, True, scope


# What Hermes' /model handler asks list_picker_providers for (gateway/slash_commands.py).
PICKER_MAX_MODELS = 50


def probe_current_endpoint(providers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hermes' picker rows with the active bare custom endpoint's own models.

    For ``model.provider: custom`` + ``model.base_url`` (no named provider), Hermes'
    gateway picker offers only the configured model, though switching to any model the
    endpoint serves works; its CLI, TUI and dashboard pickers ask the endpoint
    (``list_authenticated_providers(probe_current_custom_provider=True)``: Hermes'
    ``fetch_api_models`` on its base URL). The same here, so a device is offered what
    Hermes can switch to. Other rows, and an endpoint that does not answer, stay as
    Hermes built them. Blocking (HTTP, 5 s at most): call it in a thread.
    """
    from hermes_cli.models import fetch_api_models

    out: list[dict[str, Any]] = []
    for row in providers:
        if (
            isinstance(row, dict)
            and row.get("is_current")
            and row.get("source") == "model-config"
            and row.get("api_url")
        ):
            live = fetch_api_models("", str(row["api_url"]))
            if live:
                # The configured model stays offered first, as Hermes keeps it.
                models = [m for m in row.get("models") or [] if m not in live] + list(live)
                row = {
                    **row,
                    "models": models[:PICKER_MAX_MODELS],
                    "total_models": len(models),
                }
        out.append(row)
    return out


async def run_model_command(runner: Any, event: MessageEvent) -> str:
    contract.require(contract.PREFERENCES)
    return str(await runner._handle_model_command(event) or "")


async def run_reasoning_command(runner: Any, event: MessageEvent) -> str:
    contract.require(contract.PREFERENCES)
    return str(await runner._handle_reasoning_command(event) or "")


async def generate_title(user_message: str, assistant_response: str) -> str | None:
    from agent.title_generator import generate_title as hermes_generate_title

    def call() -> str | None:
        def failed(task: Any, exc: BaseException) -> None:
            raise exc

        title = hermes_generate_title(
            user_message, assistant_response, timeout=30, failure_callback=failed
        )
        return None if title is None else str(title)

    return await asyncio.to_thread(call)


def cron_jobs() -> list[dict[str, Any]]:
    from cron.jobs import load_jobs

    try:
        return [dict(job) for job in load_jobs()]
    except Exception:
        log.warning("android: could not read Hermes' cron jobs")
        return []
