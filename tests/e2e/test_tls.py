"""Transport security of the embedded edge: direct WSS with a certificate, and the browser
`Origin` allowlist."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import websockets

from hdgctl.ops import devices_list, resolve_target
from tests.e2e.conftest import Deployment
from tests.e2e.flows import iris_send
from tests.harness.certs import self_signed
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import HermesGateway, free_port, scrubbed_environ


def _https_ok(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1, context=context) as response:
            return int(response.status) == 200
    except OSError:
        return False


async def test_a_device_pairs_and_chats_over_wss_with_a_self_signed_certificate(
    tmp_path: Path,
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
) -> None:
    cert, key = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    port = free_port()
    token = "tls-test-token-" + "w" * 30
    home = hermes_home_factory()
    gateway_factory(
        home,
        env={
            "ANDROID_TOKEN": token,
            "ANDROID_WS_PORT": str(port),
            "ANDROID_WS_CERT": str(cert),
            "ANDROID_WS_KEY": str(key),
        },
        ready=lambda: _https_ok(f"https://127.0.0.1:{port}/healthz", trust),
    )
    client = await DeviceClient(f"wss://localhost:{port}/ws", ssl=trust).connect()
    try:
        ack = await client.hello_iris(token, "tls-phone")
        assert ack["type"] == "hello.ack"
        sent = await iris_send(client, "android:default", "hello over tls")
        assert sent["type"] == "message.ack"
        finished = await client.wait_type("run.finished", timeout=90, run_id=sent["run_id"])
        assert finished["status"] == "completed"
    finally:
        await client.close()

    # Plain ws:// to the TLS port gets no WebSocket.
    with pytest.raises((OSError, websockets.InvalidHandshake, websockets.InvalidMessage)):
        plain = await websockets.connect(f"ws://127.0.0.1:{port}/ws", open_timeout=5)
        await plain.close()

    # The operator CLI trusts the edge's own certificate (pinned) over loopback.
    home.update_config({"gateway": {"platforms": {"android": {"extra": {"port": port}}}}})
    home.set_secrets(ANDROID_TOKEN=token, ANDROID_WS_CERT=str(cert), ANDROID_WS_KEY=str(key))
    target = resolve_target(home.path)
    assert target.url == f"wss://127.0.0.1:{port}/ws"
    devices = await devices_list(target)
    assert "tls-phone" in {d["device_id"] for d in devices}

    # So does `hdgctl chat`, the README's terminal device.
    chat = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "hdgctl", "chat", "--home", str(home.path), "--once", "hi"],
        env=scrubbed_environ(home.process_env()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert chat.returncode == 0, chat.stderr
    assert f"connected to wss://127.0.0.1:{port}/ws" in chat.stdout
    assert "(run completed)" in chat.stdout


@pytest.fixture
def with_origins(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded(ANDROID_ALLOWED_ORIGINS="https://app.example.org,https://web.example.org")


async def test_a_browser_from_an_allowed_origin_connects(with_origins: Deployment) -> None:
    client = await DeviceClient(with_origins.ws_urls[0] + "/ws").connect(
        origin="https://web.example.org"
    )
    with_origins.clients.append(client)
    assert (await client.hello_iris(with_origins.token, "browser"))["type"] == "hello.ack"
    await with_origins.close_clients()


async def test_a_browser_from_another_origin_is_refused_before_hello(
    with_origins: Deployment,
) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        client = await websockets.connect(
            with_origins.ws_urls[0] + "/ws", origin="https://evil.example.com", open_timeout=5
        )
        await client.close()
    assert refused.value.response.status_code == 403


async def test_native_apps_without_an_origin_header_are_not_affected(
    with_origins: Deployment,
) -> None:
    client = await with_origins.client()
    assert (await client.hello_iris(with_origins.token, "native-app"))["type"] == "hello.ack"
    await with_origins.close_clients()
