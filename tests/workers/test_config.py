"""workers.config: settings from the environment, one clear error per bad setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from canonical.redis_timeouts import RedisTimeouts
from workers.config import load_config
from workers.errors import ConfigError


def test_defaults_need_no_environment() -> None:
    config = load_config()
    assert config.bus_url == "redis://127.0.0.1:6379/0"
    assert config.ntfy_server_url == "https://ntfy.sh"
    assert config.fcm_api_base == "https://fcm.googleapis.com"
    assert config.media_retention_days == 7
    assert config.deep_link_scheme == "hermes-device"


def test_settings_are_read_from_the_gateways_variable_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service_account_file: Path
) -> None:
    env = {
        "ANDROID_BUS_URL": "redis://10.0.0.5:6380/2",
        "ANDROID_PUSH_BACKEND": "ntfy",
        "ANDROID_FCM_SERVICE_ACCOUNT": str(service_account_file),
        "ANDROID_FCM_API_BASE": "http://127.0.0.1:9999/",
        "NTFY_SERVER_URL": "https://ntfy.example.org",
        "NTFY_TOPIC": "hermes",
        "NTFY_TOKEN": "tk_abc",
        "HDG_MEDIA_ROOT": str(tmp_path),
        "HDG_MEDIA_RETENTION_DAYS": "2.5",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = load_config()
    assert config.bus_url == "redis://10.0.0.5:6380/2"
    assert config.push_backend == "ntfy"
    assert config.fcm_service_account == service_account_file
    assert config.fcm_api_base == "http://127.0.0.1:9999"
    assert config.ntfy_topic == "hermes"
    assert config.ntfy_authorization() == "Bearer tk_abc"
    assert config.media_root == tmp_path
    assert config.media_retention_days == 2.5


def test_keyword_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NTFY_TOPIC", "from-env")
    assert load_config(ntfy_topic="from-code").ntfy_topic == "from-code"


def test_the_legacy_fcm_server_key_is_refused_with_directions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANDROID_FCM_SERVER_KEY", "AAAA1234:legacy")
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert raised.value.setting == "ANDROID_FCM_SERVER_KEY"
    assert "shut down by Google" in str(raised.value)
    assert "ANDROID_FCM_SERVICE_ACCOUNT" in str(raised.value)


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("ANDROID_BUS_URL", "http://localhost:6379", "redis://"),
        ("ANDROID_PUSH_BACKEND", "apns", "fcm"),
        ("ANDROID_FCM_SERVICE_ACCOUNT", "/nonexistent/sa.json", "no such file"),
        ("NTFY_SERVER_URL", "ntfy.sh", "http"),
        ("HDG_MEDIA_RETENTION_DAYS", "-1", "greater than 0"),
        ("HDG_MEDIA_ROOT", "relative/media", "absolute"),
        ("HDG_DEEP_LINK_SCHEME", "Bad Scheme!", "URI scheme"),
        ("HDG_PUSH_MAX_TRIES", "many", "integer"),
        ("ANDROID_REDIS_COMMAND_TIMEOUT_S", "0", "greater than 0"),
        ("ANDROID_REDIS_HEALTH_CHECK_S", "inf", "finite"),
    ],
)
def test_a_bad_setting_fails_with_one_message_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert raised.value.setting == name
    assert str(raised.value).startswith(f"{name}: ")
    assert needle in str(raised.value)


def test_a_bad_keyword_override_is_reported_under_its_environment_name() -> None:
    with pytest.raises(ConfigError, match="^HDG_MEDIA_RETENTION_DAYS: "):
        load_config(media_retention_days=0)


def test_ntfy_user_and_password_make_basic_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NTFY_USER", "phil")
    monkeypatch.setenv("NTFY_PASSWORD", "mypass")
    assert load_config().ntfy_authorization() == "Basic cGhpbDpteXBhc3M="


def test_ntfy_token_and_user_together_are_ambiguous() -> None:
    with pytest.raises(ConfigError, match="^NTFY_TOKEN: set either"):
        load_config(ntfy_token="tk", ntfy_user="phil")


def test_an_ntfy_password_without_a_user_is_refused() -> None:
    with pytest.raises(ConfigError, match="^NTFY_USER: "):
        load_config(ntfy_password="secret")


def test_blank_optional_settings_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANDROID_FCM_SERVER_KEY", "")
    monkeypatch.setenv("NTFY_TOKEN", " ")
    config = load_config()
    assert config.fcm_server_key is None
    assert config.ntfy_authorization() is None


def test_generic_environment_names_do_not_configure_the_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BUS_URL", "redis://elsewhere:1/0")
    monkeypatch.setenv("MEDIA_ROOT", "/tmp/not-ours")
    config = load_config()
    assert config.bus_url != "redis://elsewhere:1/0"
    assert config.media_root is None or str(config.media_root) != "/tmp/not-ours"


def test_redis_timeouts_use_the_gateways_names_and_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_config().redis_timeouts() == RedisTimeouts()
    monkeypatch.setenv("ANDROID_REDIS_CONNECT_TIMEOUT_S", "1")
    monkeypatch.setenv("ANDROID_REDIS_COMMAND_TIMEOUT_S", "2.5")
    monkeypatch.setenv("ANDROID_REDIS_HEALTH_CHECK_S", "30")
    assert load_config().redis_timeouts() == RedisTimeouts(
        connect_s=1.0, command_s=2.5, health_check_s=30.0
    )


def test_a_sentinel_bus_url_gives_arq_sentinel_settings_and_a_sentinel_pool() -> None:
    from redis.asyncio.sentinel import SentinelConnectionPool

    from workers.redis_pool import open_arq_pool
    from workers.settings import redis_settings

    url = "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/hdg/3"
    config = load_config(bus_url=url)
    settings = redis_settings(config)
    assert settings.sentinel and settings.sentinel_master == "hdg"
    assert settings.host == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert (settings.database, settings.password) == (3, "pw")
    pool = open_arq_pool(url, config.redis_timeouts())
    assert isinstance(pool.connection_pool, SentinelConnectionPool)
    assert pool.connection_pool.service_name == "hdg"


def test_a_malformed_sentinel_bus_url_fails_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="^ANDROID_BUS_URL: .*service name"):
        load_config(bus_url="redis+sentinel://10.0.0.1:26379")
