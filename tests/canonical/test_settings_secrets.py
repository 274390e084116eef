"""Secret files (Docker secrets, systemd credentials): a real directory of files named like
the variables configures both settings models; the environment wins over a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canonical.errors import SettingsError
from canonical.settings import load_settings
from canonical.settings_base import secrets_dirs
from workers.config import load_config

TOKEN = "token-from-a-secret-file-" + "t" * 20
ADMIN = "admin-from-a-secret-file-" + "a" * 20


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANDROID_TOKEN",
        "ANDROID_ADMIN_TOKEN",
        "ANDROID_FCM_SERVICE_ACCOUNT",
        "ANDROID_SECRETS_DIR",
        "CREDENTIALS_DIRECTORY",
        "NTFY_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "ANDROID_TOKEN").write_text(TOKEN + "\n", encoding="utf-8")
    (directory / "android_admin_token").write_text(ADMIN, encoding="utf-8")
    key = {"project_id": "p", "client_email": "e@p", "private_key": "k"}
    (directory / "ANDROID_FCM_SERVICE_ACCOUNT").write_text(json.dumps(key), encoding="utf-8")
    monkeypatch.setenv("ANDROID_SECRETS_DIR", str(directory))
    return directory


def test_the_gateway_settings_carry_the_tokens_of_the_secret_files(secrets: Path) -> None:
    settings = load_settings()
    assert settings.token_value() == TOKEN
    assert settings.admin_token_value() == ADMIN
    assert settings.secrets_dir == secrets


def test_the_fcm_key_secret_is_used_where_it_lies(secrets: Path) -> None:
    path = secrets / "ANDROID_FCM_SERVICE_ACCOUNT"
    assert load_settings().fcm_service_account == path
    assert load_config().fcm_service_account == path


def test_the_worker_reads_its_secrets_from_the_same_directory(
    secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (secrets / "NTFY_TOKEN").write_text("tk_from_a_file\n", encoding="utf-8")
    assert load_config().ntfy_authorization() == "Bearer tk_from_a_file"


def test_the_environment_wins_over_a_secret_file(
    secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_TOKEN", "token-from-the-environment-" + "e" * 20)
    assert load_settings().token_value() == "token-from-the-environment-" + "e" * 20


def test_config_yaml_extra_wins_over_a_secret_file(secrets: Path) -> None:
    assert load_settings({"token": "token-from-config-yaml-" + "c" * 20}).token_value() == (
        "token-from-config-yaml-" + "c" * 20
    )


def test_an_empty_secret_file_counts_as_unset(secrets: Path) -> None:
    (secrets / "ANDROID_TOKEN").write_text("\n", encoding="utf-8")
    (secrets / "ANDROID_FCM_SERVICE_ACCOUNT").write_text("", encoding="utf-8")
    settings = load_settings()
    assert settings.token is None
    assert settings.fcm_service_account is None


def test_a_file_named_after_a_field_rather_than_its_variable_is_ignored(
    secrets: Path,
) -> None:
    (secrets / "ANDROID_TOKEN").unlink()
    (secrets / "token").write_text(TOKEN, encoding="utf-8")
    assert load_settings().token is None


def test_a_secrets_directory_that_does_not_exist_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_SECRETS_DIR", str(tmp_path / "missing"))
    with pytest.raises(SettingsError) as excinfo:
        load_settings()
    assert str(excinfo.value).startswith("ANDROID_SECRETS_DIR: ")


def test_systemd_credentials_are_read_when_the_service_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ANDROID_TOKEN").write_text(TOKEN, encoding="utf-8")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert load_settings().token_value() == TOKEN


def test_an_explicit_directory_replaces_the_default_ones(tmp_path: Path) -> None:
    explicit, credentials = tmp_path / "a", tmp_path / "b"
    explicit.mkdir()
    credentials.mkdir()
    environ = {"ANDROID_SECRETS_DIR": str(explicit), "CREDENTIALS_DIRECTORY": str(credentials)}
    assert secrets_dirs(environ) == [explicit]
    assert secrets_dirs({"CREDENTIALS_DIRECTORY": str(credentials)})[-1] == credentials
    assert secrets_dirs({"CREDENTIALS_DIRECTORY": str(tmp_path / "gone")}) == [
        d for d in secrets_dirs({}) if d != tmp_path / "gone"
    ]
