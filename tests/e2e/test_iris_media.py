"""Iris media over the WebSocket (docs/protocol/media.md), against a real scaled
deployment: the gateway on Redis and two edge processes sharing the attachment storage,
so an upload started on one edge resumes on the other."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import websockets

from canonical.attachments import CHUNK_MAX_BYTES, PULL_HEADER
from canonical.model import Json
from edge.media import MAX_UNFINISHED_UPLOADS
from scripted_model.scenarios import media_png_bytes
from tests.e2e.conftest import Deployment, platform_connected
from tests.e2e.flows import frames_of_run, iris_send
from tests.e2e.test_attachments import stored_files
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import EdgeProcess, HermesGateway, RedisServer

CHAT = "android:default"


class MediaClient(DeviceClient):
    """A device client that also keeps the binary frames (media.pull data)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.binary: list[bytes] = []

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                if isinstance(raw, bytes):
                    self.binary.append(raw)
                else:
                    frame = json.loads(raw)
                    self.on_frame(frame)
                    self.frames.append(frame)
                    self.received_at.append(time.monotonic())
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed_code = self.ws.close_code
            self._new.set()

    def pulled(self, media_id: str) -> bytes:
        """The bytes of a pull, reassembled by offset from the binary frames."""
        key = bytes.fromhex(media_id)
        parts: dict[int, bytes] = {}
        for frame in self.binary:
            frame_key, offset = PULL_HEADER.unpack_from(frame)
            if frame_key == key:
                parts[offset] = frame[PULL_HEADER.size :]
        out = b""
        for offset in sorted(parts):
            assert offset == len(out) + min(parts), "pull frames are contiguous"
            out += parts[offset]
        return out


@pytest.fixture
async def media_deployment(
    redis_server: RedisServer,
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
    edge_factory: Callable[..., EdgeProcess],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Deployment]]:
    """``make(**env)``: a gateway on Redis and two edges, one attachment volume for all
    (``redis``: a server of the test's own, to kill; else the session's)."""
    made: list[Deployment] = []

    def make(redis: RedisServer | None = None, **env: str) -> Deployment:
        bus_url = (redis or redis_server).url
        storage = tmp_path / f"attachments-{len(made)}"
        shared = {"ANDROID_ATTACHMENTS_DIR": str(storage), **env}
        token = secrets.token_urlsafe(24)
        home = hermes_home_factory()
        gateway = gateway_factory(
            home,
            env={"ANDROID_TOKEN": token, "ANDROID_BUS_URL": bus_url, **shared},
            wait=False,
        )
        edges = [
            edge_factory(
                env={"ANDROID_BUS_URL": bus_url, "ANDROID_WS_HOST": "127.0.0.1", **shared},
                port_env="ANDROID_WS_PORT",
            )
            for _ in range(2)
        ]
        gateway.wait_ready(platform_connected(gateway), timeout=60)
        made.append(Deployment(token, [e.ws_url for e in edges], gateway, home, edges=edges))
        return made[-1]

    yield make
    for deployment in made:
        await deployment.close_clients()


async def connect(deployment: Deployment, edge: int, device_id: str) -> MediaClient:
    client = MediaClient(deployment.ws_urls[edge] + "/ws")
    await client.connect()
    deployment.clients.append(client)
    ack = await client.hello_iris(deployment.token, device_id)
    assert ack["type"] == "hello.ack", ack
    return client


def chunk(upload_id: str, offset: int, data: bytes) -> Json:
    return {
        "type": "media.upload.chunk",
        "upload_id": upload_id,
        "offset": offset,
        "data": base64.b64encode(data).decode(),
    }


async def test_an_upload_resumes_on_another_edge_then_is_sent_offered_and_pulled(
    media_deployment: Callable[..., Deployment],
) -> None:
    deployment = media_deployment()
    data = os.urandom(2 * CHUNK_MAX_BYTES + 12345)
    digest = hashlib.sha256(data).hexdigest()
    start = {
        "type": "media.upload.start",
        "chat_id": CHAT,
        "filename": "scan.pdf",
        "mime": "application/pdf",
        "size": len(data),
        "sha256": digest,
    }

    first = await connect(deployment, 0, "phone-1")
    ready = await first.request(dict(start))
    assert ready["type"] == "media.upload.ready" and ready["offset"] == 0, ready
    assert ready["chunk_max"] == CHUNK_MAX_BYTES
    upload_id = ready["upload_id"]
    ack = await first.request(chunk(upload_id, 0, data[:CHUNK_MAX_BYTES]))
    assert ack == {**ack, "type": "media.upload.ack", "offset": CHUNK_MAX_BYTES}
    await first.close()

    # The device reconnects through the other edge and resumes where it stopped.
    second = await connect(deployment, 1, "phone-1")
    resumed = await second.request({**start, "upload_id": upload_id})
    assert resumed["type"] == "media.upload.ready", resumed
    assert (resumed["upload_id"], resumed["offset"]) == (upload_id, CHUNK_MAX_BYTES)
    again = await second.request(chunk(upload_id, 0, data[:CHUNK_MAX_BYTES]))
    assert again["type"] == "media.upload.ack" and again["offset"] == CHUNK_MAX_BYTES, again
    gap = await second.request(chunk(upload_id, 2 * CHUNK_MAX_BYTES, data[:10]))
    assert gap["type"] == "error" and gap["error"]["code"] == "bad_request", gap
    ack = await second.request(
        chunk(upload_id, CHUNK_MAX_BYTES, data[CHUNK_MAX_BYTES : 2 * CHUNK_MAX_BYTES])
    )
    assert ack["offset"] == 2 * CHUNK_MAX_BYTES, ack
    uploaded = await second.request(
        chunk(upload_id, 2 * CHUNK_MAX_BYTES, data[2 * CHUNK_MAX_BYTES :])
    )
    assert uploaded["type"] == "media.uploaded", uploaded
    media_ref = uploaded["media_ref"]
    assert uploaded["upload_id"] == upload_id and len(media_ref) == 32
    assert uploaded["attachment"]["size"] == len(data)
    assert uploaded["attachment"]["filename"] == "scan.pdf"
    # Asking again after a lost answer gets the same reference.
    repeat = await second.request({**start, "upload_id": upload_id})
    assert repeat["type"] == "media.uploaded" and repeat["media_ref"] == media_ref

    storage = Path(deployment.gateway.env()["ANDROID_ATTACHMENTS_DIR"])
    leftovers = [n for n in stored_files(storage) if n.endswith((".part", ".json"))]
    assert leftovers == [], "a finished upload leaves no partial files"

    start_frames = len(second.frames)
    ack = await iris_send(second, CHAT, "please file this", media_refs=[media_ref])
    assert ack["type"] == "message.ack", ack
    offer = await second.wait_type("media.offer", 30, start_frames)
    assert offer["media_id"] == media_ref and offer["direction"] == "inbound"
    assert (offer["chat_id"], offer["thread_id"]) == (CHAT, None)
    assert (offer["mime"], offer["size"], offer["kind"]) == (
        "application/pdf",
        len(data),
        "document",
    )
    assert offer["message_id"] == f"u-{ack['client_id']}" and isinstance(offer["cursor"], int)
    await frames_of_run(second, ack["run_id"], start_frames)
    reused = await iris_send(second, CHAT, "once more", media_refs=[media_ref])
    assert reused["type"] == "error" and reused["error"]["code"] == "bad_request"

    pulled = await second.request({"type": "media.pull", "media_id": media_ref}, timeout=60)
    assert pulled == {**pulled, "type": "media.pulled", "size": len(data), "sha256": digest}
    assert second.pulled(media_ref) == data

    # A pull resumes from an offset too.
    second.binary.clear()
    tail = await second.request({"type": "media.pull", "media_id": media_ref, "offset": 1_000_000})
    assert tail["type"] == "media.pulled" and tail["offset"] == 1_000_000
    frames = second.binary
    assert PULL_HEADER.unpack_from(frames[0])[1] == 1_000_000
    assert b"".join(f[PULL_HEADER.size :] for f in frames) == data[1_000_000:]


async def test_an_upload_whose_registration_failed_is_finished_by_a_retry(
    media_deployment: Callable[..., Deployment], redis_factory: Callable[..., RedisServer]
) -> None:
    redis = redis_factory()
    deployment = media_deployment(redis=redis)
    data = os.urandom(CHUNK_MAX_BYTES + 4321)
    start = {
        "type": "media.upload.start",
        "chat_id": CHAT,
        "filename": "photo.jpg",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    phone = await connect(deployment, 0, "phone-r")
    upload_id = (await phone.request(dict(start)))["upload_id"]
    await phone.request(chunk(upload_id, 0, data[:CHUNK_MAX_BYTES]))
    last = chunk(upload_id, CHUNK_MAX_BYTES, data[CHUNK_MAX_BYTES:])
    redis.kill9()  # every byte arrives, but the plugin cannot be asked to register them
    failed = await phone.request(dict(last))
    assert failed["type"] == "error" and failed["error"]["code"] == "unavailable", failed
    again = await phone.request(dict(last))  # the last chunk again, still no bus
    assert again["type"] == "error" and again["error"]["code"] == "unavailable", again
    redis.restart()
    for _ in range(100):  # until the edge's bus connection is back
        resumed = await phone.request({**start, "upload_id": upload_id})
        if resumed["type"] != "error":
            break
        await asyncio.sleep(0.1)
    assert resumed["type"] == "media.uploaded" and resumed["upload_id"] == upload_id, resumed
    repeat = await phone.request(dict(last))
    assert repeat["type"] == "media.uploaded" and repeat["media_ref"] == resumed["media_ref"]
    ack = await iris_send(phone, CHAT, "the photo", media_refs=[resumed["media_ref"]])
    assert ack["type"] == "message.ack", ack
    storage = Path(deployment.gateway.env()["ANDROID_ATTACHMENTS_DIR"])
    assert [n for n in stored_files(storage) if n.endswith((".part", ".json"))] == []


async def test_bad_uploads_are_refused_with_clear_codes(
    media_deployment: Callable[..., Deployment],
) -> None:
    deployment = media_deployment(ANDROID_MAX_UPLOAD_BYTES=str(4 * CHUNK_MAX_BYTES))
    client = await connect(deployment, 0, "phone-2")
    data = os.urandom(CHUNK_MAX_BYTES + 100)
    start = {
        "type": "media.upload.start",
        "chat_id": CHAT,
        "filename": "x.bin",
        "size": len(data),
        "sha256": hashlib.sha256(b"something else").hexdigest(),
    }
    ready = await client.request(dict(start))
    upload_id = ready["upload_id"]
    await client.request(chunk(upload_id, 0, data[:CHUNK_MAX_BYTES]))
    mismatch = await client.request(chunk(upload_id, CHUNK_MAX_BYTES, data[CHUNK_MAX_BYTES:]))
    assert mismatch["type"] == "error" and mismatch["error"]["code"] == "checksum_mismatch"
    gone = await client.request(chunk(upload_id, 0, data[:10]))
    assert gone["type"] == "error" and gone["error"]["code"] == "not_found"
    storage = Path(deployment.gateway.env()["ANDROID_ATTACHMENTS_DIR"])
    assert stored_files(storage) == [], "a bad upload leaves nothing"

    big = await client.request({**start, "size": 4 * CHUNK_MAX_BYTES + 1})
    assert big["type"] == "error" and big["error"]["code"] == "too_large"
    nowhere = await client.request({**start, "chat_id": "android:nope"})
    assert nowhere["type"] == "error" and nowhere["error"]["code"] == "not_found"
    live = await client.request({**start, "sha256": hashlib.sha256(data).hexdigest()})
    # As base64 this is as long as a full chunk (the schema's bound): the edge refuses it
    # once decoded.
    oversize = await client.request(chunk(live["upload_id"], 0, b"\0" * (CHUNK_MAX_BYTES + 1)))
    assert oversize["type"] == "error" and oversize["error"]["code"] == "bad_request"
    elsewhere = await client.request(
        {**start, "sha256": hashlib.sha256(data).hexdigest(), "upload_id": live["upload_id"],
         "thread_id": "t_1"}
    )  # fmt: skip
    assert elsewhere["type"] == "error" and "another conversation" in elsewhere["error"]["message"]
    started = [  # the live one above, then as many as a tenant may leave unfinished
        await client.request({**start, "sha256": hashlib.sha256(data).hexdigest()})
        for _ in range(MAX_UNFINISHED_UPLOADS)
    ]
    assert [r["type"] for r in started[:-1]] == ["media.upload.ready"] * (
        MAX_UNFINISHED_UPLOADS - 1
    )
    assert started[-1]["type"] == "error" and started[-1]["error"]["code"] == "rate_limited"
    with client.off_schema():
        bad_hash = await client.request({**start, "sha256": "xyz"})
    assert bad_hash["type"] == "error" and bad_hash["error"]["code"] == "bad_request"
    unknown = await client.request({"type": "media.pull", "media_id": uuid.uuid4().hex})
    assert unknown["type"] == "error" and unknown["error"]["code"] == "not_found"
    unknown_ref = await iris_send(client, CHAT, "hi", media_refs=[uuid.uuid4().hex])
    assert unknown_ref["type"] == "error" and unknown_ref["error"]["code"] == "bad_request"


async def test_a_file_the_agent_delivers_is_offered_and_pulled(
    media_deployment: Callable[..., Deployment],
) -> None:
    deployment = media_deployment()
    client = await connect(deployment, 1, "phone-3")
    start = len(client.frames)
    ack = await iris_send(client, CHAT, "[media] a chart please")
    assert ack["type"] == "message.ack", ack
    await frames_of_run(client, ack["run_id"], start)
    offer = await client.wait_type("media.offer", 30, start)
    assert offer["direction"] == "outbound" and offer["kind"] == "image"
    assert offer["mime"] == "image/png" and offer["inline_image"] is True
    assert offer["message_id"] == f"draft-{ack['run_id']}"
    pulled = await client.request({"type": "media.pull", "media_id": offer["media_id"]})
    assert pulled["type"] == "media.pulled" and pulled["size"] == len(media_png_bytes())
    assert client.pulled(offer["media_id"]) == media_png_bytes()
