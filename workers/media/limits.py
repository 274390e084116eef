"""Caps and output geometry shared by the transcoders."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MediaLimits"]


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """What a transcoder accepts and produces.

    ``max_pixels`` caps an image's or a video frame's width x height (checked from the
    header, before any pixel is decoded; for video also on every decoded frame, since a
    codec may change size mid-stream). Pillow's own guard (``Image.MAX_IMAGE_PIXELS``,
    89.5 MP: a warning above it, an error above twice it) still applies on top, so a
    cap above ~179 MP has no effect. ``max_seconds`` caps audio duration.
    """

    max_pixels: int = 80_000_000
    max_seconds: float = 3600.0
    thumb_size: int = 512
    preview_seconds: float = 10.0
    preview_short_side: int = 360
    preview_fps: int = 30
    voice_bitrate: int = 32_000
