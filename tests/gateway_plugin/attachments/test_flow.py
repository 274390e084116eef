"""attachment.register from an edge, through a real controller on a real (memory) bus."""

from __future__ import annotations

import hashlib
import uuid

from canonical.model import Json
from tests.gateway_plugin.access.test_hellos import _Rig, make_rig, rig

__all__ = ["make_rig", "rig"]  # the fixtures, shared with the hellos' tests


def _register(attachment_id: str, sha256: str, size: int, conn: str) -> Json:
    return {
        "cmd": "attachment.register",
        "edge": "e1",
        "conn": conn,
        "dialect": "iris",
        "device_id": "phone",
        "request_id": None,
        "internal": True,
        "args": {
            "chat_id": "android:default",
            "thread_id": None,
            "attachment_id": attachment_id,
            "filename": "photo.jpg",
            "mime_type": "image/jpeg",
            "size": size,
            "sha256": sha256,
        },
    }


async def test_registering_the_same_upload_again_answers_with_the_first_registration(
    rig: _Rig,
) -> None:
    body = b"\xff\xd8\xff" + b"jpeg" * 100
    attachment_id, sha256 = uuid.uuid4().hex, hashlib.sha256(body).hexdigest()
    path = rig.controller.attachments.path_of(attachment_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    # The second: an edge retrying a finish whose reply it never got.
    await rig.submit(_register(attachment_id, sha256, len(body), "c1"))
    first = (await rig.replies_for(1))[0]["body"]
    await rig.submit(_register(attachment_id, sha256, len(body), "c2"))
    second = (await rig.replies_for(2))[1]["body"]
    assert first["type"] == second["type"] == "attachment.registered"
    assert first["attachment"] == second["attachment"]
    assert first["attachment"]["attachment_id"] == attachment_id
    other = "0" * 64  # the same id with other bytes is not the same upload
    await rig.submit(_register(attachment_id, other, len(body), "c3"))
    third = (await rig.replies_for(3))[2]["body"]
    assert third["type"] == "error", third
