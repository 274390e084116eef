"""The transcoder for each media kind, importing only the media libraries it needs.

Kept apart from ``jobs`` so the transcoder's child process (``child``) starts without
the job machinery (settings, Redis, HTTP clients: most of a second of imports).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .limits import MediaLimits

__all__ = ["TRANSCODERS", "Transcoder"]

Transcoder = Callable[[Path, Path, MediaLimits], dict[str, Any]]


def _image(src: Path, out: Path, limits: MediaLimits) -> dict[str, Any]:
    from .image import make_thumbnail

    return make_thumbnail(src, out, limits)


def _audio(src: Path, out: Path, limits: MediaLimits) -> dict[str, Any]:
    from .audio import transcode_voice

    return transcode_voice(src, out, limits)


def _video(src: Path, out: Path, limits: MediaLimits) -> dict[str, Any]:
    from .video import make_video_preview

    return make_video_preview(src, out, limits)


TRANSCODERS: dict[str, Transcoder] = {"image": _image, "audio": _audio, "video": _video}
