"""Settings of every process, read from the environment (and, for the plugin, from
Hermes' ``config.yaml`` ``gateway.platforms.android.extra``).

Variable names are those of spec 03 §3.1 (``ANDROID_TOKEN``, ``ANDROID_WS_PORT`` ...).
Environment variables override ``extra``, as Hermes does for its own platforms; both
override secret files (``canonical.settings_base``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator

from .errors import SettingsError
from .redis_timeouts import RedisTimeouts
from .sentinel import is_sentinel_url, parse_sentinel_url
from .settings_base import HdgSettings, NamedEnvironment, documented_name, reading_environ

MIB = 1024 * 1024


class GatewaySettings(HdgSettings):
    """Everything the plugin, the edges and the CLI need; each process reads what it uses."""

    # The environment overrides config.yaml `extra` (passed as keyword values).
    environment_over_init = True

    token: SecretStr | None = Field(
        default=None,
        validation_alias="ANDROID_TOKEN",
        json_schema_extra={"extra_keys": ["token"]},
        description="Pairing token every device presents at `hello`. Required; `hdgctl setup` generates one. Also read from a secret file (`ANDROID_SECRETS_DIR`).",
    )
    ws_host: str = Field(
        default="127.0.0.1",
        validation_alias="ANDROID_WS_HOST",
        json_schema_extra={"extra_keys": ["host", "ws_host"]},
        description="Address the edge listens on (embedded mode: inside the gateway; scaled: `python -m edge`).",
    )
    ws_port: int = Field(
        default=8790,
        ge=0,
        le=65535,
        validation_alias="ANDROID_WS_PORT",
        json_schema_extra={"extra_keys": ["port", "ws_port"]},
        description="Port of the edge: WebSocket and HTTP (uploads, downloads, health, web client) share it.",
    )
    home_channel: str = Field(
        default="android:default",
        validation_alias="ANDROID_HOME_CHANNEL",
        json_schema_extra={"extra_keys": ["home_channel"]},
        description="The default channel; a bare cron `deliver=android` lands here.",
    )
    allowed_users: str = Field(
        default="",
        validation_alias="ANDROID_ALLOWED_USERS",
        json_schema_extra={"extra_keys": ["allowed_users"]},
        description="Comma-separated device ids allowed in; empty means the token alone admits a device.",
    )
    allow_all_users: bool = Field(
        default=False,
        validation_alias="ANDROID_ALLOW_ALL_USERS",
        json_schema_extra={"extra_keys": ["allow_all_users"]},
        description="Admit any device that presents the token, ignoring the allowlist. For development only.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        validation_alias="ANDROID_ADMIN_TOKEN",
        json_schema_extra={"extra_keys": ["admin_token"]},
        description="Token admin frames (`hdgctl devices`, `hdgctl token rotate`) must carry; unset: the one in `<data dir>/admin.token`, created at the first start. Also read from a secret file.",
    )
    admin_devices: str = Field(
        default="",
        validation_alias="ANDROID_ADMIN_DEVICES",
        json_schema_extra={"extra_keys": ["admin_devices"]},
        description="Comma-separated device ids allowed to send admin frames; empty: any device with the admin token.",
    )
    push_backend: Literal["fcm", "ntfy", "none"] = Field(
        default="fcm",
        validation_alias="ANDROID_PUSH_BACKEND",
        json_schema_extra={"extra_keys": ["push_backend"]},
        description="Where pushes go when no device is online: `fcm`, `ntfy` or `none`.",
    )
    fcm_service_account: Path | None = Field(
        default=None,
        validation_alias="ANDROID_FCM_SERVICE_ACCOUNT",
        json_schema_extra={"extra_keys": ["fcm_service_account"], "secret_file": True},
        description="Path of the Firebase service-account JSON key used for FCM HTTP v1. A secret file of this name is the key itself (its path is used).",
    )
    fcm_server_key: SecretStr | None = Field(
        default=None,
        validation_alias="ANDROID_FCM_SERVER_KEY",
        json_schema_extra={"extra_keys": ["fcm_server_key"]},
        description="Legacy FCM server key. Google shut that API down; setting it stops start-up with a hint.",
    )
    ntfy_topic: str | None = Field(
        default=None,
        validation_alias="NTFY_TOPIC",
        json_schema_extra={"extra_keys": ["ntfy_topic"]},
        description="ntfy topic pushes are published to (`ANDROID_PUSH_BACKEND=ntfy`).",
    )
    ntfy_server_url: str = Field(
        default="https://ntfy.sh",
        validation_alias="NTFY_SERVER_URL",
        json_schema_extra={"extra_keys": ["ntfy_server_url"]},
        description="ntfy server pushes are published to.",
    )
    ws_cert: Path | None = Field(
        default=None,
        validation_alias="ANDROID_WS_CERT",
        json_schema_extra={"extra_keys": ["ws_cert", "tls_cert"]},
        description="TLS certificate (PEM) to serve `wss://`/`https://` directly; set together with the key.",
    )
    ws_key: Path | None = Field(
        default=None,
        validation_alias="ANDROID_WS_KEY",
        validate_default=True,  # so a certificate without its key is caught
        json_schema_extra={"extra_keys": ["ws_key", "tls_key"]},
        description="TLS private key (PEM) for `ANDROID_WS_CERT`.",
    )
    bus_url: str = Field(
        default="memory://",
        validation_alias="ANDROID_BUS_URL",
        json_schema_extra={"extra_keys": ["bus_url"]},
        description="`memory://` runs embedded (one process); `redis://host:port/db` runs scaled with separate edges and workers.",
    )
    tenant: str | None = Field(
        default=None,
        validation_alias="ANDROID_TENANT",
        json_schema_extra={"extra_keys": ["tenant"]},
        description="Name of this gateway on a shared Redis; defaults to a hash of its `HERMES_HOME`.",
    )
    outbox_retention_hours: float = Field(
        default=168,
        gt=0,
        validation_alias="ANDROID_OUTBOX_RETENTION_HOURS",
        json_schema_extra={"extra_keys": ["outbox_retention_hours"]},
        description="How long missed events can be replayed to a device, and how long a queued command may wait.",
    )
    max_upload_bytes: int = Field(
        default=64 * MIB,
        gt=0,
        validation_alias="ANDROID_MAX_UPLOAD_BYTES",
        json_schema_extra={"extra_keys": ["max_upload_bytes"]},
        description="Largest upload accepted, in bytes.",
    )
    attachments_dir: Path | None = Field(
        default=None,
        validation_alias="ANDROID_ATTACHMENTS_DIR",
        json_schema_extra={"extra_keys": ["attachments_dir"]},
        description="Where uploaded and agent-produced files are stored. Scaled edges need it (shared with the gateway) or uploads answer 503.",
    )
    attachment_retention_days: float = Field(
        default=7,
        ge=0,
        validation_alias="ANDROID_ATTACHMENT_RETENTION_DAYS",
        json_schema_extra={"extra_keys": ["attachment_retention_days"]},
        description="Days an attachment is kept after its last use; 0 keeps them forever.",
    )
    allowed_origins: str = Field(
        default="",
        validation_alias="ANDROID_ALLOWED_ORIGINS",
        json_schema_extra={"extra_keys": ["allowed_origins"]},
        description="Comma-separated browser origins allowed to open a WebSocket, besides the edge's own origin.",
    )
    edge_id: str | None = Field(
        default=None,
        validation_alias="ANDROID_EDGE_ID",
        json_schema_extra={"extra_keys": ["edge_id"]},
        description="Stable name of an edge process on the bus; generated when unset.",
    )
    # `python -m edge` only: processes sharing one listening socket (one per core helps).
    edge_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        validation_alias="ANDROID_EDGE_WORKERS",
        json_schema_extra={"extra_keys": ["edge_workers"]},
        description="`python -m edge` only: edge processes sharing its port (one per core).",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        validation_alias="ANDROID_METRICS_PORT",
        json_schema_extra={"extra_keys": ["metrics_port"]},
        description="Port of the plugin's own Prometheus metrics (`hdg_plugin_*`, scaled mode); unset: not served.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        validation_alias="ANDROID_METRICS_HOST",
        json_schema_extra={"extra_keys": ["metrics_host"]},
        description="Address the plugin's metrics listen on (`ANDROID_METRICS_PORT`).",
    )
    data_dir: Path | None = Field(
        default=None,
        validation_alias="ANDROID_DATA_DIR",
        json_schema_extra={"extra_keys": ["data_dir"]},
        description="Where the plugin keeps its SQLite files; defaults to `$HERMES_HOME/android`.",
    )
    push_delay_s: float = Field(
        default=5.0,
        ge=0,
        validation_alias="ANDROID_PUSH_DELAY_S",
        json_schema_extra={"extra_keys": ["push_delay_s"]},
        description="Seconds a push waits for a device to read the event first; 0 when no device is online.",
    )
    push_preview: bool = Field(
        default=False,
        validation_alias="ANDROID_PUSH_PREVIEW",
        json_schema_extra={"extra_keys": ["push_preview"]},
        description="Put the message text in push payloads. Off: pushes carry no content.",
    )
    ws_ping_s: float = Field(
        default=20.0,
        gt=0,
        validation_alias="ANDROID_WS_PING_S",
        json_schema_extra={"extra_keys": ["ws_ping_s"]},
        description="Seconds between WebSocket pings to each device.",
    )
    send_queue_frames: int = Field(
        default=1024,
        ge=16,
        validation_alias="ANDROID_SEND_QUEUE",
        json_schema_extra={"extra_keys": ["send_queue_frames"]},
        description="Frames queued per connection before a slow device is closed with 4008 (it recovers by replay).",
    )
    # Hostile and slow clients (docs/operations.md, "Limits on unauthenticated sockets").
    http_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="ANDROID_HTTP_HEADER_TIMEOUT_S",
        json_schema_extra={"extra_keys": ["http_header_timeout_s"]},
        description="Seconds a request header (an HTTP request or a WebSocket upgrade) has to arrive in full; else 408 and the socket is closed.",
    )
    http_body_idle_timeout_s: float = Field(
        default=30.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="ANDROID_HTTP_BODY_IDLE_TIMEOUT_S",
        json_schema_extra={"extra_keys": ["http_body_idle_timeout_s"]},
        description="Seconds an upload's body may send nothing before it is answered 408 and its place is freed.",
    )
    max_unauthenticated_per_address: int = Field(
        default=64,
        ge=1,
        validation_alias="ANDROID_MAX_UNAUTHENTICATED_PER_ADDRESS",
        json_schema_extra={"extra_keys": ["max_unauthenticated_per_address"]},
        description="Sockets one address may hold that are not past their request header or hello; one more is refused (429).",
    )
    redis_connect_timeout_s: float = Field(
        default=2.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="ANDROID_REDIS_CONNECT_TIMEOUT_S",
        json_schema_extra={"extra_keys": ["redis_connect_timeout_s"]},
        description="Scaled mode: seconds to wait for a connection to Redis.",
    )
    redis_command_timeout_s: float = Field(
        default=5.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="ANDROID_REDIS_COMMAND_TIMEOUT_S",
        json_schema_extra={"extra_keys": ["redis_command_timeout_s"]},
        description="Scaled mode: seconds to wait for a Redis command's answer.",
    )
    redis_health_check_s: float = Field(
        default=15.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="ANDROID_REDIS_HEALTH_CHECK_S",
        json_schema_extra={"extra_keys": ["redis_health_check_s"]},
        description="Scaled mode: seconds of silence after which a Redis connection is checked with a PING.",
    )
    loop_probe: bool = Field(
        default=False,
        validation_alias="ANDROID_LOOP_PROBE",
        json_schema_extra={"extra_keys": ["loop_probe"]},
        description="Measure how late the gateway's event loop runs its callbacks (p50/p99/max lag, exported as metrics) and log the slowest ones (docs/performance.md, Hermes' event loop).",
    )
    fastpath: Literal["on", "off"] = Field(
        default="on",
        validation_alias="ANDROID_FASTPATH",
        description="`off` runs every library's stock path instead of the fast paths that reach into uvicorn's, websockets', redis-py's and the json module's internals (docs/architecture.md, Fast paths); read from the environment when a process starts.",
    )

    @field_validator("bus_url")
    @classmethod
    def _known_bus(cls, value: str) -> str:
        if is_sentinel_url(value):
            parse_sentinel_url(value)  # its ValueError says what is wrong
            return value
        if not (
            value.startswith("memory://") or value.startswith(("redis://", "rediss://", "unix://"))
        ):
            raise ValueError(
                "must be memory:// (embedded), redis://host:port/db or "
                "redis+sentinel://host1:26379,host2:26379/<service>/<db> (scaled)"
            )
        return value

    @field_validator("ws_key")
    @classmethod
    def _key_with_certificate(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        # One without the other used to serve plain ws:// without a word.
        if (value is None) != (info.data.get("ws_cert") is None):
            raise ValueError("ANDROID_WS_CERT and ANDROID_WS_KEY go together: set both or neither")
        return value

    @field_validator("admin_token", "metrics_port", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value.strip() if isinstance(value, str) else value

    @field_validator("metrics_host")
    @classmethod
    def _metrics_host(cls, value: str) -> str:
        return value.strip() or "127.0.0.1"

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

    def redis_timeouts(self) -> RedisTimeouts:
        return RedisTimeouts(
            connect_s=self.redis_connect_timeout_s,
            command_s=self.redis_command_timeout_s,
            health_check_s=self.redis_health_check_s,
        )

    @property
    def admin_device_ids(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.admin_devices.split(",") if part.strip())

    def token_value(self) -> str | None:
        return self.token.get_secret_value() if self.token is not None else None

    def admin_token_value(self) -> str | None:
        return self.admin_token.get_secret_value() if self.admin_token is not None else None


def _env_name(field_name: str) -> str:
    return documented_name(GatewaySettings.model_fields[field_name]) or field_name


def _extra_keys(field_name: str) -> list[str]:
    extra = GatewaySettings.model_fields[field_name].json_schema_extra
    keys = extra.get("extra_keys") if isinstance(extra, dict) else None
    return [str(k) for k in keys] if isinstance(keys, list) else []


_ENV_NAMES: dict[str, str] = {name: _env_name(name) for name in GatewaySettings.model_fields}
# config.yaml `extra` keys (host, port, ...) → field names. Only ANDROID_*/NTFY_* names are
# read from the environment: a generic PORT or TOKEN variable must never configure us.
_EXTRA_TO_FIELD: dict[str, str] = {
    key: name for name in GatewaySettings.model_fields for key in (name, *_extra_keys(name))
}


def load_settings(
    extra: dict[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> GatewaySettings:
    """Build settings from env > ``extra`` (config.yaml) > secret files > defaults.

    ``environ`` replaces the process environment (a Hermes home's as Hermes sees it).
    Raises :class:`SettingsError` naming the first bad setting, so start-up stops with
    one clear line instead of a pydantic traceback.
    """
    init: dict[str, Any] = {}
    for key, value in {**(extra or {}), **overrides}.items():
        if value is not None and key in _EXTRA_TO_FIELD:
            init[_EXTRA_TO_FIELD[key]] = value
    try:
        with reading_environ(environ):
            return GatewaySettings(**init)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = str(first["loc"][0]) if first["loc"] else "settings"
        name = _ENV_NAMES.get(loc, loc)
        for field_name, env_name in _ENV_NAMES.items():
            if loc in (field_name, env_name.lower(), env_name):
                name = env_name
        raise SettingsError(name, str(first["msg"])) from None


def environment_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The documented variables set (non-empty) in the environment, by name, unvalidated:
    for what must not fail on a bad value (Hermes' status seed, setup's notes)."""
    with reading_environ(environ):
        values = NamedEnvironment(GatewaySettings)()
    return {name: str(value) for name, value in values.items() if str(value).strip()}


def require_token(settings: GatewaySettings) -> str:
    token = settings.token_value()
    if not token:
        raise SettingsError(
            "ANDROID_TOKEN",
            "is not set; run `hdgctl setup` (or `hermes gateway setup`) to create one",
        )
    if len(token) < 16:
        raise SettingsError("ANDROID_TOKEN", "is too short (at least 16 characters)")
    return token


__all__ = [
    "MIB",
    "GatewaySettings",
    "NamedEnvironment",
    "documented_name",
    "environment_values",
    "load_settings",
    "require_token",
]
