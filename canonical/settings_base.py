"""What every settings model of the project shares: where values come from.

Only the documented variable names (``ANDROID_*``, ``NTFY_*``, ``HDG_*``) are read, from
the environment and from a secrets directory: files named like the variables
(``ANDROID_TOKEN`` or ``android_token``), as Docker secrets (``/run/secrets``) and
systemd credentials (``$CREDENTIALS_DIRECTORY``) provide them. pydantic-settings' order
holds: a variable set in the environment wins over a secret file of the same name.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

SECRETS_DIR_ENV = "ANDROID_SECRETS_DIR"
CREDENTIALS_DIRECTORY_ENV = "CREDENTIALS_DIRECTORY"  # systemd's LoadCredential=
DOCKER_SECRETS_DIR = Path("/run/secrets")

# The environment settings are read from; hdgctl reads a Hermes home's as Hermes would
# (its .env over the shell's variables) without touching the process's own.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("hdg_settings_environ", default=None)


def current_environ() -> Mapping[str, str]:
    environ = _ENVIRON.get()
    return os.environ if environ is None else environ


@contextlib.contextmanager
def reading_environ(environ: Mapping[str, str] | None) -> Iterator[None]:
    """Settings built inside read ``environ`` instead of the process environment."""
    reset = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(reset)


def documented_name(field: Any) -> str | None:
    """A field's environment variable: its alias, or the first of its alias choices."""
    alias = field.validation_alias
    if isinstance(alias, str):
        return alias
    choices = getattr(alias, "choices", None)
    if choices and isinstance(choices[0], str):
        return str(choices[0])
    return None


def is_secret_file(field: Any) -> bool:
    """A field whose secret is a file used where it lies (a key), not a value to read."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("secret_file"))


def secrets_dirs(environ: Mapping[str, str], configured: str | Path | None = None) -> list[Path]:
    """The directories secret files are read from; a later one wins over an earlier one.

    ``ANDROID_SECRETS_DIR`` (or ``configured``) alone when set; else ``/run/secrets`` if it
    exists, then systemd's ``$CREDENTIALS_DIRECTORY`` when the service has credentials."""
    explicit = environ.get(SECRETS_DIR_ENV) or configured
    if explicit:
        path = Path(explicit).expanduser()
        return [path] if path.is_dir() else []  # the field's validator says what is wrong
    found = [DOCKER_SECRETS_DIR] if DOCKER_SECRETS_DIR.is_dir() else []
    credentials = environ.get(CREDENTIALS_DIRECTORY_ENV)
    if credentials and Path(credentials).is_dir():
        found.append(Path(credentials))
    return found


class NamedEnvironment(PydanticBaseSettingsSource):
    """Only the documented variable names (ANDROID_*, NTFY_*, HDG_*) are read from the
    environment, never a field's bare name: a generic PORT or TOKEN must not configure us."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        name = documented_name(field)
        if name is not None:
            for key, value in current_environ().items():
                if key.upper() == name.upper():
                    return value, field_name, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, _, _ = self.get_field_value(field, field_name)
            if value is not None:
                values[documented_name(field) or field_name] = value
        return values


class NamedSecrets(SecretsSettingsSource):
    """Secret files named like the documented variables, in any case (``ANDROID_TOKEN``,
    ``android_token``). An empty file counts as unset, so a placeholder Docker secret does
    not override the Hermes home's ``.env``. A field marked ``secret_file`` (the FCM
    key) gets the file's path: the key is used where Docker or systemd put it."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        name = documented_name(field)
        if name is None:
            return None, field_name, False
        for directory in reversed(self.secrets_paths):
            path = self.find_case_path(directory, name, case_sensitive=False)
            if path is None or not path.is_file():
                continue
            if is_secret_file(field):
                return (str(path) if path.stat().st_size else None), name, False
            value = path.read_text(encoding="utf-8").strip()
            return (value or None), name, False
        return None, name, False


class HdgSettings(BaseSettings):
    """The base of every settings model: documented names only, from the environment, then
    from secret files; the subclass says whether keyword values rank above the environment
    (tests, embedded workers) or below it (config.yaml ``extra``, as Hermes has it)."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, populate_by_name=True)
    environment_over_init: ClassVar[bool] = False

    secrets_dir: Path | None = Field(
        default=None,
        validation_alias=SECRETS_DIR_ENV,
        json_schema_extra={"extra_keys": ["secrets_dir"]},
        description=(
            "Directory of secret files named like the variables (`ANDROID_TOKEN`, "
            "`ANDROID_ADMIN_TOKEN`, `ANDROID_FCM_SERVICE_ACCOUNT` ...). Unset: "
            "`/run/secrets` if it exists, then systemd's `$CREDENTIALS_DIRECTORY`. "
            "A variable set in the environment wins over its file."
        ),
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
        configured = getattr(init_settings, "init_kwargs", {}).get("secrets_dir")
        directories = secrets_dirs(current_environ(), configured)
        secrets = NamedSecrets(settings_cls, secrets_dir=directories or None)
        environment = NamedEnvironment(settings_cls)
        if cls.environment_over_init:
            return (environment, init_settings, secrets)
        return (init_settings, environment, secrets)

    @field_validator("secrets_dir")
    @classmethod
    def _existing_directory(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_dir():
            raise ValueError(f"no such directory: {value}")
        return value


__all__ = [
    "HdgSettings",
    "NamedEnvironment",
    "NamedSecrets",
    "current_environ",
    "documented_name",
    "reading_environ",
    "secrets_dirs",
]
