"""The `android` platform's registration, and the Hermes types the seam builds on.

Every Hermes import of the project is in `gateway_plugin.hermes`; this module re-exports
the Hermes types the adapter builds on, reads the platform's settings the way Hermes hands
them over, and registers the platform and its hooks. The Hermes internals the seam relies
on are listed in `contract`; the wrappers around them are in `runner`, the plugin hooks in
`hooks`, cron deliveries in `cron_send`, files in `files`, state.db in `state_db`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
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
from hermes_constants import VALID_REASONING_EFFORTS, get_hermes_home
from pydantic import SecretStr

from canonical.errors import SettingsError
from canonical.settings import (
    GatewaySettings,
    environment_values,
    load_settings,
    require_token,
)
from gateway_plugin.hermes.setup_flow import interactive_setup

log = logging.getLogger("hdg.plugin")

PLATFORM = "android"
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


def register_platform(ctx: Any) -> None:
    """Called from `register(ctx)`: declarations only, no I/O (it runs in every CLI process)."""
    from gateway_plugin.hermes.cron_send import standalone_send

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
        from gateway_plugin.hermes.adapter import AndroidAdapter

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
        from gateway_plugin.hermes.hooks import register_hooks

        register_hooks(register_hook)
