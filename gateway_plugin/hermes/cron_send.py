"""Hermes' standalone sender: cron deliveries from any Hermes process (a `hermes cron`
run by the CLI, or the gateway itself), written to our outbox without a running adapter."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from gateway.session_context import get_session_env

from canonical.errors import SettingsError
from gateway_plugin.hermes import contract
from gateway_plugin.hermes.bridge import (
    PLATFORM,
    PlatformConfig,
    delivery_chat_id,
    get_hermes_home,
    settings_from,
    tenant_for,
)
from gateway_plugin.hermes.files import deliverable_path

log = logging.getLogger("hdg.plugin")


async def standalone_send(
    pconfig: Any,
    chat_id: str,
    message: str,
    thread_id: str | None = None,
    media_files: Any = None,
    force_document: bool = False,
    **_: Any,
) -> dict[str, Any]:
    """Hermes' standalone_sender_fn: cron run by the CLI, with or without a gateway running.
    ``media_files`` are Hermes' (path, is_voice) pairs: stored as attachments."""
    from gateway_plugin.delivery.cron import append_delivery

    try:
        settings = settings_from(pconfig if isinstance(pconfig, PlatformConfig) else None)
    except SettingsError as exc:
        return {"error": str(exc)}
    home = Path(get_hermes_home())
    data_dir = settings.data_dir or home / PLATFORM
    chat_id = delivery_chat_id(chat_id, settings)
    job_id = get_session_env("HERMES_CRON_JOB_ID") or None
    media = deliverables(media_files, force_document=force_document)
    return await asyncio.to_thread(
        append_delivery,
        settings,
        data_dir,
        tenant_for(settings, home),
        chat_id,
        thread_id,
        message,
        job_id,
        media,
    )


def deliverables(
    media_files: Any, *, force_document: bool = False
) -> list[tuple[Path, str | None]]:
    """(path, attachment kind) of each file Hermes may deliver, routed to a kind as Hermes'
    cron routes a MEDIA: file to an adapter's send method (``_send_media_via_adapter``):
    audio → voice, video, image file, else document."""
    from gateway.platforms.base import should_send_media_as_audio

    image_exts, video_exts = _media_extensions()

    from gateway_plugin.delivery.cron import MEDIA_KINDS

    out: list[tuple[Path, str | None]] = []
    for item in media_files or []:
        raw, is_voice = item if isinstance(item, tuple | list) else (item, False)
        path = deliverable_path(str(raw))
        if path is None:
            log.warning("android: refusing to deliver a file Hermes does not allow")
            continue
        ext = path.suffix.lower()
        if force_document:
            method = "send_document"
        elif should_send_media_as_audio(PLATFORM, ext, is_voice=bool(is_voice)):
            method = "send_voice"
        elif ext in video_exts:
            method = "send_video"
        elif ext in image_exts:
            method = "send_image_file"
        else:
            method = "send_document"
        out.append((path, MEDIA_KINDS[method]))
    return out


def _media_extensions() -> tuple[frozenset[str], frozenset[str]]:
    """(image, video) extensions as Hermes' cron routes them; none (every file is a
    document) when this Hermes lacks them."""
    if not contract.enabled(contract.CRON_MEDIA_KINDS):
        return frozenset(), frozenset()
    from cron.scheduler import _IMAGE_EXTS, _VIDEO_EXTS

    return frozenset(_IMAGE_EXTS), frozenset(_VIDEO_EXTS)


__all__ = ["deliverables", "standalone_send"]
