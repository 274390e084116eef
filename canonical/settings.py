"""Settings of every process, read from the environment (and, for the plugin, from
Hermes' ``config.yaml`` ``gateway.platforms.android.extra``).

Variable names are those of spec 03 §3.1 (``ANDROID_TOKEN``, ``ANDROID_WS_PORT`` ...).
Environment variables override ``extra``, as Hermes does for its own platforms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .errors import SettingsError

MIB = 1024 * 1024


def _alias(env: str, *extra_keys: str) -> Any:
    return Field(validation_alias=AliasChoices(env, *extra_keys))


class GatewaySettings(BaseSettings):
    """Everything the plugin, the edges and the CLI need; each process reads what it uses."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, populate_by_name=True)

    token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_TOKEN", "token")
    )
    ws_host: str = Field(
        default="127.0.0.1", validation_alias=AliasChoices("ANDROID_WS_HOST", "host", "ws_host")
    )
    ws_port: int = Field(
        default=8790,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("ANDROID_WS_PORT", "port", "ws_port"),
    )
    home_channel: str = Field(
        default="android:default",
        validation_alias=AliasChoices("ANDROID_HOME_CHANNEL", "home_channel"),
    )
    allowed_users: str = Field(
        default="", validation_alias=AliasChoices("ANDROID_ALLOWED_USERS", "allowed_users")
    )
    allow_all_users: bool = Field(
        default=False, validation_alias=AliasChoices("ANDROID_ALLOW_ALL_USERS", "allow_all_users")
    )
    push_backend: Literal["fcm", "ntfy", "none"] = Field(
        default="fcm", validation_alias=AliasChoices("ANDROID_PUSH_BACKEND", "push_backend")
    )
    fcm_service_account: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("ANDROID_FCM_SERVICE_ACCOUNT", "fcm_service_account"),
    )
    fcm_server_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_FCM_SERVER_KEY", "fcm_server_key")
    )
    ntfy_topic: str | None = Field(
        default=None, validation_alias=AliasChoices("NTFY_TOPIC", "ntfy_topic")
    )
    ntfy_server_url: str = Field(
        default="https://ntfy.sh",
        validation_alias=AliasChoices("NTFY_SERVER_URL", "ntfy_server_url"),
    )
    ws_cert: Path | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_WS_CERT", "ws_cert", "tls_cert")
    )
    ws_key: Path | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_WS_KEY", "ws_key", "tls_key")
    )
    bus_url: str = Field(
        default="memory://", validation_alias=AliasChoices("ANDROID_BUS_URL", "bus_url")
    )
    tenant: str | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_TENANT", "tenant")
    )
    outbox_retention_hours: float = Field(
        default=168,
        gt=0,
        validation_alias=AliasChoices("ANDROID_OUTBOX_RETENTION_HOURS", "outbox_retention_hours"),
    )
    max_upload_bytes: int = Field(
        default=64 * MIB,
        gt=0,
        validation_alias=AliasChoices("ANDROID_MAX_UPLOAD_BYTES", "max_upload_bytes"),
    )
    allowed_origins: str = Field(
        default="", validation_alias=AliasChoices("ANDROID_ALLOWED_ORIGINS", "allowed_origins")
    )
    edge_id: str | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_EDGE_ID", "edge_id")
    )
    data_dir: Path | None = Field(
        default=None, validation_alias=AliasChoices("ANDROID_DATA_DIR", "data_dir")
    )
    send_queue_frames: int = Field(
        default=1024,
        ge=16,
        validation_alias=AliasChoices("ANDROID_SEND_QUEUE", "send_queue_frames"),
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment first: it overrides config.yaml `extra`, passed as init kwargs.
        return (env_settings, init_settings, file_secret_settings)

    @field_validator("bus_url")
    @classmethod
    def _known_bus(cls, value: str) -> str:
        if not (
            value.startswith("memory://") or value.startswith(("redis://", "rediss://", "unix://"))
        ):
            raise ValueError("must be memory:// (embedded) or redis://host:port/db (scaled)")
        return value

    @field_validator("home_channel")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @property
    def embedded(self) -> bool:
        return self.bus_url.startswith("memory://")

    @property
    def allowed_user_ids(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.allowed_users.split(",") if part.strip())

    @property
    def origin_allowlist(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.allowed_origins.split(",") if part.strip())

    def token_value(self) -> str | None:
        return self.token.get_secret_value() if self.token is not None else None


def _env_name(field_name: str) -> str:
    alias = GatewaySettings.model_fields[field_name].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return field_name


_ENV_NAMES: dict[str, str] = {name: _env_name(name) for name in GatewaySettings.model_fields}


def load_settings(extra: dict[str, Any] | None = None, **overrides: Any) -> GatewaySettings:
    """Build settings from env > ``extra`` (config.yaml) > defaults.

    Raises :class:`SettingsError` naming the first bad setting, so start-up stops with
    one clear line instead of a pydantic traceback.
    """
    init: dict[str, Any] = {k: v for k, v in (extra or {}).items() if v is not None}
    init.update(overrides)
    try:
        return GatewaySettings(**init)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = str(first["loc"][0]) if first["loc"] else "settings"
        name = _ENV_NAMES.get(loc, loc)
        for field_name, env_name in _ENV_NAMES.items():
            if loc in (field_name, env_name.lower(), env_name):
                name = env_name
        raise SettingsError(name, str(first["msg"])) from None


def require_token(settings: GatewaySettings) -> str:
    token = settings.token_value()
    if not token:
        raise SettingsError(
            "ANDROID_TOKEN", "is not set; run `hermes-device-gateway setup` to create one"
        )
    if len(token) < 16:
        raise SettingsError("ANDROID_TOKEN", "is too short (at least 16 characters)")
    return token
