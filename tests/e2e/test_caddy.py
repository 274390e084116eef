"""Behind the real proxy: Debian's Caddy running deploy/Caddyfile in front of two edges.

Devices connect through Caddy as they would in production; an edge dies under them and
they come back through Caddy to the other one and miss nothing; uploads and downloads pass
through it; and the address the lockout counts is the device's real one, whatever
X-Forwarded-For the device sends.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, iris_send
from tests.harness.caddy import CADDYFILE, CaddyProxy, caddy_binary
from tests.harness.device import DeviceClient
from tests.harness.processes import RedisServer

pytestmark = pytest.mark.timeout(240)
FORGER = "127.0.0.77"  # a device's own loopback address, so its lockout touches nobody else


@pytest.fixture
async def stack(
    scaled: Callable[..., Deployment],
    redis_factory: Callable[..., RedisServer],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Deployment, CaddyProxy]]:
    attachments = tmp_path_factory.mktemp("attachments")
    shared = {"ANDROID_ATTACHMENTS_DIR": str(attachments)}
    deployment = scaled(edges=2, redis=redis_factory(), edge_env=shared, **shared)
    proxy = CaddyProxy([f"127.0.0.1:{edge.port}" for edge in deployment.edges], tmp_path / "caddy")
    proxy.start()
    try:
        yield deployment, proxy
    finally:
        await deployment.close_clients()
        proxy.stop()


async def via_proxy(deployment: Deployment, proxy: CaddyProxy, **connect: object) -> DeviceClient:
    client = await DeviceClient(proxy.ws_url + "/ws").connect(**connect)
    deployment.clients.append(client)
    return client


async def iris_via_proxy(
    deployment: Deployment, proxy: CaddyProxy, device_id: str, cursor: int | None = None
) -> DeviceClient:
    client = await via_proxy(deployment, proxy)
    ack = await client.hello_iris(deployment.token, device_id, cursor=cursor)
    assert ack["type"] == "hello.ack", ack
    return client


def cursors(client: DeviceClient, start: int = 0) -> list[int]:
    return [f["cursor"] for f in client.frames[start:] if isinstance(f.get("cursor"), int)]


def lasting(client: DeviceClient) -> list[int]:
    """Cursors of the events a replay must carry: all but the intermediate texts of a
    message, which the outbox drops once the message is complete."""
    return [
        f["cursor"]
        for f in client.frames
        if isinstance(f.get("cursor"), int) and f.get("type") != "message.update"
    ]


def test_the_caddyfile_is_valid_in_both_upstream_modes() -> None:
    for mode in ("dynamic", "static"):
        env = {
            **os.environ,
            "HDG_UPSTREAM_MODE": mode,
            "HDG_UPSTREAMS": "127.0.0.1:8801 127.0.0.1:8802",
        }
        result = subprocess.run(
            [caddy_binary(), "validate", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"{mode}: {result.stderr[-2000:]}"


async def test_devices_behind_caddy_stream_a_turn_and_miss_nothing_when_their_edge_dies(
    stack: tuple[Deployment, CaddyProxy],
) -> None:
    deployment, proxy = stack
    # least_conn: four long-lived sockets land two on each edge.
    devices = [await iris_via_proxy(deployment, proxy, f"phone-{n}") for n in range(4)]
    ack = await iris_send(devices[0], "android:default", "[tool] through the proxy")
    assert ack["type"] == "message.ack", ack
    for device in devices:
        finished = await device.wait_type("run.finished", timeout=90, run_id=ack["run_id"])
        assert finished["status"] == "completed"

    victim = deployment.edges[0]
    victim.process.send_signal(signal.SIGKILL)
    assert victim.process.wait(10) is not None
    for device in devices:
        try:
            await device.wait_closed(timeout=10)
        except TimeoutError:
            pass
    dropped = [d for d in devices if d.closed_code is not None]
    stayed = [d for d in devices if d.closed_code is None]
    assert len(dropped) == 2 and len(stayed) == 2, "two devices per edge behind least_conn"

    # While the dropped devices are away, a turn runs and streams to the ones that stayed.
    marks = {id(d): len(d.frames) for d in stayed}
    away = await iris_send(stayed[0], "android:default", "[tool] while they were away")
    assert away["type"] == "message.ack", away
    for device in stayed:
        await device.wait_type("run.finished", timeout=90, run_id=away["run_id"])

    # They come back through Caddy (the dead edge is skipped) and catch up from their cursor.
    reference = stayed[0]
    for n, gone in enumerate(dropped):
        seen = cursors(gone)
        back = await iris_via_proxy(deployment, proxy, f"phone-back-{n}", cursor=gone.last_cursor)
        await back.wait_type("run.finished", timeout=60, run_id=away["run_id"])
        replayed = cursors(back)
        assert len(replayed) == len(set(replayed)), "nothing twice"
        assert min(replayed) > max(seen), "replay starts after the device's cursor"
        expected = [c for c in lasting(reference) if c > max(seen)]
        assert [c for c in lasting(back) if c <= max(expected)] == expected, "nothing missed"
    assert all(len(d.frames) > marks[id(d)] for d in stayed)


async def test_uploads_and_downloads_pass_through_caddy(
    stack: tuple[Deployment, CaddyProxy],
) -> None:
    deployment, proxy = stack
    device = await via_proxy(deployment, proxy)
    assert (await device.hello_pheby(deployment.token))["type"] == "ready"
    conversation_id = await default_conversation(device)
    body = os.urandom(300_000)
    headers = {"Authorization": f"Bearer {deployment.token}"}
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as http:
        uploaded = await http.post(
            "/attachments",
            params={"conversation_id": conversation_id, "filename": "noise.bin"},
            content=body,
            headers=headers,
        )
        assert uploaded.status_code == 201, uploaded.text
        descriptor = uploaded.json()["attachment"]
        assert descriptor["size"] == len(body)
        downloaded = await http.get(descriptor["download_path"], headers=headers)
        assert downloaded.status_code == 200
        assert downloaded.content == body
        # Operational endpoints stay private behind the proxy.
        assert (await http.get("/metrics")).status_code == 404


async def test_the_lockout_counts_the_real_address_not_a_forged_forwarded_for(
    stack: tuple[Deployment, CaddyProxy],
) -> None:
    deployment, proxy = stack

    async def forged(address: str) -> DeviceClient:
        return await via_proxy(
            deployment,
            proxy,
            local_addr=(FORGER, 0),
            additional_headers={"X-Forwarded-For": address},
        )

    for n in range(5):
        client = await forged(f"203.0.113.{n + 1}")
        await client.hello_pheby("not-the-secret-at-all")
        await client.wait_closed()
    # Another forged address from the same real one is still locked out ...
    locked = await forged("198.51.100.9")
    assert (await locked.wait_type("error"))["error"]["code"] == "rate_limited"
    # ... and a device at another real address is not.
    neighbour = await via_proxy(deployment, proxy)
    assert (await neighbour.hello_pheby(deployment.token))["type"] == "ready"
