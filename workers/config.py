"""Worker settings, read from the environment.

Variable names match the gateway's (``ANDROID_BUS_URL``, ``ANDROID_PUSH_BACKEND``,
``ANDROID_FCM_SERVICE_ACCOUNT``, ``NTFY_*``) plus worker-only ``HDG_*`` knobs. Keyword
arguments to :func:`load_config` win over the environment (tests, embedded mode), which
wins over secret files (``ANDROID_SECRETS_DIR``, ``canonical.settings_base``).

Every validation problem surfaces as one :class:`~workers.errors.ConfigError` whose
message starts with the environment variable's name.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator

from canonical.redis_timeouts import RedisTimeouts
from canonical.sentinel import is_sentinel_url, parse_sentinel_url
from canonical.settings_base import HdgSettings, documented_name

from .errors import ConfigError

__all__ = ["WorkerConfig", "load_config"]

_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
LEGACY_FCM_MESSAGE = (
    "the legacy FCM server-key API was shut down by Google; create a Firebase service "
    "account key (JSON) and set ANDROID_FCM_SERVICE_ACCOUNT to its path instead"
)


def _env(name: str, field: str, default: Any, **constraints: Any) -> Any:
    return Field(default=default, validation_alias=AliasChoices(name, field), **constraints)


class WorkerConfig(HdgSettings):
    """Everything the push, media and maintenance workers read; keyword overrides win over
    the environment, which wins over secret files."""

    # -- bus -------------------------------------------------------------------------
    bus_url: str = _env(
        "ANDROID_BUS_URL",
        "bus_url",
        "redis://127.0.0.1:6379/0",
        description="Redis the workers take jobs from (the gateway's bus).",
    )
    # The same names and defaults as the gateway's (canonical.settings).
    redis_connect_timeout_s: float = _env(
        "ANDROID_REDIS_CONNECT_TIMEOUT_S",
        "redis_connect_timeout_s",
        2.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds to wait for a connection to Redis.",
    )
    redis_command_timeout_s: float = _env(
        "ANDROID_REDIS_COMMAND_TIMEOUT_S",
        "redis_command_timeout_s",
        5.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds to wait for a Redis command's answer.",
    )
    redis_health_check_s: float = _env(
        "ANDROID_REDIS_HEALTH_CHECK_S",
        "redis_health_check_s",
        15.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds of silence after which a Redis connection is checked with a PING.",
    )

    # -- push ------------------------------------------------------------------------
    push_backend: Literal["fcm", "ntfy", "none"] = _env(
        "ANDROID_PUSH_BACKEND", "push_backend", "fcm", description="`fcm`, `ntfy` or `none`."
    )
    fcm_service_account: Path | None = _env(
        "ANDROID_FCM_SERVICE_ACCOUNT",
        "fcm_service_account",
        None,
        json_schema_extra={"secret_file": True},
        description="Path of the Firebase service-account JSON key; a secret file of this name is the key itself.",
    )
    fcm_server_key: SecretStr | None = _env(
        "ANDROID_FCM_SERVER_KEY",
        "fcm_server_key",
        None,
        description="Legacy FCM server key; refused with a hint (the API was shut down).",
    )
    fcm_api_base: str = _env(
        "ANDROID_FCM_API_BASE",
        "fcm_api_base",
        "https://fcm.googleapis.com",
        description="FCM API base URL (tests point it at a local server).",
    )
    ntfy_server_url: str = _env(
        "NTFY_SERVER_URL", "ntfy_server_url", "https://ntfy.sh", description="ntfy server."
    )
    ntfy_topic: str | None = _env("NTFY_TOPIC", "ntfy_topic", None, description="ntfy topic.")
    ntfy_token: SecretStr | None = _env(
        "NTFY_TOKEN", "ntfy_token", None, description="ntfy access token."
    )
    ntfy_user: str | None = _env(
        "NTFY_USER",
        "ntfy_user",
        None,
        description="ntfy user (with `NTFY_PASSWORD`), instead of a token.",
    )
    ntfy_password: SecretStr | None = _env(
        "NTFY_PASSWORD", "ntfy_password", None, description="ntfy password."
    )
    deep_link_scheme: str = _env(
        "HDG_DEEP_LINK_SCHEME",
        "deep_link_scheme",
        "hermes-device",
        description="URI scheme of the deep link a push opens in the app.",
    )
    push_http_timeout: float = _env(
        "HDG_PUSH_HTTP_TIMEOUT",
        "push_http_timeout",
        10.0,
        gt=0,
        description="Seconds one push request may take.",
    )

    # -- media -----------------------------------------------------------------------
    media_root: Path | None = _env(
        "HDG_MEDIA_ROOT",
        "media_root",
        None,
        description="Attachments directory the media worker reads and writes (the gateway's `ANDROID_ATTACHMENTS_DIR`).",
    )
    media_retention_days: float = _env(
        "HDG_MEDIA_RETENTION_DAYS",
        "media_retention_days",
        7.0,
        gt=0,
        description="Days transcoded outputs are kept.",
    )
    media_max_pixels: int = _env(
        "HDG_MEDIA_MAX_PIXELS",
        "media_max_pixels",
        80_000_000,
        gt=0,
        description="Largest image or video frame decoded, in pixels.",
    )
    media_max_seconds: float = _env(
        "HDG_MEDIA_MAX_SECONDS",
        "media_max_seconds",
        3600.0,
        gt=0,
        description="Longest audio or video transcoded, in seconds.",
    )
    # Each transcode runs in a process of its own capped at this (RLIMIT_DATA; 0: no cap);
    # with the 80 MP pixel cap keep it at 600 MB or more (docs/operations.md).
    media_max_memory_mb: int = _env(
        "HDG_MEDIA_MAX_MEMORY_MB",
        "media_max_memory_mb",
        2048,
        ge=0,
        description="Memory cap of each transcode's child process (0: none); keep it at 600 MB or more.",
    )

    # -- jobs ------------------------------------------------------------------------
    push_job_timeout: float = _env(
        "HDG_PUSH_JOB_TIMEOUT",
        "push_job_timeout",
        60.0,
        gt=0,
        description="Seconds one push job may run.",
    )
    media_job_timeout: float = _env(
        "HDG_MEDIA_JOB_TIMEOUT",
        "media_job_timeout",
        600.0,
        gt=0,
        description="Seconds one transcode job may run.",
    )
    maintenance_job_timeout: float = _env(
        "HDG_MAINTENANCE_JOB_TIMEOUT",
        "maintenance_job_timeout",
        900.0,
        gt=0,
        description="Seconds one retention job may run.",
    )
    push_max_tries: int = _env(
        "HDG_PUSH_MAX_TRIES",
        "push_max_tries",
        8,
        ge=1,
        description="Tries of a push before it is given up.",
    )
    media_max_tries: int = _env(
        "HDG_MEDIA_MAX_TRIES",
        "media_max_tries",
        3,
        ge=1,
        description="Tries of a transcode before it is given up.",
    )
    push_concurrency: int = _env(
        "HDG_PUSH_CONCURRENCY",
        "push_concurrency",
        50,
        ge=1,
        description="Push jobs run at once per worker.",
    )
    media_concurrency: int = _env(
        "HDG_MEDIA_CONCURRENCY",
        "media_concurrency",
        2,
        ge=1,
        description="Transcode jobs run at once per worker.",
    )
    push_poll_delay: float = _env(
        "HDG_PUSH_POLL_DELAY",
        "push_poll_delay",
        0.1,
        gt=0,
        description="Seconds between polls of the push queue.",
    )
    poll_delay: float = _env(
        "HDG_POLL_DELAY",
        "poll_delay",
        0.5,
        gt=0,
        description="Seconds between polls of the other queues.",
    )
    retry_base_seconds: float = _env(
        "HDG_RETRY_BASE_SECONDS",
        "retry_base_seconds",
        2.0,
        gt=0,
        description="First retry delay of a failed push; it doubles up to the maximum.",
    )
    retry_max_seconds: float = _env(
        "HDG_RETRY_MAX_SECONDS",
        "retry_max_seconds",
        600.0,
        gt=0,
        description="Longest retry delay of a failed push.",
    )
    idempotency_ttl_seconds: int = _env(
        "HDG_IDEMPOTENCY_TTL_SECONDS",
        "idempotency_ttl_seconds",
        7 * 24 * 3600,
        gt=0,
        description="How long a job's outcome is remembered so a repeat is not sent twice.",
    )
    job_completion_wait: int = _env(
        "HDG_JOB_COMPLETION_WAIT",
        "job_completion_wait",
        30,
        ge=0,
        description="Seconds a stopping worker waits for running jobs.",
    )
    health_check_interval: int = _env(
        "HDG_HEALTH_CHECK_INTERVAL",
        "health_check_interval",
        30,
        gt=0,
        description="Seconds between the worker's health records in Redis.",
    )
    retention_sweep_interval: float = _env(
        "HDG_RETENTION_SWEEP_INTERVAL",
        "retention_sweep_interval",
        3600.0,
        gt=0,
        description="Seconds between retention sweeps.",
    )
    metrics_port: int | None = _env(
        "HDG_WORKER_METRICS_PORT",
        "metrics_port",
        None,
        ge=0,
        description="Port of the worker's Prometheus metrics; unset: none.",
    )

    @field_validator(
        "fcm_service_account",
        "fcm_server_key",
        "ntfy_topic",
        "ntfy_token",
        "ntfy_user",
        "ntfy_password",
        "media_root",
        "metrics_port",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("bus_url")
    @classmethod
    def _known_bus(cls, value: str) -> str:
        if is_sentinel_url(value):
            parse_sentinel_url(value)  # its ValueError says what is wrong
            return value
        if not value.startswith(("redis://", "rediss://", "unix://", "memory://")):
            raise ValueError(
                "must be redis://host:port/db, redis+sentinel://host1:26379,host2:26379/"
                "<service>/<db> (or memory:// for embedded mode)"
            )
        return value

    @field_validator("fcm_server_key")
    @classmethod
    def _legacy_key_is_gone(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            raise ValueError(LEGACY_FCM_MESSAGE)
        return value

    @field_validator("fcm_service_account")
    @classmethod
    def _account_file_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @field_validator("fcm_api_base", "ntfy_server_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s):// URL")
        return value.rstrip("/")

    @field_validator("deep_link_scheme")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not _SCHEME.match(value):
            raise ValueError("must be a URI scheme such as hermes-device")
        return value

    @field_validator("media_root")
    @classmethod
    def _absolute_root(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    def redis_timeouts(self) -> RedisTimeouts:
        return RedisTimeouts(
            connect_s=self.redis_connect_timeout_s,
            command_s=self.redis_command_timeout_s,
            health_check_s=self.redis_health_check_s,
        )

    def ntfy_authorization(self) -> str | None:
        """The ``Authorization`` header value for ntfy, or ``None`` for anonymous."""
        if self.ntfy_user is not None:
            password = self.ntfy_password.get_secret_value() if self.ntfy_password else ""
            raw = f"{self.ntfy_user}:{password}".encode()
            return "Basic " + base64.b64encode(raw).decode("ascii")
        if self.ntfy_token is not None:
            token = self.ntfy_token.get_secret_value().strip()
            if ":" in token:  # Hermes' own ntfy adapter treats user:pass tokens as Basic auth
                return "Basic " + base64.b64encode(token.encode()).decode("ascii")
            return f"Bearer {token}"
        return None


def _env_name(field_name: str) -> str:
    return documented_name(WorkerConfig.model_fields[field_name]) or field_name


_ENV_NAMES: dict[str, str] = {name: _env_name(name) for name in WorkerConfig.model_fields}
_BY_ANY_NAME: dict[str, str] = {
    key.lower(): env for name, env in _ENV_NAMES.items() for key in (name, env)
}


def load_config(**overrides: Any) -> WorkerConfig:
    """Build the config from keyword overrides > environment > defaults.

    Raises :class:`ConfigError` naming the first bad setting.
    """
    try:
        config = WorkerConfig(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = str(first["loc"][0]) if first["loc"] else "settings"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(_BY_ANY_NAME.get(loc.lower(), loc), message) from None
    if config.ntfy_token is not None and config.ntfy_user is not None:
        raise ConfigError(
            "NTFY_TOKEN", "set either NTFY_TOKEN or NTFY_USER/NTFY_PASSWORD, not both"
        )
    if config.ntfy_password is not None and config.ntfy_user is None:
        raise ConfigError("NTFY_USER", "is required when NTFY_PASSWORD is set")
    return config
