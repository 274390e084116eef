"""The anti-corruption layer: every Hermes import of the project lives here.

A Hermes upgrade touches this module only. It registers the `android` platform and
implements the adapter as a thin shell over the Controller (which knows nothing of
Hermes), plus the AgentPort the controller uses to reach Hermes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
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
from hermes_constants import get_hermes_home

from canonical.bus import open_bus
from canonical.errors import BusUnavailable, SettingsError
from canonical.protocol import new_id, now_iso
from canonical.settings import GatewaySettings, load_settings, require_token

from .channel_store import ChannelError
from .controller import Controller
from .setup_flow import interactive_setup

log = logging.getLogger("hdg.plugin")

PLATFORM = "android"
Lane = tuple[str, str | None]

PLATFORM_HINT = (
    "You are chatting with the user through their native app (Android/Desktop). It renders "
    "Markdown, inline code, images, audio and video, and shows your tool activity separately. "
    "Conversations are organized into channels and optional threads. Keep formatting rich but readable."
)

_ADAPTERS: list[AndroidAdapter] = []


def _settings_from(config: PlatformConfig | None) -> GatewaySettings:
    extra = dict(getattr(config, "extra", None) or {})
    if config is not None and getattr(config, "token", None) and "token" not in extra:
        extra["token"] = config.token
    return load_settings(extra)


def _token_configured(config: PlatformConfig | None = None) -> bool:
    try:
        return bool(_settings_from(config).token_value())
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
        settings = _settings_from(config)
        require_token(settings)
    except SettingsError as exc:
        log.error("android platform disabled: %s", exc)
        return False
    return True


def env_enablement() -> dict[str, Any]:
    """Seed `extra` and the home channel so status and cron work without the adapter."""
    home = os.environ.get("ANDROID_HOME_CHANNEL") or "android:default"
    seed: dict[str, Any] = {"home_channel": {"chat_id": home, "name": "Default"}}
    for env, key in (
        ("ANDROID_WS_HOST", "host"),
        ("ANDROID_WS_PORT", "port"),
        ("ANDROID_BUS_URL", "bus_url"),
    ):
        if os.environ.get(env):
            seed[key] = os.environ[env]
    return seed


def tenant_for(settings: GatewaySettings, home: Path) -> str:
    if settings.tenant:
        return settings.tenant
    return "t" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]


class AndroidAdapter(BasePlatformAdapter):  # type: ignore[misc]
    """The `android` platform: Hermes on one side, the device bus on the other."""

    SUPPORTS_MESSAGE_EDITING = True
    MAX_MESSAGE_LENGTH = 0
    supports_code_blocks = True

    def __init__(self, config: PlatformConfig) -> None:
        super().__init__(config, Platform(PLATFORM))
        self.hdg_settings = _settings_from(config)
        self.controller: Controller | None = None
        self._server: Any = None
        self._server_task: asyncio.Task[None] | None = None

    @property
    def authorization_is_upstream(self) -> bool:
        # The edge verified the token (constant time, lockout) and the controller checks
        # the device allowlist at hello; Hermes' own allowlist would deny by default.
        return True

    # -- lifecycle
    async def connect(self, *, is_reconnect: bool = False) -> bool:
        settings = self.hdg_settings
        try:
            token = require_token(settings)
        except SettingsError as exc:
            self._set_fatal_error("config_invalid", str(exc), retryable=False)
            return False
        home = Path(get_hermes_home())
        data_dir = settings.data_dir or home / PLATFORM
        bus = open_bus(settings.bus_url)
        self.controller = Controller(
            settings,
            bus,
            tenant=tenant_for(settings, home),
            token=token,
            data_dir=data_dir,
            state_db=home / "state.db",
            agent=self,
        )
        try:
            await self.controller.start()
        except BusUnavailable as exc:
            self._set_fatal_error(
                "bus_unavailable",
                f"cannot reach {settings.bus_url.split('@')[-1]}: {exc}",
                retryable=True,
            )
            return False
        # The edge opens only once the tenant is registered, so a device's first hello works.
        if settings.embedded and not await self._start_embedded_edge(settings, bus):
            await self.controller.stop()
            self.controller = None
            return False
        _ADAPTERS.append(self)
        if settings.allow_all_users:
            log.warning(
                "ANDROID_ALLOW_ALL_USERS is on: any device with the token may connect (dev only)"
            )
        self._mark_connected()
        return True

    async def _start_embedded_edge(self, settings: GatewaySettings, bus: Any) -> bool:
        from edge.app import build_app
        from edge.server import EmbeddedServer, bind_check, make_state, uvicorn_config

        try:
            bind_check(settings.ws_host, settings.ws_port)
        except OSError as exc:
            self._set_fatal_error(
                "bind_failed",
                f"cannot listen on {settings.ws_host}:{settings.ws_port} ({exc.strerror}); set ANDROID_WS_PORT",
                retryable=True,
            )
            return False
        state = make_state(settings, bus)
        self._server = EmbeddedServer(uvicorn_config(build_app(state), settings))
        self._server_task = asyncio.create_task(self._server.serve(), name="hdg-embedded-edge")
        for _ in range(200):
            if self._server.started or self._server_task.done():
                break
            await asyncio.sleep(0.025)
        if not self._server.started:
            self._set_fatal_error(
                "bind_failed",
                f"edge did not start on {settings.ws_host}:{settings.ws_port}",
                retryable=True,
            )
            return False
        log.info("android edge listening on %s:%d (embedded)", settings.ws_host, settings.ws_port)
        return True

    async def _stop_embedded_edge(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._server_task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(self._server_task, 8)
            self._server = None

    async def disconnect(self) -> None:
        await self._stop_embedded_edge()
        if self.controller is not None:
            await self.controller.stop()
        if self in _ADAPTERS:
            _ADAPTERS.remove(self)
        self._mark_disconnected()

    # -- lanes
    def _lane(self, chat_id: str, metadata: dict[str, Any] | None) -> Lane | None:
        assert self.controller is not None
        thread_id = (metadata or {}).get("thread_id")
        if thread_id:
            return (chat_id, str(thread_id))
        if self.controller.channels.get(chat_id, None) is not None:
            return (chat_id, None)
        try:
            # Cron passes "<chat>:<thread>" as one chat id, or a channel name.
            entry = self.controller.channels.resolve_target(chat_id)
        except ChannelError as exc:
            log.error(
                "android: no channel for delivery target %r (%s); not delivered", chat_id, exc
            )
            return None
        return (entry.chat_id, entry.thread_id)

    # -- Hermes → devices
    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        if self.controller is None:
            return SendResult(
                success=False, error="android adapter is not connected", retryable=True
            )
        lane = self._lane(chat_id, metadata)
        if lane is None:
            return SendResult(success=False, error=f"unknown android target {chat_id!r}")
        message_id = self.controller.on_send(lane, content, metadata)
        return SendResult(success=True, message_id=message_id)

    async def edit_message(
        self, chat_id: str, message_id: str, content: str, *, finalize: bool = False
    ) -> Any:
        if self.controller is None:
            return SendResult(success=False, error="android adapter is not connected")
        self.controller.on_edit(message_id, content)
        return SendResult(success=True, message_id=message_id)

    async def send_typing(self, chat_id: str, metadata: dict[str, Any] | None = None) -> None:
        if self.controller is None:
            return
        lane = self._lane(chat_id, metadata)
        if lane is not None:
            self.controller.publish(
                [{"type": "typing", "lane": list(lane), "on": True, "ts": now_iso()}]
            )

    async def get_chat_info(self, chat_id: str) -> dict[str, Any]:
        entry = self.controller.channels.get(chat_id, None) if self.controller else None
        return {"name": entry.name if entry else chat_id, "type": "dm"}

    async def on_processing_start(self, event: MessageEvent) -> None:
        if self.controller is None or event.source is None:
            return
        lane = (str(event.source.chat_id), event.source.thread_id)
        self.controller.on_processing_start(lane, (event.metadata or {}).get("hdg_run_id"))

    async def on_processing_complete(self, event: MessageEvent, outcome: ProcessingOutcome) -> None:
        if self.controller is None or event.source is None:
            return
        lane = (str(event.source.chat_id), event.source.thread_id)
        self.controller.on_processing_complete(
            lane, (event.metadata or {}).get("hdg_run_id"), outcome.value
        )

    # -- AgentPort: the controller reaching Hermes
    async def wait_ready(self) -> None:
        for _ in range(1200):
            runner = getattr(self, "gateway_runner", None)
            if runner is not None and not getattr(runner, "_startup_restore_in_progress", False):
                return
            await asyncio.sleep(0.05)

    async def submit(
        self,
        lane: Lane,
        text: str,
        *,
        user_id: str,
        user_name: str,
        run_id: str | None,
        chat_name: str,
    ) -> None:
        source = self.build_source(
            chat_id=lane[0],
            chat_name=chat_name,
            chat_type="dm",
            user_id=user_id,
            user_name=user_name,
            thread_id=lane[1],
        )
        kind = MessageType.COMMAND if text.lstrip().startswith("/") else MessageType.TEXT
        event = MessageEvent(
            text=text,
            message_type=kind,
            source=source,
            message_id=new_id(8),
            metadata={"hdg_run_id": run_id} if run_id else {},
        )
        await self.handle_message(event)

    async def interrupt(self, lane: Lane, *, user_id: str) -> None:
        await self.submit(
            lane, "/stop", user_id=user_id, user_name=user_id, run_id=None, chat_name=lane[0]
        )

    def delete_transcript(self, lane: Lane) -> int:
        from hermes_state import SessionDB

        assert self.controller is not None
        db = SessionDB()
        deleted = 0
        try:
            for session in self.controller.transcript.sessions(lane):
                if db.delete_session(session["id"]):
                    deleted += 1
        finally:
            close = getattr(db, "close", None)
            if callable(close):
                close()
        return deleted


def _on_pre_tool_call(**kwargs: Any) -> None:
    name = kwargs.get("tool_name")
    if not name:
        return
    for adapter in list(_ADAPTERS):
        controller = adapter.controller
        if controller is not None:
            # Hooks run on agent worker threads; a set add is atomic under the GIL.
            controller.turns.known_tools.add(str(name))


def register_platform(ctx: Any) -> None:
    """Called from `register(ctx)`: declarations only, no I/O (it runs in every CLI process)."""
    entry_fields = {f.name for f in dataclasses.fields(PlatformEntry)}
    options: dict[str, Any] = {
        "is_connected": is_connected,
        "env_enablement_fn": env_enablement,
        "setup_fn": lambda: interactive_setup(home=Path(get_hermes_home())),
        "cron_deliver_env_var": "ANDROID_HOME_CHANNEL",
        "allowed_users_env": "ANDROID_ALLOWED_USERS",
        "allow_all_env": "ANDROID_ALLOW_ALL_USERS",
        "max_message_length": 0,
        "emoji": "📱",
        "pii_safe": False,
        "platform_hint": PLATFORM_HINT,
    }
    ctx.register_platform(
        name=PLATFORM,
        label="Android",
        adapter_factory=lambda cfg: AndroidAdapter(cfg),
        check_fn=check_requirements,
        validate_config=validate_config,
        required_env=["ANDROID_TOKEN"],
        install_hint="pip install hermes-device-gateway",
        **{k: v for k, v in options.items() if k in entry_fields},
    )
    register_hook = getattr(ctx, "register_hook", None)
    if callable(register_hook):
        register_hook("pre_tool_call", _on_pre_tool_call)
