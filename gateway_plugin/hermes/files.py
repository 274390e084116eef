"""Files between devices and Hermes: Hermes' media cache for inbound attachments, its
checks for the files the agent asks to deliver, its SSRF-checked image download."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path


def stage_media_file(source: Path, filename: str, mime_type: str) -> tuple[str, str]:
    """Copy an attachment into Hermes' media cache, named as its ``cache_*_from_bytes``
    helpers name files, so every agent backend (a Docker sandbox mounts the cache) can
    open it. Streams the copy (never the whole file in memory); blocking, so run it in a
    thread. Returns (host path, MIME type) for ``MessageEvent.media_urls``/``media_types``.
    """
    from gateway.platforms.base import (
        get_audio_cache_dir,
        get_document_cache_dir,
        get_image_cache_dir,
        get_video_cache_dir,
    )

    ext = Path(filename).suffix.lower()
    if not re.fullmatch(r"\.[a-z0-9]{1,8}", ext):
        ext = ""
    token = uuid.uuid4().hex[:12]
    if mime_type.startswith("image/"):
        target = get_image_cache_dir() / f"img_{token}{ext or '.jpg'}"
    elif mime_type.startswith("audio/"):
        target = get_audio_cache_dir() / f"audio_{token}{ext or '.ogg'}"
    elif mime_type.startswith("video/"):
        target = get_video_cache_dir() / f"video_{token}{ext or '.mp4'}"
    else:
        safe = re.sub(r"[^\w.\- ]", "_", Path(filename).name).strip() or "document"
        target = get_document_cache_dir() / f"doc_{token}_{safe}"
    shutil.copyfile(source, target)
    return str(target), mime_type


def deliverable_path(path: str) -> Path | None:
    """Hermes' own check for a file the agent asks to deliver (exists, regular, not a
    credential or system path); the resolved path, or None."""
    from gateway.platforms.base import validate_media_delivery_path

    safe = validate_media_delivery_path(path)
    return Path(safe) if safe else None


async def fetch_image(url: str) -> Path:
    """Download an image URL into Hermes' image cache with its SSRF protection."""
    from gateway.platforms.base import cache_image_from_url

    ext = Path(url.split("?", 1)[0]).suffix.lower()
    if ext not in (".png", ".jpg", ".jpeg", ".gif", ".webp"):
        ext = ".jpg"
    return Path(await cache_image_from_url(url, ext=ext))


__all__ = ["deliverable_path", "fetch_image", "stage_media_file"]
