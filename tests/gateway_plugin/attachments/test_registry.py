"""The plugin's attachment registry (``gateway_plugin/attachments/registry.py``, with its
file store ``files.py``) on a real SQLite file, real files in a storage directory and a
real channel directory."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canonical import attachments as spec
from canonical.protocol import iso_from_unix, new_id
from gateway_plugin.attachments import media_jobs
from gateway_plugin.attachments.files import ORPHAN_TTL_S, UPLOAD_TTL_S
from gateway_plugin.attachments.flow import added_event, display_messages
from gateway_plugin.attachments.record import AttachmentError
from gateway_plugin.attachments.registry import AttachmentRegistry
from gateway_plugin.channels.store import ChannelDirectory, ChannelEntry

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 40


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def channels(tmp_path: Path) -> Iterator[ChannelDirectory]:
    directory = ChannelDirectory(tmp_path / "channels.db")
    directory.ensure_default()
    yield directory
    directory.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(tmp_path: Path, clock: Clock) -> Iterator[AttachmentRegistry]:
    made = AttachmentRegistry(
        tmp_path / "data" / "attachments.db",
        tmp_path / "storage",
        "t123",
        retention_days=7,
        max_bytes=1024 * 1024,
        clock=clock,
    )
    yield made
    made.close()


def home(channels: ChannelDirectory) -> ChannelEntry:
    return channels.ensure_default()


def put(registry: AttachmentRegistry, data: bytes) -> str:
    """An edge's part of an upload: the file at its server-generated name."""
    attachment_id = new_id()
    registry.path_of(attachment_id).write_bytes(data)
    return attachment_id


def register(
    registry: AttachmentRegistry,
    entry: ChannelEntry,
    data: bytes,
    filename: str = "notes.md",
    mime: str = "",
) -> str:
    attachment_id = put(registry, data)
    registry.register_inbound(
        attachment_id,
        entry,
        filename=filename,
        mime_type=mime,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    return attachment_id


def test_a_registered_upload_has_the_spec_descriptor(
    registry: AttachmentRegistry, channels: ChannelDirectory, clock: Clock
) -> None:
    entry = home(channels)
    attachment_id = register(registry, entry, PNG, "photo.png", "image/png")
    record = registry.get(attachment_id)
    assert record is not None
    descriptor = record.descriptor()
    assert descriptor == {
        "attachment_id": attachment_id,
        "filename": "photo.png",
        "mime_type": "image/png",
        "size": len(PNG),
        "kind": "image",
        "inline_image": True,
        "direction": "inbound",
        "conversation_id": entry.conversation_id,
        "message_id": None,
        "created_at": "2023-11-14T22:13:20.000+00:00",
        "expires_at": "2023-11-21T22:13:20.000+00:00",
        "download_path": f"/attachments/{attachment_id}",
    }
    assert registry.path_of(attachment_id).parent == tmp_storage(registry) / "t123"


def tmp_storage(registry: AttachmentRegistry) -> Path:
    return registry.storage_root


def test_registration_needs_the_file_at_its_size_and_a_digest(
    registry: AttachmentRegistry, channels: ChannelDirectory
) -> None:
    entry = home(channels)
    with pytest.raises(AttachmentError) as missing:
        registry.register_inbound(
            new_id(), entry, filename="a", mime_type="", size=3, sha256="0" * 64
        )
    assert missing.value.code == "unavailable"
    attachment_id = put(registry, b"abc")
    with pytest.raises(AttachmentError) as wrong_size:
        registry.register_inbound(
            attachment_id, entry, filename="a", mime_type="", size=4, sha256="0" * 64
        )
    assert wrong_size.value.code == "bad_request"
    with pytest.raises(AttachmentError):
        registry.register_inbound(
            "../../etc/passwd", entry, filename="a", mime_type="", size=3, sha256="0" * 64
        )


def test_retention_zero_keeps_attachments_forever(
    tmp_path: Path, channels: ChannelDirectory
) -> None:
    forever = AttachmentRegistry(
        tmp_path / "forever.db", tmp_path / "storage", "t1", retention_days=0
    )
    try:
        attachment_id = register(forever, home(channels), b"keep")
        record = forever.get(attachment_id)
        assert record is not None and record.expires is None
        assert record.descriptor()["expires_at"] is None
        assert forever.cleanup(time.time() + 10 * 365 * 86400)["expired"] == 0
        assert forever.get(attachment_id) is not None
    finally:
        forever.close()


def test_claims_check_conversation_use_and_expiry(
    registry: AttachmentRegistry, channels: ChannelDirectory, clock: Clock
) -> None:
    entry = home(channels)
    other = channels.create_channel("Other")
    mine = register(registry, entry, b"one")
    theirs = register(registry, other, b"two")

    def refusal(ids: list[str], where: ChannelEntry = entry) -> str:
        with pytest.raises(AttachmentError) as refused:
            registry.validate_claim(ids, where)
        assert refused.value.code == "bad_request"
        return refused.value.message

    assert "another conversation" in refusal([theirs])
    assert "unknown or expired" in refusal(["0" * 32])
    assert "unknown or expired" in refusal(["not-an-id"])
    assert "distinct" in refusal([mine, mine])
    assert "at most 10" in refusal([new_id() for _ in range(11)])
    assert [r.attachment_id for r in registry.validate_claim([mine], entry)] == [mine]

    claimed = registry.claim(
        [mine], entry, message_id="u-r1", run_id="run1", claim_key="k1", text="hello"
    )
    assert [r.message_id for r in claimed] == ["u-r1"]
    assert "already sent" in refusal([mine])
    # The same send, retried after a crash, claims them again; another send cannot.
    again = registry.claim(
        [mine], entry, message_id="u-r1", run_id="run1", claim_key="k1", text="hello"
    )
    assert [r.attachment_id for r in again] == [mine]
    assert (
        registry.claim([mine], entry, message_id="u-r2", run_id="r2", claim_key="k2", text="x")
        == []
    )

    clock.now += 7 * 86400 + 1
    assert "unknown or expired" in refusal([theirs], other)


def test_a_thread_may_adopt_its_channels_flat_lane_upload_when_allowed(
    registry: AttachmentRegistry, channels: ChannelDirectory
) -> None:
    entry = home(channels)
    thread = channels.create_thread(entry.chat_id, "A thread")
    upload = register(registry, entry, b"x")
    with pytest.raises(AttachmentError):
        registry.validate_claim([upload], thread)
    assert registry.validate_claim([upload], thread, thread_may_adopt=True)
    claimed = registry.claim(
        [upload], thread, message_id="u-c1", run_id="r", claim_key="iris:c1", text="t"
    )
    assert claimed[0].conversation_id == thread.conversation_id
    assert claimed[0].lane == (thread.chat_id, thread.thread_id)


def test_only_sent_uploads_and_deliverables_are_listed(
    registry: AttachmentRegistry, channels: ChannelDirectory, tmp_path: Path
) -> None:
    entry = home(channels)
    unsent = register(registry, entry, b"draft")
    sent = register(registry, entry, b"sent")
    registry.claim([sent], entry, message_id="u-1", run_id="r1", claim_key="k", text="hi")
    produced = tmp_path / "agent-output" / "report.pdf"
    produced.parent.mkdir()
    produced.write_bytes(b"%PDF-1.4 report")
    outbound = registry.add_outbound(produced, entry, message_id="draft-r1", run_id="r1")
    assert produced.read_bytes() == b"%PDF-1.4 report", "the agent's file is copied, untouched"
    assert outbound.kind == "document" and outbound.mime_type == "application/pdf"
    assert outbound.sha256 == hashlib.sha256(b"%PDF-1.4 report").hexdigest()
    listed = [r.attachment_id for r in registry.for_conversation(entry.conversation_id)]
    assert listed == [sent, outbound.attachment_id]
    assert unsent not in listed
    event = added_event(outbound)
    assert event["type"] == "attachment.added" and event["lane"] == [entry.chat_id, None]
    assert event["attachment"]["direction"] == "outbound"
    assert event["attachment"]["message_id"] == "draft-r1"


def test_deliverables_larger_than_the_limit_are_refused(
    registry: AttachmentRegistry, channels: ChannelDirectory, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as fh:
        fh.truncate(1024 * 1024 + 1)
    with pytest.raises(AttachmentError) as refused:
        registry.add_outbound(big, home(channels))
    assert refused.value.code == "too_large"
    assert os.listdir(registry.directory) == []


def test_a_voice_deliverable_and_an_image_sent_as_a_document(
    registry: AttachmentRegistry, channels: ChannelDirectory, tmp_path: Path
) -> None:
    voice = tmp_path / "reply.ogg"
    voice.write_bytes(b"OggS" + b"\0" * 20)
    assert registry.add_outbound(voice, home(channels), kind="voice").kind == "voice"
    image = tmp_path / "scan.png"
    image.write_bytes(PNG)
    as_document = registry.add_outbound(image, home(channels), kind="document")
    assert (as_document.kind, as_document.inline_image) == ("document", False)
    assert registry.add_outbound(image, home(channels)).inline_image is True


def test_cleanup_deletes_expired_abandoned_and_orphaned_files_only_in_storage(
    registry: AttachmentRegistry, channels: ChannelDirectory, clock: Clock, tmp_path: Path
) -> None:
    entry = home(channels)
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(PNG)
    old = register(registry, entry, b"old")
    delivered = registry.add_outbound(outside, entry)
    clock.now += 3 * 86400
    fresh = register(registry, entry, b"fresh")
    incoming = spec.incoming_dir(registry.storage_root, "t123")
    incoming.mkdir(parents=True)
    (incoming / f"{new_id()}.part").write_bytes(b"half")
    uploads = spec.uploads_dir(registry.storage_root, "t123")
    uploads.mkdir(parents=True)
    stale_upload = uploads / f"{new_id()}.part"
    stale_upload.write_bytes(b"half")
    orphan = registry.path_of(new_id())
    orphan.write_bytes(b"never registered")
    unrelated = registry.directory / "README"
    unrelated.write_text("not ours to judge", encoding="utf-8")
    for path in (incoming / os.listdir(incoming)[0], stale_upload, orphan):
        os.utime(path, (clock.now - UPLOAD_TTL_S - ORPHAN_TTL_S,) * 2)

    clock.now += 4 * 86400 + 1  # old and delivered are now 7 days + 1 s old
    counts = registry.cleanup()
    assert counts == {"expired": 2, "missing": 0, "partial": 2, "orphans": 1, "previews": 0}
    assert registry.get(old) is None and registry.get(delivered.attachment_id) is None
    assert not registry.path_of(old).exists()
    assert registry.get(fresh) is not None
    assert outside.read_bytes() == PNG, "files outside storage are never touched"
    assert unrelated.exists()
    assert not orphan.exists() and not stale_upload.exists()


def test_cleanup_forgets_rows_whose_files_vanished(
    registry: AttachmentRegistry, channels: ChannelDirectory
) -> None:
    attachment_id = register(registry, home(channels), b"gone")
    registry.path_of(attachment_id).unlink()
    assert registry.get(attachment_id) is None
    assert registry.cleanup()["missing"] == 1
    assert registry.records([attachment_id]) == []


def test_cleanup_deletes_the_previews_of_attachments_that_are_gone(
    registry: AttachmentRegistry, channels: ChannelDirectory, clock: Clock
) -> None:
    entry = home(channels)
    expiring = register(registry, entry, b"a")
    clock.now += 7 * 86400 + 1
    vanished, kept = register(registry, entry, b"b"), register(registry, entry, b"c")
    registry.path_of(vanished).unlink()  # deleted behind the registry's back
    previews = {}
    for attachment_id in (expiring, vanished, kept):
        out = media_jobs.derived_dir(registry.directory, attachment_id)
        out.mkdir(parents=True)
        (out / "thumb.webp").write_bytes(b"webp")
        previews[attachment_id] = out

    counts = registry.cleanup()
    assert (counts["expired"], counts["missing"], counts["previews"]) == (1, 1, 2)
    assert not previews[expiring].exists() and not previews[vanished].exists()
    assert (previews[kept] / "thumb.webp").exists()


def test_history_shows_the_users_text_and_maps_sends_to_transcript_ids(
    registry: AttachmentRegistry, channels: ChannelDirectory, clock: Clock
) -> None:
    entry = home(channels)
    first = register(registry, entry, b"# notes")
    second = register(registry, entry, PNG, "p.png")
    start = clock.now
    registry.claim([first], entry, message_id="u-r1", run_id="a", claim_key="k1", text="read this")
    clock.now += 60
    registry.claim([second], entry, message_id="u-r2", run_id="b", claim_key="k2", text="and this")

    def ts(offset: float) -> str | None:
        return iso_from_unix(start + offset)

    stored = [
        # An earlier plain turn with the same words is not the send.
        {"message_id": "m1", "role": "user", "text": "read this", "ts": ts(-600)},
        {"message_id": "m2", "role": "assistant", "text": "ok", "ts": ts(-590)},
        {
            "message_id": "m3",
            "role": "user",
            "text": "[Content of notes.md]:\n# notes\n\nread this",
            "ts": ts(0.2),
        },
        {"message_id": "m4", "role": "assistant", "text": "done", "ts": ts(3)},
        {
            "message_id": "m5",
            "role": "user",
            "text": "[The user sent an image~ ...]\n[If you need ... ~]\n\nand this",
            "ts": ts(60.5),
        },
        {"message_id": "m6", "role": "user", "text": "and this", "ts": ts(90)},
    ]
    shown, anchors = display_messages(registry, entry.conversation_id, stored)
    assert [m["text"] for m in shown] == [
        "read this",
        "ok",
        "read this",
        "done",
        "and this",
        "and this",
    ]
    assert anchors == {"u-r1": "m3", "u-r2": "m5"}
    assert stored[2]["text"].startswith("[Content"), "the transcript itself is not modified"


def test_sanitised_names_and_types(registry: AttachmentRegistry) -> None:
    assert spec.sanitize_filename("../../etc/passwd") == "passwd"
    assert spec.sanitize_filename("C:\\Users\\me\\a\x00b.txt") == "ab.txt"
    assert spec.sanitize_filename("..") == "file" and spec.sanitize_filename(None) == "file"
    long = spec.sanitize_filename("x" * 500 + ".markdown")
    assert len(long) == spec.MAX_FILENAME_CHARS and long.endswith(".markdown")
    assert spec.guess_mime("a.md") == "text/markdown"
    assert spec.guess_mime("a.bin", "application/octet-stream") == "application/octet-stream"
    assert spec.guess_mime("a.json", "Application/JSON; charset=utf-8") == "application/json"
    assert spec.guess_mime("a.txt", "not a type") == "text/plain"
    assert spec.classify("image/png", PNG) == ("image", True)
    assert spec.classify("image/svg+xml", b"<svg") == ("image", False)
    assert spec.classify("audio/ogg") == ("voice", False)
    assert spec.classify("audio/mpeg") == ("audio", False)
    assert spec.classify("video/mp4") == ("video", False)
    assert spec.is_text("application/json", "a.json") and spec.is_text("", "notes.md")
    assert not spec.is_text("application/pdf", "a.pdf")
    assert spec.tenant_dir(Path("/s"), "../../x").name.startswith("t-")


def test_a_tiny_retention_from_the_settings_expires_and_cleans_up(
    tmp_path: Path, channels: ChannelDirectory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from canonical.settings import load_settings

    monkeypatch.setenv("ANDROID_ATTACHMENT_RETENTION_DAYS", str(0.5 / 86400))
    settings = load_settings()
    short = AttachmentRegistry(
        tmp_path / "short.db",
        tmp_path / "storage",
        "t9",
        retention_days=settings.attachment_retention_days,
    )
    try:
        attachment_id = register(short, home(channels), b"brief")
        assert short.get(attachment_id) is not None
        time.sleep(0.6)
        assert short.get(attachment_id) is None, "expired before any cleanup ran"
        assert short.cleanup()["expired"] == 1
        assert not short.path_of(attachment_id).exists()
    finally:
        short.close()
