"""canonical.settings: env > config.yaml ``extra`` > defaults, and one clear error per bad setting."""

from __future__ import annotations

import pytest

from canonical.errors import SettingsError
from canonical.redis_timeouts import RedisTimeouts
from canonical.settings import GatewaySettings, load_settings, require_token

# Every environment variable a setting reads (first alias of each field), plus the
# generic names its other aliases would also pick up from the environment.
_ENV_NAMES = sorted(
    {
        alias
        for field in GatewaySettings.model_fields.values()
        for alias in getattr(field.validation_alias, "choices", ())
        if isinstance(alias, str)
    }
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_defaults_listen_on_loopback_port_8790_with_the_default_home_channel() -> None:
    settings = load_settings()
    assert settings.ws_host == "127.0.0.1"
    assert settings.ws_port == 8790
    assert settings.home_channel == "android:default"
    assert settings.bus_url == "memory://"
    assert settings.embedded is True
    assert settings.token is None
    assert settings.token_value() is None
    assert settings.send_queue_frames == 1024
    assert settings.allowed_user_ids == frozenset()


def test_config_yaml_extra_sets_values_under_its_short_keys() -> None:
    settings = load_settings(
        {"host": "0.0.0.0", "port": 9000, "home_channel": "android:home", "token": "t" * 20}
    )
    assert settings.ws_host == "0.0.0.0"
    assert settings.ws_port == 9000
    assert settings.home_channel == "android:home"
    assert settings.token_value() == "t" * 20


def test_none_values_in_extra_fall_back_to_the_defaults() -> None:
    settings = load_settings({"port": None, "host": None})
    assert settings.ws_port == 8790
    assert settings.ws_host == "127.0.0.1"


def test_environment_variables_override_config_yaml_extra(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("ANDROID_WS_PORT", "9100")
    clean_env.setenv("ANDROID_WS_HOST", "10.0.0.1")
    clean_env.setenv("ANDROID_HOME_CHANNEL", "android:env")
    settings = load_settings({"port": 9000, "host": "0.0.0.0", "home_channel": "android:yaml"})
    assert settings.ws_port == 9100
    assert settings.ws_host == "10.0.0.1"
    assert settings.home_channel == "android:env"


def test_environment_variable_names_are_case_insensitive(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("android_ws_port", "9200")
    assert load_settings().ws_port == 9200


def test_keyword_overrides_apply_on_top_of_extra() -> None:
    assert load_settings({"port": 9000}, port=9001).ws_port == 9001


def test_a_redis_bus_url_is_not_embedded(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ANDROID_BUS_URL", "redis://127.0.0.1:6379/0")
    settings = load_settings()
    assert settings.embedded is False
    assert settings.bus_url == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "memory://named",
        "rediss://h:1/0",
        "unix:///r.sock",
        "redis+sentinel://s1:26379,s2:26379/hdg/0",
    ],
)
def test_every_supported_bus_scheme_is_accepted(url: str) -> None:
    assert load_settings({"bus_url": url}).bus_url == url


def test_named_memory_buses_are_embedded() -> None:
    assert load_settings({"bus_url": "memory://named"}).embedded is True


def test_allowed_users_parse_into_a_set_of_trimmed_non_empty_ids(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("ANDROID_ALLOWED_USERS", " phone-1, tablet ,,phone-1, ")
    assert load_settings().allowed_user_ids == frozenset({"phone-1", "tablet"})


def test_allowed_origins_parse_like_allowed_users() -> None:
    settings = load_settings({"allowed_origins": "https://a.example, ,https://b.example"})
    assert settings.origin_allowlist == frozenset({"https://a.example", "https://b.example"})


def test_the_home_channel_is_trimmed() -> None:
    assert load_settings({"home_channel": "  android:x  "}).home_channel == "android:x"


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("ANDROID_WS_PORT", "abc"),
        ("ANDROID_WS_PORT", "70000"),
        ("ANDROID_WS_PORT", "-1"),
        ("ANDROID_BUS_URL", "http://x"),
        ("ANDROID_HOME_CHANNEL", ""),
        ("ANDROID_HOME_CHANNEL", "   "),
        ("ANDROID_SEND_QUEUE", "4"),
        ("ANDROID_PUSH_BACKEND", "apns"),
        ("ANDROID_OUTBOX_RETENTION_HOURS", "0"),
        ("ANDROID_MAX_UPLOAD_BYTES", "0"),
        ("ANDROID_ALLOW_ALL_USERS", "maybe"),
        ("ANDROID_REDIS_CONNECT_TIMEOUT_S", "0"),
        ("ANDROID_REDIS_COMMAND_TIMEOUT_S", "-1"),
        ("ANDROID_REDIS_HEALTH_CHECK_S", "soon"),
        ("ANDROID_HTTP_HEADER_TIMEOUT_S", "0"),
        ("ANDROID_HTTP_BODY_IDLE_TIMEOUT_S", "inf"),
        ("ANDROID_MAX_UNAUTHENTICATED_PER_ADDRESS", "0"),
    ],
)
def test_a_wrong_environment_setting_raises_settings_error_naming_the_variable(
    clean_env: pytest.MonkeyPatch, env: str, value: str
) -> None:
    clean_env.setenv(env, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert caught.value.setting == env
    assert str(caught.value).startswith(f"{env}: ")
    assert caught.value.problem


def test_a_malformed_sentinel_url_is_refused_saying_why() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"bus_url": "redis+sentinel://s1:26379"})
    assert caught.value.setting == "ANDROID_BUS_URL"
    assert "service name" in caught.value.problem


def test_a_wrong_bus_url_from_extra_is_reported_under_its_environment_name() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"bus_url": "http://x"})
    assert caught.value.setting == "ANDROID_BUS_URL"
    assert "memory://" in caught.value.problem


def test_an_empty_home_channel_from_extra_is_reported_under_its_environment_name() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"home_channel": ""})
    assert caught.value.setting == "ANDROID_HOME_CHANNEL"


@pytest.mark.parametrize("half", [{"ws_cert": "/etc/hdg/cert.pem"}, {"ws_key": "/etc/hdg/key.pem"}])
def test_a_tls_certificate_without_its_key_or_a_key_alone_is_a_bad_setting(
    half: dict[str, str],
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(half)
    assert caught.value.setting == "ANDROID_WS_KEY"
    assert "set both or neither" in str(caught.value)


def test_a_tls_certificate_with_its_key_is_accepted() -> None:
    settings = load_settings({"ws_cert": "/etc/hdg/cert.pem", "ws_key": "/etc/hdg/key.pem"})
    assert (str(settings.ws_cert), str(settings.ws_key)) == (
        "/etc/hdg/cert.pem",
        "/etc/hdg/key.pem",
    )


def test_a_settings_error_is_a_contract_error_with_one_line() -> None:
    from canonical.errors import ContractError

    with pytest.raises(ContractError) as caught:
        load_settings({"bus_url": "ftp://x"})
    assert "\n" not in str(caught.value)


def test_require_token_returns_a_long_enough_token(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ANDROID_TOKEN", "x" * 16)
    assert require_token(load_settings()) == "x" * 16


def test_require_token_refuses_a_missing_token() -> None:
    with pytest.raises(SettingsError) as caught:
        require_token(load_settings())
    assert caught.value.setting == "ANDROID_TOKEN"
    assert "not set" in caught.value.problem


def test_require_token_refuses_an_empty_token(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ANDROID_TOKEN", "")
    with pytest.raises(SettingsError) as caught:
        require_token(load_settings())
    assert caught.value.setting == "ANDROID_TOKEN"


def test_require_token_refuses_a_token_shorter_than_16_characters(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("ANDROID_TOKEN", "x" * 15)
    with pytest.raises(SettingsError) as caught:
        require_token(load_settings())
    assert caught.value.setting == "ANDROID_TOKEN"
    assert "too short" in caught.value.problem


def test_the_token_is_secret_in_the_settings_repr(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ANDROID_TOKEN", "super-secret-token-value")
    settings = load_settings()
    assert "super-secret-token-value" not in repr(settings)
    assert "super-secret-token-value" not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("generic", "value", "field"),
    [
        ("PORT", "1234", "ws_port"),
        ("HOST", "0.0.0.0", "ws_host"),
        ("TOKEN", "someone-elses-api-token", "token"),
        ("TENANT", "other", "tenant"),
    ],
)
def test_generic_environment_variables_do_not_configure_the_gateway(
    clean_env: pytest.MonkeyPatch, generic: str, value: str, field: str
) -> None:
    # Only ANDROID_* (and NTFY_*) variables are the gateway's; PORT/HOST/TOKEN are set by
    # PaaS platforms, shells and other tools and must not silently reconfigure it.
    clean_env.setenv(generic, value)
    settings = load_settings()
    assert getattr(settings, field) == GatewaySettings.model_fields[field].default


def test_redis_waits_are_bounded_by_default(clean_env: pytest.MonkeyPatch) -> None:
    assert load_settings().redis_timeouts() == RedisTimeouts(
        connect_s=2.0, command_s=5.0, health_check_s=15.0
    )


def test_redis_timeouts_are_read_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ANDROID_REDIS_CONNECT_TIMEOUT_S", "0.5")
    clean_env.setenv("ANDROID_REDIS_COMMAND_TIMEOUT_S", "3")
    clean_env.setenv("ANDROID_REDIS_HEALTH_CHECK_S", "20")
    assert load_settings().redis_timeouts() == RedisTimeouts(
        connect_s=0.5, command_s=3.0, health_check_s=20.0
    )


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0"])
def test_a_redis_timeout_that_is_not_a_finite_positive_number_is_refused_naming_it(
    clean_env: pytest.MonkeyPatch, value: str
) -> None:
    clean_env.setenv("ANDROID_REDIS_HEALTH_CHECK_S", value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert raised.value.setting == "ANDROID_REDIS_HEALTH_CHECK_S"


def test_the_limits_on_slow_and_unauthenticated_sockets_are_read_from_the_environment(
    clean_env: pytest.MonkeyPatch,
) -> None:
    defaults = load_settings()
    assert (
        defaults.http_header_timeout_s,
        defaults.http_body_idle_timeout_s,
        defaults.max_unauthenticated_per_address,
    ) == (10.0, 30.0, 64)
    clean_env.setenv("ANDROID_HTTP_HEADER_TIMEOUT_S", "0.5")
    clean_env.setenv("ANDROID_HTTP_BODY_IDLE_TIMEOUT_S", "2")
    clean_env.setenv("ANDROID_MAX_UNAUTHENTICATED_PER_ADDRESS", "3")
    settings = load_settings()
    assert settings.http_header_timeout_s == 0.5
    assert settings.http_body_idle_timeout_s == 2.0
    assert settings.max_unauthenticated_per_address == 3
