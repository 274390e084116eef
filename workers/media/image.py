"""Image thumbnails: WebP, longest side <= 512 px, orientation applied, EXIF stripped.

Guards: a pixel cap checked from the header before decoding, Pillow's own
decompression-bomb check (``Image.MAX_IMAGE_PIXELS``), a cap on a JPEG's scans (each
is a pass over the whole image), and a short list of accepted formats. Saving without ``exif=``/``icc_profile=``/``xmp=`` writes no metadata, so GPS
and camera data never reach the thumbnail.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Any

from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from ..atomic import atomic_output
from ..errors import MediaError
from .limits import MediaLimits

__all__ = ["IMAGE_FORMATS", "MAX_JPEG_SCANS", "THUMB_NAME", "jpeg_scans", "make_thumbnail"]

IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "AVIF")
THUMB_NAME = "thumb.webp"  # canonical.attachments.THUMBNAIL_NAME: the edge serves it
MAX_JPEG_SCANS = 500
_UNSUPPORTED_MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (4, b"ftypheic", "HEIC"),
    (4, b"ftypheix", "HEIC"),
    (4, b"ftypmif1", "HEIF"),
    (4, b"ftypmsf1", "HEIF"),
    (0, b"II*\x00", "TIFF"),
    (0, b"MM\x00*", "TIFF"),
    (0, b"8BPS", "PSD"),
    (0, b"\xff\x0a", "JPEG XL"),
    (4, b"JXL ", "JPEG XL"),
)


def make_thumbnail(src: Path, out_dir: Path, limits: MediaLimits) -> dict[str, Any]:
    """Write ``out_dir/thumb.webp`` from the image at ``src``; return its description."""
    thumb, source = _decode_thumbnail(src, limits)
    out = out_dir / THUMB_NAME
    with atomic_output(out) as tmp:
        thumb.save(tmp, "WEBP", quality=80, method=4)
    return {"thumbnail": out, "width": thumb.width, "height": thumb.height, **source}


def _decode_thumbnail(src: Path, limits: MediaLimits) -> tuple[Image.Image, dict[str, Any]]:
    try:
        with Image.open(src, formats=IMAGE_FORMATS) as im:
            width, height = im.size
            if width * height > limits.max_pixels:
                raise MediaError(
                    "too_large",
                    f"{width}x{height} image has {width * height} pixels; the cap is {limits.max_pixels}",
                )
            if im.format in ("JPEG", "MPO"):
                scans = jpeg_scans(src, MAX_JPEG_SCANS)
                if scans > MAX_JPEG_SCANS:
                    raise MediaError(
                        "too_large",
                        f"the JPEG has more than {MAX_JPEG_SCANS} scans; each one is a pass "
                        "over the whole image",
                    )
            if im.format == "JPEG":
                im.draft("RGB", (limits.thumb_size, limits.thumb_size))  # DCT-domain downscale
            thumb = _upright_without_metadata(im)
            thumb.thumbnail(
                (limits.thumb_size, limits.thumb_size), Image.Resampling.LANCZOS, reducing_gap=3.0
            )
            has_alpha = thumb.mode in ("RGBA", "LA", "PA") or "transparency" in thumb.info
            thumb = thumb.convert("RGBA" if has_alpha else "RGB")
            source = {"source_format": im.format, "source_width": width, "source_height": height}
            return thumb, source
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaError("too_large", f"decompression bomb guard: {exc}") from None
    except UnidentifiedImageError:
        kind = _sniff_unsupported(src)
        if kind:
            raise MediaError("unsupported", f"{kind} images are not supported") from None
        raise MediaError("corrupt", "not a readable image") from None
    except (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error) as exc:
        raise MediaError("corrupt", f"image does not decode: {exc}") from None
    except UserWarning as exc:  # "Corrupt EXIF data" etc., when warnings are errors (-W error)
        raise MediaError("corrupt", f"image does not decode: {exc}") from None


def jpeg_scans(src: Path, limit: int) -> int:
    """How many scans the first image of the JPEG at ``src`` has (counting stops past
    ``limit``). A progressive JPEG may repeat scans of a few bytes each, and libjpeg
    makes a pass over every coefficient of the image for each: 95 bytes a scan cost about
    5 ms at 64 MP, so a 64 MiB upload would cost an hour of CPU. Real encoders write
    about ten. Stops at anything it does not understand (the decoder judges that)."""
    with src.open("rb") as fh:
        if os.fstat(fh.fileno()).st_size < 4:
            return 0
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _count_scans(buf, limit)


def _count_scans(buf: mmap.mmap, limit: int) -> int:
    end = len(buf)
    pos, scans = 2, 0  # after SOI
    while pos + 4 <= end and buf[pos] == 0xFF:
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker == 0xD9:  # EOI
            break
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            pos += 2
            continue
        pos += 2 + int.from_bytes(buf[pos + 2 : pos + 4], "big")
        if marker != 0xDA:  # SOS: its entropy-coded data runs to the next real marker
            continue
        scans += 1
        if scans > limit:
            break
        while True:
            pos = buf.find(b"\xff", pos)
            if pos < 0 or pos + 1 >= end:
                return scans
            following = buf[pos + 1]
            if following == 0xFF:
                pos += 1
            elif following == 0x00 or 0xD0 <= following <= 0xD7:  # stuffing, restart
                pos += 2
            else:
                break
    return scans


_METADATA_KEYS = ("exif", "xmp", "XML:com.adobe.xmp", "icc_profile", "Raw profile type exif")


def _upright_without_metadata(im: Image.Image) -> Image.Image:
    """Apply the EXIF orientation (``ImageOps.exif_transpose``) and drop all metadata.

    The orientation is read first; then the raw EXIF/XMP/ICC blobs are removed from
    ``im.info`` so nothing re-serialises them (Pillow's ``exif_transpose`` rewrites the
    EXIF of the copy, which fails on some malformed EXIF). Unreadable EXIF means
    "display as stored" rather than failing a decodable image.
    """
    try:
        orientation = im.getexif().get(ExifTags.Base.Orientation, 1)
    except (OSError, SyntaxError, ValueError, EOFError, struct.error, TypeError, UserWarning):
        orientation = 1
    for key in _METADATA_KEYS:
        im.info.pop(key, None)
    if orientation == 1:
        return im.copy()
    return ImageOps.exif_transpose(im)


def _sniff_unsupported(src: Path) -> str | None:
    try:
        with src.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return None
    for offset, magic, name in _UNSUPPORTED_MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return name
    return None
