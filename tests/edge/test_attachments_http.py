"""The edge's attachment endpoints (edge/attachments.py) over real HTTP, end to end against
the real embedded gateway: each status code of the pheby spec, the three auth forms, the
lockout shared with hello, names and types, streaming responses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx

from canonical.client import DeviceClient
from edge.attachments import MAX_UPLOADS_AT_ONCE
from tests.e2e import conftest as e2e
from tests.e2e import test_attachments as flows
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation
from tests.e2e.test_attachments import NOT_FOUND, PNG, auth, base_url, stored_files, upload

# The real embedded gateway of the end-to-end suite, and its HTTP client.
embedded = e2e.embedded
http = flows.http


async def test_every_error_status_of_the_upload_and_download_endpoints(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    limit = 1024 * 1024
    retention_s = 4
    deployment = embedded(
        ANDROID_MAX_UPLOAD_BYTES=str(limit),
        ANDROID_ATTACHMENT_RETENTION_DAYS=str(retention_s / 86400),
    )
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    url = base_url(deployment) + "/attachments"

    missing = await http.post(url, params={"conversation_id": conversation_id}, content=b"x")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthorized"
    wrong = await upload(http, deployment, conversation_id, "a.txt", b"x", headers=auth("nope" * 8))
    assert wrong.status_code == 401

    unknown = await upload(http, deployment, "f" * 32, "a.txt", b"hello")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "conversation_not_found"
    no_conversation = await http.post(url, content=b"hello", headers=auth(deployment.token))
    assert no_conversation.status_code == 400
    empty = await upload(http, deployment, conversation_id, "a.txt", b"")
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "bad_request"
    too_long = await upload(http, deployment, "c" * 65, "a.txt", b"hello")
    assert too_long.status_code == 400 and "longer than 64" in too_long.json()["error"]["message"]
    for form in ("multipart/form-data; boundary=xyz", "application/x-www-form-urlencoded"):
        # The spec's body is the file's raw bytes: a form would be stored as its envelope.
        posted = await upload(http, deployment, conversation_id, "p.png", b"--xyz\r\n", form)
        assert posted.status_code == 415 and posted.json()["error"]["code"] == "bad_request"

    declared = await upload(http, deployment, conversation_id, "big.bin", b"\0" * (limit + 1))
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "too_large"

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted while streaming
        for _ in range(limit // 65536 + 1):
            yield b"\1" * 65536

    streamed = await upload(http, deployment, conversation_id, "big.bin", chunked())
    assert streamed.status_code == 413

    storage = deployment.home.path / "android" / "attachments"
    assert stored_files(storage) == [], "refused bodies are deleted"

    # Uploads whose bodies are still coming (raw sockets: a declared length, part of it sent).
    host, port = base_url(deployment).removeprefix("http://").split(":")
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for n in range(MAX_UPLOADS_AT_ONCE):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /attachments?conversation_id={conversation_id}&filename=s{n}.bin HTTP/1.1\r\n"
            f"Host: {host}\r\nAuthorization: Bearer {deployment.token}\r\n"
            "Content-Length: 2048\r\n\r\n".encode()
            + b"x" * 1024
        )
        await writer.drain()
        slow.append((reader, writer))
    for _ in range(200):  # until all of them are being received (an empty body takes no turn)
        extra = await upload(http, deployment, conversation_id, "extra.bin", b"")
        if extra.status_code == 429:
            break
        assert extra.status_code == 400  # "the request body is empty": there was room
        await asyncio.sleep(0.05)
    assert extra.status_code == 429 and extra.json()["error"]["code"] == "rate_limited"
    for reader, writer in slow:  # the rest of each body: all stored
        writer.write(b"y" * 1024)
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 201")
        writer.close()

    exact = await upload(http, deployment, conversation_id, "max.bin", b"\2" * limit)
    assert exact.status_code == 201, exact.text
    path = exact.json()["attachment"]["download_path"]
    ok = await http.get(base_url(deployment) + path, headers=auth(deployment.token))
    assert ok.status_code == 200 and len(ok.content) == limit

    for probe in ("0" * 32, "not-an-id", "A" * 32, "..%2F..%2Fetc%2Fpasswd", "a/b/c"):
        got = await http.get(f"{url}/{probe}", headers=auth(deployment.token))
        assert got.status_code == 404 and got.json() == NOT_FOUND, probe
    assert (await http.get(base_url(deployment) + path)).status_code == 401

    await asyncio.sleep(retention_s + 0.5)
    expired = await http.get(base_url(deployment) + path, headers=auth(deployment.token))
    assert expired.status_code == 404 and expired.json() == NOT_FOUND
    history = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id}
    )
    assert history["attachments"] == []


async def test_auth_forms_names_and_types_on_upload_and_streamed_downloads(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)

    by_key = await upload(
        http, deployment, conversation_id, "a.png", PNG, headers=auth(deployment.token, "apikey")
    )
    assert by_key.status_code == 201
    attachment = by_key.json()["attachment"]
    assert attachment["mime_type"] == "image/png", "no Content-Type: guessed from the name"
    assert attachment["inline_image"] is True
    by_secret = await upload(
        http,
        deployment,
        conversation_id,
        "..\\..\\evil\x00\x07name.txt",
        b"text",
        "text/plain; charset=utf-8",
        headers=auth(deployment.token, "secret"),
    )
    assert by_secret.status_code == 201
    assert by_secret.json()["attachment"]["filename"] == "evilname.txt"
    assert by_secret.json()["attachment"]["mime_type"] == "text/plain"
    nameless = await http.post(
        base_url(deployment) + "/attachments",
        params={"conversation_id": conversation_id},
        content=b"%PDF-1.4 ...",
        headers={**auth(deployment.token), "Content-Type": "application/pdf"},
    )
    assert nameless.json()["attachment"]["filename"] == "file"
    assert nameless.json()["attachment"]["kind"] == "document"
    # A body that claims to be an image but is not one is never an inline preview.
    liar = await upload(http, deployment, conversation_id, "x.png", b"<html>", "image/png")
    assert liar.json()["attachment"]["kind"] == "image"
    assert liar.json()["attachment"]["inline_image"] is False

    url = base_url(deployment) + attachment["download_path"]
    head = await http.head(url, headers=auth(deployment.token))
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(PNG))
    part = await http.get(url, headers={**auth(deployment.token), "Range": "bytes=0-7"})
    assert part.status_code == 206 and part.content == PNG[:8]


async def test_failed_attachment_auth_counts_towards_the_hello_lockout(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    for attempt in range(5):
        refused = await upload(
            http, deployment, conversation_id, "a.txt", b"x", headers=auth(f"wrong-{attempt}" * 4)
        )
        assert refused.status_code == 401
    locked = await upload(http, deployment, conversation_id, "a.txt", b"x")
    assert locked.status_code == 429 and locked.json()["error"]["code"] == "rate_limited"
    device = await DeviceClient(deployment.ws_urls[0] + "/ws").connect()
    deployment.clients.append(device)
    # The edge refuses the WebSocket from that address before any hello.
    refused_ws = await device.wait_for(lambda f: f.get("type") == "error", 15)
    assert refused_ws["error"]["code"] == "rate_limited"
    assert await device.wait_closed() == 4429
