"""Operating a running gateway: devices, revocation, token rotation, logs, metrics, lifecycle.

Everything runs against real `hermes gateway run` processes (embedded edge or edge
processes on Redis) and the real `hdgctl` CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from canonical.model import Json
from canonical.pairing import parse_pairing
from edge.errors import CLOSE_GOING_AWAY, CLOSE_REVOKED, CLOSE_UNAUTHORIZED
from gateway_plugin.hermes.setup_flow import home_pairing
from hdgctl.ops import devices_list, devices_revoke, resolve_target, token_rotate
from tests.e2e.conftest import Deployment
from tests.e2e.flows import iris_send
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import (
    HermesGateway,
    RedisServer,
    free_port,
    http_get,
    scrubbed_environ,
)

REPO = Path(__file__).resolve().parents[2]
HDGCTL = [sys.executable, "-m", "hdgctl"]


def hdgctl(deployment: Deployment, *args: str, edge: int = 0) -> subprocess.CompletedProcess[str]:
    """The real CLI, pointed at the deployment's home (token and port as in the gateway's env)."""
    port = deployment.ws_urls[edge].rsplit(":", 1)[1]
    env = scrubbed_environ(
        {
            **deployment.home.process_env(),
            "ANDROID_TOKEN": deployment.token,
            "ANDROID_WS_PORT": port,
        }
    )
    return subprocess.run(
        [*HDGCTL, *args, "--home", str(deployment.home.path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _still_open(client: DeviceClient) -> bool:
    pong = await client.request({"type": "ping"}, timeout=10)
    return pong.get("type") == "pong"


async def _closed_with(client: DeviceClient) -> int | None:
    return await client.wait_closed(15)


# -- devices and admin access ---------------------------------------------------------------


async def test_hdgctl_devices_list_shows_every_device_that_said_hello_and_who_is_online(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone-1")
    tablet = await deployment.iris("tablet-1")
    await tablet.close()
    done = await asyncio.to_thread(hdgctl, deployment, "devices", "list", "--json")
    assert done.returncode == 0, done.stderr
    devices = {d["device_id"]: d for d in json.loads(done.stdout)}
    assert devices["phone-1"]["online"] is True
    assert devices["phone-1"]["revoked"] is False
    assert devices["tablet-1"]["online"] is False
    assert any(name.startswith("hdgctl-") for name in devices)
    table = await asyncio.to_thread(hdgctl, deployment, "devices", "list")
    assert "phone-1" in table.stdout and "DEVICE" in table.stdout
    assert await _still_open(phone)
    await deployment.close_clients()


async def test_a_normal_device_gets_unauthorized_for_admin_frames_and_stays_connected(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone-1")
    for frame in (
        {"type": "admin.devices.list"},
        {"type": "admin.devices.revoke", "device_id": "phone-1"},
        {"type": "admin.token.rotate", "token": "z" * 43},
        {"type": "admin.devices.list", "admin_token": deployment.token},
    ):
        reply = await phone.request(frame)
        assert reply["type"] == "error" and reply["error"]["code"] == "unauthorized", reply
    assert await _still_open(phone)
    await deployment.close_clients()


async def test_revoking_a_device_closes_its_sockets_on_both_edges_and_no_other(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=2)
    phone_a = await deployment.iris("phone", edge=0)
    phone_b = await deployment.iris("phone", edge=1)
    tablet_a = await deployment.iris("tablet", edge=0)
    tablet_b = await deployment.iris("tablet", edge=1)
    target = resolve_target(
        deployment.home.path, deployment.ws_urls[1] + "/ws", token=deployment.token
    )
    device = await devices_revoke(target, "phone")
    assert device["revoked"] is True
    assert await _closed_with(phone_a) == CLOSE_REVOKED
    assert await _closed_with(phone_b) == CLOSE_REVOKED
    assert await _still_open(tablet_a) and await _still_open(tablet_b)
    again = await deployment.client(edge=0)
    refused = await again.hello_iris(deployment.token, "phone")
    assert refused["type"] == "error" and refused["error"]["code"] == "unauthorized"
    assert await _closed_with(again) == CLOSE_REVOKED
    await deployment.close_clients()


async def test_hdgctl_token_rotate_closes_old_token_sockets_and_the_new_token_works(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone-1")
    pheby = await deployment.pheby()
    done = await asyncio.to_thread(hdgctl, deployment, "token", "rotate")
    assert done.returncode == 0, done.stderr
    assert await _closed_with(phone) == CLOSE_UNAUTHORIZED
    assert await _closed_with(pheby) == CLOSE_UNAUTHORIZED
    env = dict(
        line.split("=", 1)
        for line in (deployment.home.path / ".env").read_text(encoding="utf-8").splitlines()
        if "=" in line
    )
    new = env["ANDROID_TOKEN"]
    assert new != deployment.token and len(new) >= 32
    assert new not in done.stdout + done.stderr
    fresh = await deployment.client()
    assert (await fresh.hello_iris(new, "phone-1"))["type"] == "hello.ack"
    stale = await deployment.client()
    refused = await stale.hello_iris(deployment.token, "phone-2")
    assert refused["error"]["code"] == "unauthorized"
    await deployment.close_clients()


async def test_hdgctl_uses_the_homes_token_over_a_stale_one_in_the_shell_as_hermes_does(
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
) -> None:
    # Hermes loads the home's .env over the shell's variables: the gateway runs with the
    # .env token even when the shell that started it exports another one.
    token, stale = "home-token-" + "h" * 30, "stale-shell-token-" + "s" * 30
    port = free_port()
    home = hermes_home_factory(secrets={"ANDROID_TOKEN": token})
    home.update_config({"gateway": {"platforms": {"android": {"extra": {"port": port}}}}})
    gateway_factory(home, env={"ANDROID_TOKEN": stale})
    shell = scrubbed_environ({**home.process_env(), "ANDROID_TOKEN": stale})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*HDGCTL, *args, "--home", str(home.path)],
            env=shell,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = await asyncio.to_thread(cli, "devices", "list")
    assert listed.returncode == 0, listed.stderr
    paired = await asyncio.to_thread(cli, "pair", "--quiet")
    uri = next(line for line in paired.stdout.splitlines() if line.startswith("pairing URI:"))
    assert parse_pairing(uri.split()[-1]).token == token
    phone = await DeviceClient(f"ws://127.0.0.1:{port}/ws").connect()
    try:
        assert (await phone.hello_iris(token, "phone-1"))["type"] == "hello.ack"
    finally:
        await phone.close()


async def test_on_an_ipv6_only_listener_the_code_chat_and_admin_commands_connect(
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
) -> None:
    token, port = "ipv6-token-" + "v" * 30, free_port()
    home = hermes_home_factory(
        secrets={"ANDROID_TOKEN": token}, android_extra={"host": "::", "port": port}
    )
    gateway_factory(home)
    shown = home_pairing(home.path)
    phone = await DeviceClient(shown.ws_url()).connect()
    try:
        assert (await phone.hello_iris(token, "v6-phone"))["type"] == "hello.ack"
    finally:
        await phone.close()
    target = resolve_target(home.path)
    assert target.url == f"ws://[::1]:{port}/ws"
    assert "v6-phone" in {d["device_id"] for d in await devices_list(target)}
    chat = await asyncio.to_thread(
        subprocess.run,
        [*HDGCTL, "chat", "--home", str(home.path), "--once", "hi"],
        env=scrubbed_environ(home.process_env()),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert chat.returncode == 0, chat.stderr
    assert "(run completed)" in chat.stdout


async def test_a_rotation_in_scaled_mode_closes_sockets_on_every_edge(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=2)
    on_edge = [await deployment.iris("phone", edge=0), await deployment.iris("tablet", edge=1)]
    new = "rotated-in-scaled-mode-" + "s" * 24
    target = resolve_target(
        deployment.home.path, deployment.ws_urls[0] + "/ws", token=deployment.token
    )
    await token_rotate(target, new)
    for client in on_edge:
        assert await _closed_with(client) == CLOSE_UNAUTHORIZED
    for edge in (0, 1):
        client = await deployment.client(edge)
        assert (await client.hello_iris(new, f"after-{edge}"))["type"] == "hello.ack"
    await deployment.close_clients()


# -- logs -----------------------------------------------------------------------------------


def _log_texts(gateway: HermesGateway, extra: list[str]) -> dict[str, str]:
    texts = {"gateway-run.log": gateway.log_text()}
    for path in sorted((Path(gateway.home.path) / "logs").glob("*.log*")):
        texts[path.name] = path.read_text(encoding="utf-8", errors="replace")
    for index, text in enumerate(extra):
        texts[f"edge-{index}.log"] = text
    return texts


async def _traffic(deployment: Deployment, edge: int = 0) -> None:
    wrong = await deployment.client(edge)
    refused = await wrong.hello_iris("not-the-token-" + deployment.token[:10], "intruder")
    assert refused["type"] == "error"
    phone = await deployment.iris("phone", edge=edge)
    ack = await iris_send(phone, "android:default", "hello from a log test")
    assert ack["type"] == "message.ack"
    await phone.wait_type("run.finished", timeout=90, run_id=ack["run_id"])


async def _assert_no_secret_in_logs(deployment: Deployment) -> None:
    await _traffic(deployment)
    # a rotation puts a second secret through the system
    new = "rotated-token-for-logs-" + "q" * 24
    target = resolve_target(
        deployment.home.path, deployment.ws_urls[0] + "/ws", token=deployment.token
    )
    await token_rotate(target, new)
    await asyncio.sleep(0.5)
    texts = _log_texts(deployment.gateway, [e.log_text() for e in deployment.edges])
    assert len("".join(texts.values())) > 1000, "the logs were written"
    for name, text in texts.items():
        for secret in (deployment.token, new, target.admin_token):
            assert secret not in text, f"{name} contains a secret"
    await deployment.close_clients()


async def test_no_token_reaches_the_gateway_logs_in_embedded_mode(
    embedded: Callable[..., Deployment],
) -> None:
    await _assert_no_secret_in_logs(embedded())


async def test_no_token_reaches_the_gateway_or_edge_logs_in_scaled_mode(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=1)
    await _assert_no_secret_in_logs(deployment)
    assert "hello refused" in deployment.edges[0].log_text()


# -- metrics and health ---------------------------------------------------------------------


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


async def test_the_embedded_edge_serves_edge_and_plugin_metrics(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    await _traffic(deployment)
    status, body = http_get(deployment.ws_urls[0].replace("ws://", "http://") + "/metrics")
    assert status == 200
    text = body.decode()
    assert 'hdg_edge_connections{dialect="iris"} 1.0' in text
    assert _metric(text, "hdg_edge_frames_in_total") >= 1
    assert _metric(text, "hdg_edge_frames_out_total") >= 5
    assert 'hdg_edge_hello_failures_total{code="unauthorized"} 1.0' in text
    assert _metric(text, "hdg_edge_replays_total") >= 1
    assert _metric(text, "hdg_plugin_outbox_head") >= 5
    assert 'hdg_plugin_commands_total{cmd="message.send"} 1.0' in text
    assert "hdg_plugin_devices{" in text
    await deployment.close_clients()


async def test_in_scaled_mode_the_plugin_serves_metrics_on_android_metrics_port(
    scaled: Callable[..., Deployment],
) -> None:
    port = free_port()
    deployment = scaled(edges=1, ANDROID_METRICS_PORT=str(port))
    await deployment.iris("phone")
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert 'hdg_plugin_devices{state="active"' in body.decode()
    edge_status, edge_body = http_get(deployment.edges[0].url + "/metrics")
    assert edge_status == 200
    assert 'hdg_edge_connections{dialect="iris"} 1.0' in edge_body.decode()
    await deployment.close_clients()


async def test_readyz_follows_the_bus_while_healthz_stays_up(
    scaled: Callable[..., Deployment], redis_factory: Callable[..., RedisServer]
) -> None:
    redis = redis_factory()
    deployment = scaled(edges=1, redis=redis)
    edge = deployment.edges[0]
    assert http_get(edge.url + "/readyz")[0] == 200
    redis.kill9()
    status, body = http_get(edge.url + "/readyz", timeout=10)
    assert status == 503 and json.loads(body)["bus"] is False
    assert http_get(edge.url + "/healthz")[0] == 200
    redis.restart()
    edge.process.wait_until(lambda: http_get(edge.url + "/readyz")[0] == 200, 20)


# -- lifecycle ------------------------------------------------------------------------------


async def test_sigterm_on_an_edge_closes_its_devices_with_1001(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=1)
    iris = await deployment.iris("phone")
    pheby = await deployment.pheby()
    deployment.edges[0].process.send_signal(signal.SIGTERM)
    assert await _closed_with(iris) == CLOSE_GOING_AWAY
    assert await _closed_with(pheby) == CLOSE_GOING_AWAY
    # uvicorn re-raises the signal once shut down: a clean exit *by* SIGTERM (systemd
    # and Docker count it as a clean stop).
    assert deployment.edges[0].process.wait(15) in (0, -signal.SIGTERM)
    await deployment.close_clients()


async def test_stopping_the_gateway_closes_embedded_devices_with_1001(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    deployment.gateway.process.send_signal(signal.SIGINT)
    assert await _closed_with(phone) == CLOSE_GOING_AWAY
    await deployment.close_clients()


async def test_stopping_the_gateway_mid_turn_keeps_its_shutdown_notice_out_of_the_reply(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    await phone.send(
        {
            "type": "message.send",
            "chat_id": "android:default",
            "text": "[verylong] a very long story",
            "client_id": "c-stop",
        }
    )
    ack = await phone.wait_type("message.ack", timeout=30)
    await phone.wait_type("message.update", timeout=60)
    deployment.gateway.process.send_signal(signal.SIGINT)
    assert await _closed_with(phone) == CLOSE_GOING_AWAY
    # Hermes warns the chat, interrupts the turn, and only then disconnects the platform.
    finished = [
        f for f in phone.frames if f["type"] == "run.finished" and f["run_id"] == ack["run_id"]
    ]
    assert len(finished) == 1, phone.frames
    messages = [f for f in phone.frames if f["type"] == "message" and f["role"] == "assistant"]
    reply = next(m for m in messages if m["kind"] == "reply" and m["run_id"] == ack["run_id"])
    assert "Gateway shutting down" not in reply["text"]
    updates = [f["text"] for f in phone.frames if f["type"] == "message.update"]
    assert not any("Gateway shutting down" in text for text in updates)
    notices = [m for m in messages if m["kind"] == "notice"]
    assert [n["text"] for n in notices] == [
        "⚠️ Gateway shutting down — Your current task will be interrupted."
    ]
    await deployment.close_clients()


async def test_a_busy_port_fails_the_platform_with_bind_failed(
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        gateway = gateway_factory(
            hermes_home_factory(),
            env={"ANDROID_TOKEN": "t" * 40, "ANDROID_WS_PORT": str(port)},
            wait=False,
        )
        gateway.wait_ready(
            lambda: (gateway_state(gateway) or {}).get("error_code") == "bind_failed", 60
        )
        state = gateway_state(gateway)
        assert state is not None
        assert f"127.0.0.1:{port}" in str(state.get("error_message"))
        assert "ANDROID_WS_PORT" in str(state.get("error_message"))


def gateway_state(gateway: HermesGateway) -> Json | None:
    return gateway.platform_state("android")


# -- Hermes' own view -----------------------------------------------------------------------

_PROBE = """
from gateway.config import load_gateway_config
for platform, cfg in load_gateway_config().platforms.items():
    if getattr(platform, "value", platform) == "android":
        home = cfg.home_channel
        print(cfg.enabled, cfg.extra.get("host"), cfg.extra.get("port"), home.chat_id, home.name)
"""


def test_hermes_config_loading_enables_android_with_its_extra_and_home_channel(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    setup = subprocess.run(
        [*HDGCTL, "setup", "--home", str(home), "--port", "8899", "--no-qr"],
        env=scrubbed_environ(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert setup.returncode == 0, setup.stderr
    token = next(
        line.split("=", 1)[1]
        for line in (home / ".env").read_text(encoding="utf-8").splitlines()
        if line.startswith("ANDROID_TOKEN=")
    )
    env = scrubbed_environ(
        {"HERMES_HOME": str(home), "HOME": str(tmp_path), "ANDROID_TOKEN": token}
    )
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout.split() == ["True", "127.0.0.1", "8899", "android:default", "Default"], (
        probe.stderr[-2000:]
    )
    assert os.stat(home / ".env").st_mode & 0o077 == 0
