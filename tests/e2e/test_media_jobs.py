"""Uploaded media is transcoded by the worker job and every device hears the outcome."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from PIL import Image

from tests.e2e.conftest import Deployment
from tests.e2e.test_attachments import upload


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


def _jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (1200, 800), (30, 120, 200)).save(buffer, "JPEG")
    return buffer.getvalue()


async def test_an_uploaded_image_gets_a_thumbnail_and_a_corrupt_one_fails_visibly(
    embedded: Callable[..., Deployment], http: httpx.AsyncClient
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    conversation_id = phone.frames[0]["channels"][0]["conversation_id"]
    good = await upload(http, deployment, conversation_id, "photo.jpg", _jpeg(), "image/jpeg")
    assert good.status_code == 201, good.text
    media_id = good.json()["attachment"]["attachment_id"]
    ready = await phone.wait_for(
        lambda f: (
            f.get("type") in ("media.ready", "media.failed") and f.get("media_id") == media_id
        ),
        60,
    )
    assert ready["type"] == "media.ready" and "thumbnail" in ready["variants"]
    bad = await upload(
        http,
        deployment,
        conversation_id,
        "broken.jpg",
        b"\xff\xd8\xff\xe0" + os.urandom(4000),
        "image/jpeg",
    )
    assert bad.status_code == 201, bad.text
    bad_id = bad.json()["attachment"]["attachment_id"]
    failed = await phone.wait_for(
        lambda f: f.get("type") in ("media.ready", "media.failed") and f.get("media_id") == bad_id,
        60,
    )
    assert (
        failed["type"] == "media.failed"
        and failed["code"] in ("corrupt", "unsupported")
        and failed["message"]
    )
    # The worker survived the hostile file: the next good one still works.
    again = await upload(http, deployment, conversation_id, "again.jpg", _jpeg(), "image/jpeg")
    again_id = again.json()["attachment"]["attachment_id"]
    assert (
        await phone.wait_for(
            lambda f: f.get("media_id") == again_id and f.get("type", "").startswith("media."), 60
        )
    )["type"] == "media.ready"
