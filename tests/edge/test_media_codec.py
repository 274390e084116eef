"""The codecs' side of attachments: iris media frames decode to edge commands with their
limits, and `attachment.added` encodes to pheby's event and iris' `media.offer`."""

from __future__ import annotations

import base64

import pytest

from canonical.attachments import CHUNK_MAX_BYTES, PULL_HEADER
from canonical.model import Json
from edge.dialects.iris import IrisDialect
from edge.dialects.pheby import PhebyDialect
from edge.errors import FrameRejected

IRIS = IrisDialect()
PHEBY = PhebyDialect()
ID = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32
START = {"type": "media.upload.start", "chat_id": "android:default", "size": 10, "sha256": SHA}

ADDED: Json = {
    "type": "attachment.added",
    "lane": ["android:default", "t_1"],
    "conversation_id": "c" * 32,
    "cursor": 41,
    "ts": "2026-09-02T18:30:00.000+00:00",
    "attachment": {
        "attachment_id": ID,
        "filename": "chart.png",
        "mime_type": "image/png",
        "size": 73,
        "kind": "image",
        "inline_image": True,
        "direction": "outbound",
        "conversation_id": "c" * 32,
        "message_id": "draft-r1",
        "created_at": "2026-09-02T18:30:00.000+00:00",
        "expires_at": None,
        "download_path": f"/attachments/{ID}",
    },
}


def test_upload_start_decodes_with_a_lowercased_digest_and_optional_resume_id() -> None:
    decoded = IRIS.decode({**START, "sha256": SHA.upper(), "upload_id": ID, "filename": "a.pdf"})
    assert decoded == {
        "cmd": "media.upload.start",
        "args": {
            "chat_id": "android:default",
            "thread_id": None,
            "upload_id": ID,
            "filename": "a.pdf",
            "mime": None,
            "size": 10,
            "sha256": SHA,
        },
    }


@pytest.mark.parametrize(
    "frame",
    [
        {**START, "size": 0},
        {**START, "size": True},
        {**START, "sha256": "xyz"},
        {**START, "upload_id": "../x"},
        {k: v for k, v in START.items() if k != "chat_id"},
        {"type": "media.upload.chunk", "upload_id": ID, "offset": -1, "data": ""},
        {"type": "media.upload.chunk", "upload_id": ID, "offset": 0, "data": 5},
        {
            "type": "media.upload.chunk",
            "upload_id": ID,
            "offset": 0,
            "data": base64.b64encode(b"\0" * (CHUNK_MAX_BYTES + 3)).decode(),
        },
        {"type": "media.pull", "media_id": "nope"},
        {"type": "message.send", "chat_id": "c", "text": "t", "client_id": "x", "media_refs": "a"},
        {
            "type": "message.send",
            "chat_id": "c",
            "text": "t",
            "client_id": "x",
            "media_refs": [ID] * 2,
        },
    ],
)
def test_bad_media_frames_are_refused_with_bad_request(frame: Json) -> None:
    with pytest.raises(FrameRejected) as refused:
        IRIS.decode(frame)
    assert refused.value.code == "bad_request"


def test_message_send_carries_media_refs_as_the_sends_attachments() -> None:
    plain = IRIS.decode({"type": "message.send", "chat_id": "c", "text": "t", "client_id": "x"})
    assert plain["args"]["attachment_ids"] == []
    with_refs = IRIS.decode(
        {"type": "message.send", "chat_id": "c", "text": "t", "client_id": "x", "media_refs": [ID]}
    )
    assert with_refs["args"]["attachment_ids"] == [ID]


def test_attachment_added_is_media_offer_for_iris_and_the_spec_event_for_pheby() -> None:
    offer = IRIS.encode_event(ADDED)
    assert offer == {
        "type": "media.offer",
        "chat_id": "android:default",
        "thread_id": "t_1",
        "cursor": 41,
        "media_id": ID,
        "mime": "image/png",
        "size": 73,
        "filename": "chart.png",
        "kind": "image",
        "inline_image": True,
        "direction": "outbound",
        "message_id": "draft-r1",
        "expires_at": None,
        "ts": ADDED["ts"],
    }
    assert PHEBY.encode_event(ADDED) == {
        "type": "attachment.added",
        "conversation_id": "c" * 32,
        "attachment": ADDED["attachment"],
        "ts": ADDED["ts"],
    }


def test_pull_frames_start_with_the_raw_id_and_a_big_endian_offset() -> None:
    header = PULL_HEADER.pack(bytes.fromhex(ID), 1 << 33)
    assert len(header) == 24
    assert header[:16] == bytes.fromhex(ID) and header[16:] == (1 << 33).to_bytes(8, "big")
