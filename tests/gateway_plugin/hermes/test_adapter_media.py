"""The adapter's media send methods (gateway_plugin/hermes/adapter_media.py): called the way Hermes
calls them, on a real attachment registry and channel directory; Hermes' defaults stand in
for what cannot be stored."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from canonical.model import Json, Lane
from gateway_plugin.attachments.registry import AttachmentRegistry
from gateway_plugin.channels.store import ChannelDirectory, ChannelEntry
from gateway_plugin.hermes import bridge as hb
from gateway_plugin.hermes.adapter_media import MediaSendsMixin

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 40
FILE_METHODS = ("send_image_file", "send_voice", "send_video", "send_document")


class Controller:
    """What `attachment_flow.deliver` uses of the controller, on real stores."""

    def __init__(self, root: Path) -> None:
        self.channels = ChannelDirectory(root / "channels.db")
        self.channels.ensure_default()
        self.attachments = AttachmentRegistry(root / "attachments.db", root / "storage", "t1")
        self.emitted: list[Json] = []

    def lane_entry(self, lane: Lane) -> ChannelEntry | None:
        return self.channels.get(lane[0], lane[1])

    def active_run(self, lane: Lane) -> None:
        return None

    def emit(self, events: list[Json]) -> list[Json]:
        self.emitted.extend(events)
        return events


def _hermes_default(method: str) -> Callable[..., Awaitable[str]]:
    async def default(self: HermesDefaults, *args: Any, **kwargs: Any) -> str:
        self.defaults.append((method, args, kwargs))
        return f"hermes {method}"

    return default


class HermesDefaults:
    """Stands in for BasePlatformAdapter behind the mixin: records which default ran."""

    def __init__(self) -> None:
        self.defaults: list[tuple[str, tuple[Any, ...], Json]] = []

    send_image_file = _hermes_default("send_image_file")
    send_voice = _hermes_default("send_voice")
    send_video = _hermes_default("send_video")
    send_document = _hermes_default("send_document")
    send_image = _hermes_default("send_image")


class Adapter(MediaSendsMixin, HermesDefaults):
    def __init__(self, controller: Controller | None) -> None:
        super().__init__()
        self.controller = controller  # a stand-in
        self.texts: list[tuple[str, str]] = []

    def _lane(self, chat_id: str, metadata: dict[str, Any] | None) -> Lane | None:
        assert self.controller is not None
        thread_id = (metadata or {}).get("thread_id")
        entry = self.controller.channels.get(chat_id, thread_id)
        return (entry.chat_id, entry.thread_id) if entry else None

    async def send(self, chat_id: str, content: str, **_: Any) -> Any:
        self.texts.append((chat_id, content))
        return hb.SendResult(success=True, message_id="text")


@pytest.fixture
def controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Controller]:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    made = Controller(tmp_path)
    yield made
    made.attachments.close()
    made.channels.close()


def _file(tmp_path: Path, name: str, data: bytes = b"data") -> str:
    path = tmp_path / "agent" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return str(path)


def _params(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_send_methods_have_hermes_signatures() -> None:
    for method in (*FILE_METHODS, "send_image", "send_multiple_images"):
        assert _params(getattr(MediaSendsMixin, method)) == _params(
            getattr(hb.BasePlatformAdapter, method)
        ), method
    assert MediaSendsMixin.send_voice.__name__ == "send_voice"


async def test_files_sent_with_hermes_keywords_are_stored_with_the_methods_kind(
    controller: Controller, tmp_path: Path
) -> None:
    adapter = Adapter(controller)
    voice = await adapter.send_voice(
        chat_id="android:default", audio_path=_file(tmp_path, "note.ogg"), metadata=None
    )
    video = await adapter.send_video(
        chat_id="android:default", video_path=_file(tmp_path, "clip.mp4"), metadata=None
    )
    image = await adapter.send_image_file(
        chat_id="android:default", image_path=_file(tmp_path, "chart.png", PNG), metadata=None
    )
    document = await adapter.send_document(
        chat_id="android:default",
        file_path=_file(tmp_path, "r.bin"),
        caption="the report",
        file_name="report.pdf",
    )
    added = [e["attachment"] for e in controller.emitted]
    assert [e["type"] for e in controller.emitted] == ["attachment.added"] * 4
    assert [a["attachment_id"] for a in added] == [
        r.message_id for r in (voice, video, image, document)
    ]
    assert [(a["kind"], a["filename"]) for a in added] == [
        ("voice", "note.ogg"),
        ("video", "clip.mp4"),
        ("image", "chart.png"),
        ("document", "report.pdf"),
    ]
    assert added[2]["inline_image"] is True
    assert adapter.texts == [("android:default", "the report")]
    assert adapter.defaults == []


async def test_what_cannot_be_stored_goes_to_hermes_default_with_the_same_arguments(
    controller: Controller, tmp_path: Path
) -> None:
    adapter = Adapter(controller)
    missing = str(tmp_path / "missing.mp4")
    assert await adapter.send_video("android:default", missing, "c", "r", None, extra=1) == (
        "hermes send_video"
    )
    unknown_lane = {"thread_id": "nope"}
    await adapter.send_document(
        chat_id="android:default",
        file_path=_file(tmp_path, "a.txt"),
        file_name="a.txt",
        metadata=unknown_lane,
    )
    unconnected = Adapter(None)
    image = _file(tmp_path, "x.png", PNG)
    await unconnected.send_image_file("android:default", image)
    assert unconnected.defaults == [
        ("send_image_file", ("android:default", image, None, None, None), {})
    ]
    assert adapter.defaults == [
        ("send_video", ("android:default", missing, "c", "r", None), {"extra": 1}),
        (
            "send_document",
            (
                "android:default",
                str(tmp_path / "agent" / "a.txt"),
                None,
                "a.txt",
                None,
                unknown_lane,
            ),
            {},
        ),
    ]
    assert controller.emitted == []
    with pytest.raises(TypeError):
        await adapter.send_voice(chat_id="android:default", image_path="x")
