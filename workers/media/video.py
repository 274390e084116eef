"""Video: a poster frame (WebP, <= 512 px) and a short muted preview (<= 10 s, 360p
H.264 in MP4 with ``+faststart``), both orientation-aware.

Only the first ``preview_seconds`` are decoded, so the cost is bounded whatever the
length of the upload. The rotation in the source's display matrix is applied to the
poster's pixels and copied to the preview's display matrix.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
from av.video.stream import VideoStream
from PIL import Image

from ..atomic import atomic_output
from ..errors import MediaError
from ._av import VIDEO_DEMUXERS, ffmpeg_errors, open_input
from .limits import MediaLimits

__all__ = ["POSTER_NAME", "PREVIEW_NAME", "make_video_preview", "preview_size"]

POSTER_NAME = "poster.webp"
PREVIEW_NAME = "preview.mp4"
MAX_FRAMES_PER_SECOND = 240  # guard against hostile timestamps


def preview_size(width: int, height: int, short_side: int) -> tuple[int, int]:
    """Scale so the short side is at most ``short_side``; both sides even (yuv420p)."""
    scale = min(1.0, short_side / min(width, height))
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)


def make_video_preview(src: Path, out_dir: Path, limits: MediaLimits) -> dict[str, Any]:
    """Write ``poster.webp`` and ``preview.mp4`` into ``out_dir``."""
    poster_path = out_dir / POSTER_NAME
    preview_path = out_dir / PREVIEW_NAME
    with open_input(src, VIDEO_DEMUXERS) as inp:
        if not inp.streams.video:
            raise MediaError("unsupported", "the file has no video stream")
        stream = inp.streams.video[0]
        if stream.codec_context is None:
            raise MediaError("unsupported", "no decoder for this video codec")
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise MediaError("corrupt", "the video stream has no frame size")
        if width * height > limits.max_pixels:
            raise MediaError("too_large", f"{width}x{height} video frames exceed the pixel cap")
        stream.thread_type = "AUTO"
        out_w, out_h = preview_size(width, height, limits.preview_short_side)
        try:
            with (
                atomic_output(preview_path) as tmp,
                av.open(str(tmp), mode="w", format="mp4", options={"movflags": "+faststart"}) as oc,
            ):
                result = _encode(inp.decode(stream), oc, out_w, out_h, limits, poster_path)
        except BaseException:
            # The poster is written from the first frame: a job that fails after it leaves
            # no half of its output behind (the preview's temporary file goes by itself).
            poster_path.unlink(missing_ok=True)
            raise
        source_duration = round(inp.duration / av.time_base, 3) if inp.duration else None
    return {
        **result,
        "preview": preview_path,
        "poster": poster_path,
        "source_width": width,
        "source_height": height,
        "source_duration": source_duration,
    }


def _encode(
    frames: Any,
    oc: av.container.OutputContainer,
    out_w: int,
    out_h: int,
    limits: MediaLimits,
    poster_path: Path,
) -> dict[str, Any]:
    fps = limits.preview_fps
    encoder: VideoStream | None = None
    start: float | None = None
    last_pts = -1
    decoded = 0
    encoded = 0
    rotation = 0
    max_frames = int(limits.preview_seconds * MAX_FRAMES_PER_SECOND) + 1
    max_pts = round(limits.preview_seconds * fps)
    with ffmpeg_errors("video decoding"):
        for frame in frames:
            decoded += 1
            if frame.width * frame.height > limits.max_pixels:
                # The stream's header said small; a codec may change size mid-stream.
                raise MediaError(
                    "too_large",
                    f"a {frame.width}x{frame.height} video frame exceeds the pixel cap",
                )
            t = frame.time if frame.time is not None else decoded / fps
            if start is None:
                start = t
                rotation = frame.rotation
                _write_poster(frame.to_image(), rotation, poster_path, limits.thumb_size)
                encoder = oc.add_stream(
                    "libx264", rate=fps, options={"preset": "veryfast", "crf": "30"}
                )
                encoder.width, encoder.height, encoder.pix_fmt = out_w, out_h, "yuv420p"
                encoder.time_base = Fraction(1, fps)
                if rotation:
                    encoder.set_display_rotation(rotation)
            pts = math.floor((t - start) * fps + 0.5)  # nearest slot on the output's 30 fps grid
            if pts >= max_pts or decoded > max_frames:
                break
            if pts <= last_pts:
                continue  # over the frame-rate cap (or a non-increasing timestamp): drop
            last_pts = pts
            scaled = frame.reformat(width=out_w, height=out_h, format="yuv420p")
            scaled.pts = pts
            scaled.time_base = Fraction(1, fps)
            assert encoder is not None
            oc.mux(encoder.encode(scaled))
            encoded += 1
        if encoder is None:
            raise MediaError("corrupt", "no video frame could be decoded")
        oc.mux(encoder.encode(None))
    display = (out_h, out_w) if abs(rotation) == 90 else (out_w, out_h)
    return {
        "width": display[0],
        "height": display[1],
        "frames": encoded,
        "duration": round((last_pts + 1) / fps, 3),
        "rotation": rotation,
    }


_TRANSPOSE = {
    90: Image.Transpose.ROTATE_90,
    -90: Image.Transpose.ROTATE_270,
    270: Image.Transpose.ROTATE_270,
    180: Image.Transpose.ROTATE_180,
    -180: Image.Transpose.ROTATE_180,
}


def _write_poster(image: Image.Image, rotation: int, path: Path, size: int) -> None:
    """``rotation`` is counter-clockwise degrees, as PyAV's ``VideoFrame.rotation``."""
    if rotation in _TRANSPOSE:
        image = image.transpose(_TRANSPOSE[rotation])
    image.thumbnail((size, size), Image.Resampling.LANCZOS)
    with atomic_output(path) as tmp:
        image.convert("RGB").save(tmp, "WEBP", quality=80, method=4)
