"""Secrets on the wire: a gateway whose tokens exist only as secret files admits devices and
operators with them, and a rotation by an admin frame survives a restart without the
process environment ever holding it."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from canonical.envfile import read_env_file
from edge.errors import CLOSE_UNAUTHORIZED
from gateway_plugin.access.admin import load_admin_token
from hdgctl.ops import devices_list, resolve_target
from tests.e2e.conftest import Deployment, platform_connected
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import HermesGateway, free_port, http_ok


async def test_a_token_only_in_a_secrets_directory_admits_devices_and_the_operator(
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token, admin_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    directory = tmp_path / "run-secrets"
    directory.mkdir()
    (directory / "ANDROID_TOKEN").write_text(token + "\n", encoding="utf-8")
    (directory / "android_admin_token").write_text(admin_token, encoding="utf-8")
    port = free_port()
    home = hermes_home_factory()
    assert "ANDROID_TOKEN" not in read_env_file(home.env_path)
    gateway_factory(
        home,
        env={"ANDROID_SECRETS_DIR": str(directory), "ANDROID_WS_PORT": str(port)},
        ready=lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
    )
    url = f"ws://127.0.0.1:{port}/ws"
    phone = await DeviceClient(url).connect()
    try:
        assert (await phone.hello_iris(token, "phone-1"))["type"] == "hello.ack"
        # hdgctl finds both tokens in the same directory, as the gateway did
        monkeypatch.setenv("ANDROID_SECRETS_DIR", str(directory))
        monkeypatch.delenv("ANDROID_TOKEN", raising=False)
        monkeypatch.delenv("ANDROID_ADMIN_TOKEN", raising=False)
        target = resolve_target(home.path, url)
        assert (target.token, target.admin_token) == (token, admin_token)
        listed = await devices_list(target)
        assert "phone-1" in {device["device_id"] for device in listed}
    finally:
        await phone.close()
    stranger = await DeviceClient(url).connect()
    try:
        refused = await stranger.hello_iris("not-" + token, "phone-2")
        assert refused["error"]["code"] == "unauthorized"
    finally:
        await stranger.close()


async def test_a_rotation_by_an_admin_frame_is_kept_in_the_homes_env_across_a_restart(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    admin_token = load_admin_token(deployment.home.path / "android")
    assert admin_token is not None
    operator = await deployment.iris("ops-laptop")
    new = secrets.token_urlsafe(32)
    reply = await operator.request(
        {"type": "admin.token.rotate", "token": new, "admin_token": admin_token}
    )
    assert reply["type"] == "admin.result", reply
    assert await operator.wait_closed(15) == CLOSE_UNAUTHORIZED
    assert read_env_file(deployment.home.env_path)["ANDROID_TOKEN"] == new
    # the gateway's environment still says the old token: the home's .env wins, as in Hermes
    assert deployment.gateway.env()["ANDROID_TOKEN"] == deployment.token
    deployment.gateway.restart(platform_connected(deployment.gateway))
    fresh = await deployment.client()
    assert (await fresh.hello_iris(new, "phone-after-restart"))["type"] == "hello.ack"
    stale = await deployment.client()
    assert (await stale.hello_iris(deployment.token, "phone-old"))["error"]["code"] == (
        "unauthorized"
    )
    await deployment.close_clients()
