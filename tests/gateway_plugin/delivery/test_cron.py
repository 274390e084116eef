"""A cron run outside the gateway (gateway_plugin/delivery/cron.py through Hermes' standalone
sender, `gateway_plugin.hermes.cron_send.standalone_send`): its text and its media land in the outbox and
the attachment registry the controller serves, on real files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from canonical.model import Json
from gateway_plugin.attachments.registry import AttachmentRegistry
from gateway_plugin.channels.store import ChannelDirectory
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.hermes import bridge as hb
from gateway_plugin.hermes.bridge import PlatformConfig
from gateway_plugin.hermes.cron_send import standalone_send

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 40
CRON_TEXT = "Cronjob Response: nightly\n(job_id: j1)\n-------------\n\nthe chart"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(path))
    for name in ("ANDROID_DATA_DIR", "ANDROID_ATTACHMENTS_DIR", "ANDROID_TENANT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANDROID_HOME_CHANNEL", "android:default")
    return path


@pytest.fixture
def registry(home: Path) -> Iterator[AttachmentRegistry]:
    """The registry as the gateway's controller opens it for this Hermes home."""
    data_dir = home / "android"
    opened = AttachmentRegistry(
        data_dir / "attachments.db",
        data_dir / "attachments",
        hb.tenant_for(hb.settings_from(None), home),
    )
    yield opened
    opened.close()


def _file(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / "agent" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return str(path)


def _bytes(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def _events(home: Path) -> list[Json]:
    outbox = Outbox(home / "android" / "outbox.db")
    try:
        return outbox.since(0)[0]
    finally:
        outbox.close()


async def test_a_cli_cron_run_delivers_its_media_as_attachments_after_its_text(
    home: Path, tmp_path: Path
) -> None:
    files = {
        "chart.png": PNG,
        "note.ogg": b"OggS voice",
        "clip.mp4": b"video bytes",
        "report.pdf": b"%PDF-1.4 report",
    }
    media = [(_file(tmp_path, name, data), name == "note.ogg") for name, data in files.items()]
    media.append((str(tmp_path / "agent" / "vanished.png"), False))
    result = await standalone_send(None, "android:default", CRON_TEXT, media_files=media)
    assert result["success"] is True

    events = _events(home)
    types = [e["type"] for e in events]
    assert types[-4:] == ["attachment.added"] * 4
    assert types.index("run.finished") == len(types) - 5
    complete = events[-6]
    assert complete["type"] == "message.complete" and complete["kind"] == "cron"
    assert complete["cron_job"] == {"id": "j1", "name": "nightly"}
    assert complete["text"] == "[Cron delivery: nightly]\n\nthe chart"
    added = [e["attachment"] for e in events[-4:]]
    assert [(a["filename"], a["kind"], a["direction"]) for a in added] == [
        ("chart.png", "image", "outbound"),
        ("note.ogg", "voice", "outbound"),
        ("clip.mp4", "video", "outbound"),
        ("report.pdf", "document", "outbound"),
    ]
    channels = ChannelDirectory(home / "android" / "channels.db")
    default = channels.get("android:default")
    channels.close()
    assert default is not None
    assert {a["conversation_id"] for a in added} == {default.conversation_id}
    assert all(e["lane"] == ["android:default", None] for e in events[-4:])


async def test_the_gateway_serves_what_a_cli_cron_run_stored(
    home: Path, tmp_path: Path, registry: AttachmentRegistry
) -> None:
    chart = _file(tmp_path, "chart.png", PNG)
    await standalone_send(None, "android:default", CRON_TEXT, media_files=[(chart, False)])
    added = _events(home)[-1]["attachment"]
    record = registry.get(added["attachment_id"])
    assert record is not None and record.kind == "image" and record.inline_image
    assert _bytes(registry.path_of(record.attachment_id)) == PNG
    assert _bytes(chart) == PNG  # copied, never moved


async def test_force_document_and_an_unknown_target(home: Path, tmp_path: Path) -> None:
    chart = _file(tmp_path, "chart.png", PNG)
    await standalone_send(
        None, "android:default", CRON_TEXT, media_files=[(chart, False)], force_document=True
    )
    assert _events(home)[-1]["attachment"]["kind"] == "document"
    before = len(_events(home))
    lost = await standalone_send(None, "android:chan_999", CRON_TEXT, media_files=[(chart, False)])
    assert "error" in lost and len(_events(home)) == before


def test_register_names_the_cron_home_without_touching_the_home_channel_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hermes resolves a bare `deliver=android` from `cron_deliver_env_var` alone."""
    registered: Json = {}

    class Context:
        def register_platform(self, **kwargs: Any) -> None:
            registered.update(kwargs)

        def register_hook(self, name: str, callback: Any) -> None:
            pass

    monkeypatch.setenv(hb.CRON_HOME_ENV, "")  # restored (unset) after the test
    monkeypatch.delenv(hb.CRON_HOME_ENV)
    monkeypatch.delenv("ANDROID_HOME_CHANNEL", raising=False)
    hb.register_platform(Context())
    assert registered["cron_deliver_env_var"] == hb.CRON_HOME_ENV
    assert os.environ[hb.CRON_HOME_ENV] == hb.HOME_TARGET
    assert "ANDROID_HOME_CHANNEL" not in os.environ  # config.yaml's home_channel still counts
    monkeypatch.setenv(hb.CRON_HOME_ENV, "android:chan_3")
    hb.register_platform(Context())
    assert os.environ[hb.CRON_HOME_ENV] == "android:chan_3"  # an operator's own value stays


async def test_a_delivery_to_the_home_marker_lands_in_the_configured_home_channel(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANDROID_HOME_CHANNEL")
    config = PlatformConfig(enabled=True, extra={"home_channel": "android:yaml"})
    result = await standalone_send(config, hb.HOME_TARGET, CRON_TEXT)
    assert result["success"] is True
    complete = next(e for e in _events(home) if e["type"] == "message.complete")
    assert complete["lane"] == ["android:yaml", None] and complete["kind"] == "cron"
