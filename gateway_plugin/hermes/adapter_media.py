"""Hermes' media send methods for the `android` adapter: every file is stored as an
attachment and announced (`attachment.added`); what cannot be stored goes to Hermes'
default (`BasePlatformAdapter`'s text fallback).

The signatures are those of Hermes' `BasePlatformAdapter` (Hermes calls them with keyword
arguments): the four local-file methods take theirs from it, so they cannot drift. Which
kind each produces is `delivery.MEDIA_KINDS`, shared with a CLI cron run's deliveries.
Hermes types come from `bridge`; Hermes' file checks from `files`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canonical.model import Lane
from gateway_plugin.attachments import flow as attachment_flow
from gateway_plugin.attachments.record import AttachmentError
from gateway_plugin.delivery.cron import MEDIA_KINDS
from gateway_plugin.hermes import bridge as hb
from gateway_plugin.hermes import files

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin")

Metadata = dict[str, Any] | None


def _file_send(method: str) -> Callable[..., Awaitable[Any]]:
    """Hermes' local-file send ``method``, with Hermes' own signature (its callers pass
    keyword arguments): the file is stored as an attachment of ``MEDIA_KINDS[method]``;
    if it cannot be, Hermes' implementation runs with the same arguments."""
    signature = inspect.signature(getattr(hb.BasePlatformAdapter, method))
    file_param = list(signature.parameters)[2]  # (self, chat_id, <the file>, caption, ...)

    async def send(self: MediaSendsMixin, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        given = call.arguments
        result = await self._deliver(
            given["chat_id"],
            given[file_param],
            given["caption"],
            given["metadata"],
            filename=given.get("file_name"),
            kind=MEDIA_KINDS[method],
        )
        if result is None:
            return await self._hermes_default(method, *call.args[1:], **call.kwargs)
        return result

    send.__name__ = method
    send.__qualname__ = f"MediaSendsMixin.{method}"
    send.__signature__ = signature  # type: ignore[attr-defined]
    return send


class MediaSendsMixin:
    """Mixed into `AndroidAdapter` ahead of `BasePlatformAdapter`, whose methods are the
    fallbacks. The adapter provides `controller`, `_lane` and `send`."""

    controller: Controller | None
    _lane: Callable[[str, Metadata], Lane | None]
    send: Callable[..., Awaitable[Any]]

    async def _deliver(
        self,
        chat_id: str,
        path: str | Path,
        caption: str | None,
        metadata: Metadata,
        *,
        filename: str | None = None,
        kind: str | None = None,
        checked: bool = False,
    ) -> Any:
        """SendResult for a stored deliverable, or None when it cannot be delivered."""
        lane = self._lane(chat_id, metadata) if self.controller else None
        if self.controller is None or lane is None:
            return None
        source = Path(path) if checked else files.deliverable_path(str(path))
        if source is None:
            log.warning("android: refusing to deliver a file Hermes does not allow")
            return None
        try:
            if caption:
                await self.send(chat_id, caption, metadata=metadata)
            record = await attachment_flow.deliver(
                self.controller, lane, source, filename=filename, kind=kind
            )
        except (AttachmentError, OSError) as exc:
            log.warning("android: deliverable not stored: %s", exc)
            return None
        return hb.SendResult(success=True, message_id=record.attachment_id)

    async def _hermes_default(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Hermes' own implementation of a send method (the next class in the MRO)."""
        return await getattr(super(), method)(*args, **kwargs)

    send_image_file = _file_send("send_image_file")
    send_voice = _file_send("send_voice")
    send_video = _file_send("send_video")
    send_document = _file_send("send_document")

    async def send_image(
        self,
        chat_id: str,
        image_url: str,
        caption: str | None = None,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """An image URL: fetched (Hermes' SSRF-checked download) and stored like a file;
        if that fails, the URL goes out as text (Hermes' default). Hermes' own
        ``send_animation`` comes here too."""
        result = None
        try:
            fetched = await files.fetch_image(image_url)
        except Exception as exc:
            log.info("android: image URL not fetched (%s); sending it as text", type(exc).__name__)
        else:
            name = Path(image_url.split("?", 1)[0]).name or fetched.name
            result = await self._deliver(
                chat_id, fetched, caption, metadata, filename=name, kind="image", checked=True
            )
        if result is None:
            return await self._hermes_default(
                "send_image", chat_id, image_url, caption, reply_to, metadata
            )
        return result

    async def send_multiple_images(
        self,
        chat_id: str,
        images: list[tuple[str, str]],
        metadata: dict[str, Any] | None = None,
        human_delay: float = 0.0,
    ) -> None:
        """Each image is its own attachment: ``file://`` paths and URLs alike."""
        from urllib.parse import unquote

        for image_url, alt_text in images:
            if image_url.startswith("file://"):
                await self.send_image_file(
                    chat_id, unquote(image_url[7:]), alt_text or None, metadata=metadata
                )
            else:
                await self.send_image(chat_id, image_url, alt_text or None, metadata=metadata)


__all__ = ["MediaSendsMixin"]
