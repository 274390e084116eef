"""Safe opening of untrusted media with PyAV, and FFmpeg errors mapped to MediaError."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

import av
import av.error
from av.container import InputContainer

from ..errors import MediaError

__all__ = ["AUDIO_DEMUXERS", "VIDEO_DEMUXERS", "ffmpeg_errors", "open_input"]

# FFmpeg matches a demuxer when any name in its comma list is whitelisted, so "mov"
# admits mp4/m4a/3gp and "matroska" admits webm. Playlist demuxers (hls, concat, ...)
# that would open *other* files or URLs are never on the list.
VIDEO_DEMUXERS = "mov,matroska"
AUDIO_DEMUXERS = "mov,matroska,ogg,wav,flac,mp3,aac,amr,caf"


def open_input(path: Path, demuxers: str) -> InputContainer:
    """Open ``path`` for reading with only ``demuxers`` and the ``file`` protocol."""
    try:
        return av.open(
            str(path),
            mode="r",
            options={"format_whitelist": demuxers, "protocol_whitelist": "file"},
            metadata_errors="replace",  # hostile tags are not UTF-8
        )
    except av.error.ArgumentError:
        raise MediaError(
            "unsupported", "container format not accepted for this media kind"
        ) from None
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise MediaError("corrupt", f"cannot read the file: {_describe(exc)}") from None


@contextlib.contextmanager
def ffmpeg_errors(what: str) -> Iterator[None]:
    """Turn decoder/encoder failures inside the block into ``MediaError('corrupt')``."""
    try:
        yield
    except MediaError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, EOFError) as exc:
        if getattr(exc, "errno", None) == errno.ENOMEM or isinstance(exc, MemoryError):
            # The transcoder's memory cap (workers.media.child), not a broken file.
            raise MediaError("too_large", f"{what} needs more memory than allowed") from None
        raise MediaError("corrupt", f"{what} failed: {_describe(exc)}") from None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."
