"""Profiles stay apart: Hermes' scoped locks keep two gateways off one token or port, and
the token is read from the profile's own `.env` first."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import HermesGateway, free_port, http_ok


def _platform_error(gateway: HermesGateway) -> str | None:
    state = gateway.platform_state("android") or {}
    return state.get("error_code")


async def test_a_second_gateway_with_the_same_token_is_refused_by_the_scoped_lock(
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
    tmp_path: Path,
) -> None:
    token = secrets.token_urlsafe(24)
    locks = str(tmp_path / "locks")
    first_port, second_port = free_port(), free_port()
    first = gateway_factory(
        hermes_home_factory(),
        env={
            "ANDROID_TOKEN": token,
            "ANDROID_WS_PORT": str(first_port),
            "HERMES_GATEWAY_LOCK_DIR": locks,
        },
        ready=lambda: http_ok(f"http://127.0.0.1:{first_port}/healthz"),
    )
    second = gateway_factory(
        hermes_home_factory(),
        env={
            "ANDROID_TOKEN": token,
            "ANDROID_WS_PORT": str(second_port),
            "HERMES_GATEWAY_LOCK_DIR": locks,
        },
        wait=False,
    )
    second.wait_ready(lambda: _platform_error(second) is not None, timeout=60)
    assert _platform_error(second) == "lock_held"
    assert "already serves this pairing token" in str(
        (second.platform_state("android") or {}).get("error_message")
    )
    assert not http_ok(f"http://127.0.0.1:{second_port}/healthz")
    assert first.running


async def test_the_token_comes_from_the_profiles_own_env_file(
    hermes_home_factory: Callable[..., HermesHome], gateway_factory: Callable[..., HermesGateway]
) -> None:
    profile_token = secrets.token_urlsafe(24)
    process_token = secrets.token_urlsafe(24)
    port = free_port()
    home = hermes_home_factory(secrets={"ANDROID_TOKEN": profile_token})
    gateway_factory(
        home,
        env={"ANDROID_TOKEN": process_token, "ANDROID_WS_PORT": str(port)},
        ready=lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
    )
    for token, expected in ((process_token, "error"), (profile_token, "ready")):
        client = await DeviceClient(f"ws://127.0.0.1:{port}/ws").connect()
        reply = await client.hello_pheby(token)
        assert reply["type"] == expected
        await client.close()
