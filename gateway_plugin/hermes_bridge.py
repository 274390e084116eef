"""The anti-corruption layer: every Hermes import of the project lives here.

A Hermes upgrade touches this module only. It re-exports the Hermes types the adapter
(`adapter.py`) builds on, registers the `android` platform, wires Hermes' plugin hooks,
and wraps the Hermes functions and gateway-runner internals the plugin calls (approvals,
clarify, slash-confirm, YOLO, model and reasoning selection), each behind a plain
function with a stable signature.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.config import Platform, PlatformConfig
from gateway.platform_registry import PlatformEntry
from gateway.platforms.base import (
    BasePlatformAdapter,
    MessageEvent,
    MessageType,
    ProcessingOutcome,
    SendResult,
)
from gateway.session_context import get_session_env
from hermes_constants import VALID_REASONING_EFFORTS, get_hermes_home
from pydantic import SecretStr

from canonical.errors import SettingsError
from canonical.settings import (
    GatewaySettings,
    environment_values,
    load_settings,
    require_token,
)

from .setup_flow import interactive_setup

log = logging.getLogger("hdg.plugin")

PLATFORM = "android"
Lane = tuple[str, str | None]
REASONING_EFFORTS = ["none", *VALID_REASONING_EFFORTS]

PLATFORM_HINT = (
    "You are chatting with the user through their native app (Android/Desktop). It renders "
    "Markdown, inline code, images, audio and video, and shows your tool activity separately. "
    "Conversations are organized into channels and optional threads. Keep formatting rich but readable."
)

__all__ = [
    "PLATFORM",
    "REASONING_EFFORTS",
    "BasePlatformAdapter",
    "MessageEvent",
    "MessageType",
    "Platform",
    "PlatformConfig",
    "ProcessingOutcome",
    "SendResult",
    "get_hermes_home",
    "register_platform",
]

# Live adapters of this process, for the plugin hooks (which Hermes calls without one).
ADAPTERS: list[Any] = []

# Hermes' cron resolves a bare `deliver=android` from the environment variable the platform
# declares (`cron_deliver_env_var`) and nothing else: unset, the job delivers nowhere. The
# home channel itself (ANDROID_HOME_CHANNEL, or `home_channel` in config.yaml, default
# android:default) is known only once the settings are read, which register() must not
# do, and setting ANDROID_HOME_CHANNEL there would override config.yaml's. So the variable
# is our own and register() gives it a marker that the adapter and the standalone sender
# replace with the configured home channel.
CRON_HOME_ENV = "ANDROID_CRON_HOME_CHANNEL"
HOME_TARGET = "android:home"


def delivery_chat_id(chat_id: str, settings: GatewaySettings) -> str:
    """The chat a delivery names: the home-channel marker is the configured home channel."""
    return settings.home_channel if chat_id == HOME_TARGET else chat_id


def settings_from(config: PlatformConfig | None) -> GatewaySettings:
    extra = dict(getattr(config, "extra", None) or {})
    if config is not None and getattr(config, "token", None) and "token" not in extra:
        extra["token"] = config.token
    settings = load_settings(extra)
    scoped = profile_secret("ANDROID_TOKEN")
    if scoped and settings.token_value() != scoped:
        settings = settings.model_copy(update={"token": SecretStr(scoped)})
    return settings


def _token_configured(config: PlatformConfig | None = None) -> bool:
    try:
        return bool(settings_from(config).token_value())
    except SettingsError:
        return False


def check_requirements() -> bool:
    """Passive: our dependencies import and a token is configured. Never installs."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return _token_configured()


def is_connected(config: PlatformConfig) -> bool:
    return _token_configured(config)


def validate_config(config: PlatformConfig) -> bool:
    try:
        settings = settings_from(config)
        require_token(settings)
    except SettingsError as exc:
        log.error("android platform disabled: %s", exc)
        return False
    return True


def env_enablement() -> dict[str, Any]:
    """Seed `extra` and the home channel so status and cron work without the adapter."""
    environ = environment_values()
    home = environ.get("ANDROID_HOME_CHANNEL") or "android:default"
    seed: dict[str, Any] = {"home_channel": {"chat_id": home, "name": "Default"}}
    for env, key in (
        ("ANDROID_WS_HOST", "host"),
        ("ANDROID_WS_PORT", "port"),
        ("ANDROID_BUS_URL", "bus_url"),
    ):
        if env in environ:
            seed[key] = environ[env]
    return seed


def profile_secret(name: str) -> str | None:
    """A secret the profile-scoped way: this Hermes home's `.env` first, then the process
    environment. Multiplexed profiles share a process but not a home, so one profile's
    ANDROID_TOKEN never serves another."""
    from dotenv import dotenv_values

    env_file = Path(get_hermes_home()) / ".env"
    if env_file.exists():
        value = dotenv_values(env_file).get(name)
        if value:
            return str(value)
    return os.environ.get(name) or None


def acquire_locks(token: str, host: str, port: int, *, embedded: bool) -> str | None:
    """Hermes' machine-wide scoped locks on our identity (the token) and, in embedded mode,
    the listening address. None when acquired, else why not."""
    from gateway.status import acquire_scoped_lock, release_scoped_lock

    scopes = [("android-token", token)] + (
        [("android-listen", f"{host}:{port}")] if embedded else []
    )
    taken: list[tuple[str, str]] = []
    for scope, identity in scopes:
        ok, existing = acquire_scoped_lock(scope, identity, {"platform": PLATFORM})
        if not ok:
            for done_scope, done_identity in taken:
                release_scoped_lock(done_scope, done_identity)
            pid = (existing or {}).get("pid")
            what = "this pairing token" if scope == "android-token" else f"{host}:{port}"
            return f"another Hermes gateway (pid {pid}) already serves {what}; use another profile token or port"
        taken.append((scope, identity))
    return None


def release_locks(token: str, host: str, port: int, embedded: bool) -> None:
    from gateway.status import release_scoped_lock

    release_scoped_lock("android-token", token)
    if embedded:
        release_scoped_lock("android-listen", f"{host}:{port}")


def tenant_for(settings: GatewaySettings, home: Path) -> str:
    if settings.tenant:
        return settings.tenant
    return "t" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]


# -- plugin hooks: they run on agent worker threads and carry session_id, not a lane.
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
        adapter.controller is not None and lane in adapter.controller.cancelled
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


# -- Hermes functions the commands need
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
    if session_store is None:
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
    return str(await runner._handle_model_command(event) or "")


async def run_reasoning_command(runner: Any, event: MessageEvent) -> str:
    return str(await runner._handle_reasoning_command(event) or "")


def delete_sessions(session_ids: list[str]) -> int:
    """Delete Hermes sessions (transcript and messages) through Hermes' own SessionDB."""
    from hermes_state import SessionDB

    db = SessionDB()
    deleted = 0
    try:
        for session_id in session_ids:
            if db.delete_session(session_id):
                deleted += 1
    finally:
        close = getattr(db, "close", None)
        if callable(close):
            close()
    return deleted


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


async def standalone_send(
    pconfig: Any,
    chat_id: str,
    message: str,
    thread_id: str | None = None,
    media_files: Any = None,
    force_document: bool = False,
    **_: Any,
) -> dict[str, Any]:
    """Hermes' standalone_sender_fn: cron run by the CLI, with or without a gateway running.
    ``media_files`` are Hermes' (path, is_voice) pairs: stored as attachments."""
    from .delivery import append_delivery

    try:
        settings = settings_from(pconfig if isinstance(pconfig, PlatformConfig) else None)
    except SettingsError as exc:
        return {"error": str(exc)}
    home = Path(get_hermes_home())
    data_dir = settings.data_dir or home / PLATFORM
    chat_id = delivery_chat_id(chat_id, settings)
    job_id = get_session_env("HERMES_CRON_JOB_ID") or None
    media = deliverables(media_files, force_document=force_document)
    return await asyncio.to_thread(
        append_delivery,
        settings,
        data_dir,
        tenant_for(settings, home),
        chat_id,
        thread_id,
        message,
        job_id,
        media,
    )


def deliverables(
    media_files: Any, *, force_document: bool = False
) -> list[tuple[Path, str | None]]:
    """(path, attachment kind) of each file Hermes may deliver, routed to a kind as Hermes'
    cron routes a MEDIA: file to an adapter's send method (``_send_media_via_adapter``):
    audio → voice, video, image file, else document."""
    from cron.scheduler import _IMAGE_EXTS, _VIDEO_EXTS
    from gateway.platforms.base import should_send_media_as_audio

    from .delivery import MEDIA_KINDS

    out: list[tuple[Path, str | None]] = []
    for item in media_files or []:
        raw, is_voice = item if isinstance(item, tuple | list) else (item, False)
        path = deliverable_path(str(raw))
        if path is None:
            log.warning("android: refusing to deliver a file Hermes does not allow")
            continue
        ext = path.suffix.lower()
        if force_document:
            method = "send_document"
        elif should_send_media_as_audio(PLATFORM, ext, is_voice=bool(is_voice)):
            method = "send_voice"
        elif ext in _VIDEO_EXTS:
            method = "send_video"
        elif ext in _IMAGE_EXTS:
            method = "send_image_file"
        else:
            method = "send_document"
        out.append((path, MEDIA_KINDS[method]))
    return out


def register_platform(ctx: Any) -> None:
    """Called from `register(ctx)`: declarations only, no I/O (it runs in every CLI process)."""
    entry_fields = {f.name for f in dataclasses.fields(PlatformEntry)}
    options: dict[str, Any] = {
        "is_connected": is_connected,
        "env_enablement_fn": env_enablement,
        "setup_fn": lambda: interactive_setup(home=Path(get_hermes_home())),
        "cron_deliver_env_var": CRON_HOME_ENV,
        "standalone_sender_fn": standalone_send,
        "allowed_users_env": "ANDROID_ALLOWED_USERS",
        "allow_all_env": "ANDROID_ALLOW_ALL_USERS",
        "max_message_length": 0,
        "emoji": "📱",
        "pii_safe": False,
        "platform_hint": PLATFORM_HINT,
    }

    # An environment change only, no I/O: this runs in every Hermes process, the gateway
    # and a `hermes cron run` alike. An operator's own value is kept.
    os.environ.setdefault(CRON_HOME_ENV, HOME_TARGET)

    def make_adapter(config: PlatformConfig) -> Any:
        from .adapter import AndroidAdapter

        return AndroidAdapter(config)

    ctx.register_platform(
        name=PLATFORM,
        label="Android",
        adapter_factory=make_adapter,
        check_fn=check_requirements,
        validate_config=validate_config,
        required_env=["ANDROID_TOKEN"],
        install_hint="pip install hermes-device-gateway",
        **{k: v for k, v in options.items() if k in entry_fields},
    )
    register_hook: Callable[..., Any] | None = getattr(ctx, "register_hook", None)
    if callable(register_hook):
        register_hook("pre_tool_call", _on_pre_tool_call)
        register_hook("post_tool_call", _on_post_tool_call)
        register_hook("post_approval_response", _on_post_approval_response)


def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


# -- media: Hermes' cache for inbound files, its checks for outbound ones
def stage_media_file(source: Path, filename: str, mime_type: str) -> tuple[str, str]:
    """Copy an attachment into Hermes' media cache, named as its ``cache_*_from_bytes``
    helpers name files, so every agent backend (a Docker sandbox mounts the cache) can
    open it. Streams the copy (never the whole file in memory); blocking, so run it in a
    thread. Returns (host path, MIME type) for ``MessageEvent.media_urls``/``media_types``.
    """
    import shutil
    import uuid

    from gateway.platforms.base import (
        get_audio_cache_dir,
        get_document_cache_dir,
        get_image_cache_dir,
        get_video_cache_dir,
    )

    ext = Path(filename).suffix.lower()
    if not re.fullmatch(r"\.[a-z0-9]{1,8}", ext):
        ext = ""
    token = uuid.uuid4().hex[:12]
    if mime_type.startswith("image/"):
        target = get_image_cache_dir() / f"img_{token}{ext or '.jpg'}"
    elif mime_type.startswith("audio/"):
        target = get_audio_cache_dir() / f"audio_{token}{ext or '.ogg'}"
    elif mime_type.startswith("video/"):
        target = get_video_cache_dir() / f"video_{token}{ext or '.mp4'}"
    else:
        safe = re.sub(r"[^\w.\- ]", "_", Path(filename).name).strip() or "document"
        target = get_document_cache_dir() / f"doc_{token}_{safe}"
    shutil.copyfile(source, target)
    return str(target), mime_type


def deliverable_path(path: str) -> Path | None:
    """Hermes' own check for a file the agent asks to deliver (exists, regular, not a
    credential or system path); the resolved path, or None."""
    from gateway.platforms.base import validate_media_delivery_path

    safe = validate_media_delivery_path(path)
    return Path(safe) if safe else None


async def fetch_image(url: str) -> Path:
    """Download an image URL into Hermes' image cache with its SSRF protection."""
    from gateway.platforms.base import cache_image_from_url

    ext = Path(url.split("?", 1)[0]).suffix.lower()
    if ext not in (".png", ".jpg", ".jpeg", ".gif", ".webp"):
        ext = ".jpg"
    return Path(await cache_image_from_url(url, ext=ext))
