"""Hostile and slow clients against the real embedded gateway: sockets that never finish
their request, uploads that stall, JSON nested a thousand deep. None of it may starve
devices from another address, hold an upload place for long, or cost more than an error
frame and one log line.

Addresses: stalled sockets come from 127.0.0.1, real devices from 127.0.0.2, and the
deep-JSON hellos (which lock their address out) from 127.0.0.3.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from canonical.protocol import LOCKOUT_FAILURES
from edge.attachments import MAX_UPLOADS_AT_ONCE
from edge.errors import CLOSE_LOCKED_OUT, CLOSE_UNAUTHORIZED
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation
from tests.harness.device import DeviceClient
from tests.harness.hermes_gateway import HermesGateway
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import free_port, http_ok
from tests.harness.services import ScriptedModel

CAP = 4  # ANDROID_MAX_UNAUTHENTICATED_PER_ADDRESS
HEADER_TIMEOUT = 2.0  # ANDROID_HTTP_HEADER_TIMEOUT_S
BODY_IDLE_TIMEOUT = 2.0  # ANDROID_HTTP_BODY_IDLE_TIMEOUT_S
STALLED = 100
ATTACKER, DEVICE, PROBER = "127.0.0.1", "127.0.0.2", "127.0.0.3"
PARTIAL_UPGRADE = (
    b"GET /ws HTTP/1.1\r\nHost: edge\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Version: 13\r\n"  # ... and the rest never comes
)
DEEP = "[" * 1000 + "]" * 1000  # 2 KB: json.loads alone raised RecursionError


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, scripted_model: ScriptedModel
) -> Iterator[Deployment]:
    """One embedded gateway for the module, with short limits."""
    token = secrets.token_urlsafe(24)
    port = free_port()
    home = HermesHome(scripted_model.base_url, path=tmp_path_factory.mktemp("hostile") / "home")
    gateway = HermesGateway(
        home,
        env={
            "ANDROID_TOKEN": token,
            "ANDROID_WS_PORT": str(port),
            "ANDROID_MAX_UNAUTHENTICATED_PER_ADDRESS": str(CAP),
            "ANDROID_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT),
            "ANDROID_HTTP_BODY_IDLE_TIMEOUT_S": str(BODY_IDLE_TIMEOUT),
        },
    )
    gateway.start()
    try:
        gateway.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60)
        yield Deployment(token, [f"ws://127.0.0.1:{port}"], gateway, home)
    finally:
        gateway.stop()


@pytest.fixture
async def sockets() -> AsyncIterator[list[asyncio.StreamWriter]]:
    """Raw sockets a test opens, closed after it."""
    opened: list[asyncio.StreamWriter] = []
    yield opened
    for writer in opened:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def port_of(deployment: Deployment) -> int:
    return int(deployment.ws_urls[0].rsplit(":", 1)[1])


def http(source: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=source), timeout=10)


async def device(deployment: Deployment, source: str = DEVICE) -> DeviceClient:
    client = await DeviceClient(deployment.ws_urls[0] + "/ws").connect(local_addr=(source, 0))
    deployment.clients.append(client)
    return client


async def stall(
    deployment: Deployment, sockets: list[asyncio.StreamWriter], first: bytes, source: str
) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port_of(deployment), local_addr=(source, 0)
    )
    sockets.append(writer)
    if first:
        writer.write(first)
    return reader


async def ended(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """What the edge wrote before closing the socket; None if it is still open."""
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return b""


async def test_stalled_sockets_from_one_address_do_not_starve_devices_from_another(
    deployment: Deployment, sockets: list[asyncio.StreamWriter]
) -> None:
    # Upgrade requests that never finish, and connections that never say a word.
    started = time.monotonic()
    readers = [
        await stall(deployment, sockets, PARTIAL_UPGRADE if n % 2 else b"", ATTACKER)
        for n in range(STALLED)
    ]
    # All but CAP are refused at once (429); CAP stay open until their header is due.
    first = await asyncio.gather(*(ended(reader, 1.0) for reader in readers))
    still_open = [reader for reader, got in zip(readers, first, strict=True) if got is None]
    assert len(still_open) == CAP
    assert all(
        got == b"" or got.startswith(b"HTTP/1.1 429 ") for got in first if got is not None
    ), {got for got in first if got is not None}

    # Meanwhile a device on another address connects in both dialects, and health answers.
    phone = await device(deployment)
    assert (await phone.hello_iris(deployment.token, "hostile-phone"))["type"] == "hello.ack"
    pheby = await device(deployment)
    assert (await pheby.hello_pheby(deployment.token))["type"] == "ready"
    async with http(DEVICE) as client:
        assert (
            await client.get(deployment.ws_urls[0].replace("ws:", "http:") + "/healthz")
        ).text == "ok"

    # The ones left open are cut once their header is overdue (408), and nothing of the
    # attacker's remains: its address is served again.
    last = await asyncio.gather(*(ended(reader, HEADER_TIMEOUT + 5) for reader in still_open))
    assert all(got is not None and got.startswith(b"HTTP/1.1 408 ") for got in last), last
    assert time.monotonic() - started < HEADER_TIMEOUT + 8
    async with http(ATTACKER) as client:
        assert (
            await client.get(deployment.ws_urls[0].replace("ws:", "http:") + "/healthz")
        ).text == "ok"

    # WebSockets that never say hello hold their address's places too, until their hello.
    silent = [await device(deployment, ATTACKER) for _ in range(CAP)]
    refused = await stall(deployment, sockets, b"", ATTACKER)
    assert (await ended(refused, 5)) is not None  # closed at once
    assert (await silent[0].hello_pheby(deployment.token))["type"] == "ready"
    again = await device(deployment, ATTACKER)  # the hello freed a place
    assert (await again.hello_pheby(deployment.token))["type"] == "ready"
    await deployment.close_clients()
    deployment.clients.clear()


def part_files(root: Path) -> list[Path]:
    """Upload bodies still being received (or left behind) under ``root``."""
    return [path for path in root.rglob("*.part") if path.is_file()]


async def stalled_upload(
    deployment: Deployment, sockets: list[asyncio.StreamWriter], conversation_id: str
) -> asyncio.StreamReader:
    """An upload that promises 1 MiB, sends 10 bytes and stops."""
    head = (
        f"POST /attachments?conversation_id={conversation_id}&filename=a.bin HTTP/1.1\r\n"
        f"Host: edge\r\nAuthorization: Bearer {deployment.token}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {1024 * 1024}\r\n\r\n"
    )
    return await stall(deployment, sockets, head.encode() + b"0123456789", DEVICE)


async def test_stalled_uploads_are_cut_after_the_body_idle_timeout_and_free_their_places(
    deployment: Deployment, sockets: list[asyncio.StreamWriter]
) -> None:
    pheby = await device(deployment)
    assert (await pheby.hello_pheby(deployment.token))["type"] == "ready"
    conversation_id = await default_conversation(pheby)
    url = deployment.ws_urls[0].replace("ws:", "http:") + "/attachments"
    params = {"conversation_id": conversation_id, "filename": "notes.txt"}
    headers = {"Authorization": f"Bearer {deployment.token}"}

    stalled = [
        await stalled_upload(deployment, sockets, conversation_id)
        for _ in range(MAX_UPLOADS_AT_ONCE)
    ]
    async with http(DEVICE) as client:
        for _ in range(100):  # until the edge holds all four places
            busy = await client.post(url, params=params, headers=headers, content=b"notes")
            if busy.status_code == 429:
                break
            assert busy.status_code == 201, busy.text
            await asyncio.sleep(0.05)
        assert busy.status_code == 429
        # Each stalled body is answered 408 once no byte came for the idle timeout.
        answers = await asyncio.gather(
            *(ended(reader, BODY_IDLE_TIMEOUT + 5) for reader in stalled)
        )
        for answer in answers:
            assert answer is not None and answer.startswith(b"HTTP/1.1 408 "), answer
            assert b'"code":"bad_request"' in answer and b"stalled" in answer
        # The places are free again.
        done = await client.post(url, params=params, headers=headers, content=b"notes")
        assert done.status_code == 201, done.text
    # Nothing of the stalled bodies is left in storage.
    assert part_files(Path(deployment.home.path)) == []
    await deployment.close_clients()
    deployment.clients.clear()


async def test_deeply_nested_json_is_invalid_json_in_both_dialects_and_counts_before_hello(
    deployment: Deployment,
) -> None:
    # After hello: an error frame, and the connection stays usable.
    phone = await device(deployment)
    assert (await phone.hello_iris(deployment.token, "deep-phone"))["type"] == "hello.ack"
    pheby = await device(deployment)
    assert (await pheby.hello_pheby(deployment.token))["type"] == "ready"
    # 100 levels parse, but would go on to the plugin: refused as well.
    nested_field = '{"type": "ping", "request_id": "deep-2", "x": ' + "[" * 100 + "]" * 100 + "}"
    for client in (phone, pheby):
        for frame in (DEEP, '{"type": "ping", "x": ' + DEEP + "}", nested_field):
            start = len(client.frames)
            await client.send_raw(frame)
            error = await client.wait_for(lambda f: f.get("type") == "error", 10, start)
            assert error["error"]["code"] == "invalid_json", error
            assert "nest" in error["error"]["message"]
        assert (await client.request({"type": "ping"}))["type"] == "pong"
    assert (await pheby.request({"type": "conversation.list"}))["type"] == "conversation.snapshot"

    # Before hello: invalid_json and a close, each one a failure towards the lockout.
    for _ in range(LOCKOUT_FAILURES):
        prober = await device(deployment, PROBER)
        await prober.send_raw(DEEP)
        error = await prober.wait_type("error")
        assert error["error"]["code"] == "invalid_json"
        assert await prober.wait_closed() == CLOSE_UNAUTHORIZED
    locked = await device(deployment, PROBER)
    assert (await locked.wait_type("error"))["error"]["code"] == "rate_limited"
    assert await locked.wait_closed() == CLOSE_LOCKED_OUT

    # One line per refused hello in the log, no traceback.
    log = deployment.gateway.log_text()
    assert "RecursionError" not in log and "Exception in ASGI application" not in log
    assert log.count(f"hello refused source={PROBER} code=invalid_json") == LOCKOUT_FAILURES
    await deployment.close_clients()
    deployment.clients.clear()
