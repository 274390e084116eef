"""Attachments: what edges (HTTP uploads, iris media frames) and the plugin (the registry)
agree on. Pure functions and constants; the only I/O is path arithmetic.

Storage (``ANDROID_ATTACHMENTS_DIR``) is shared by every process of a deployment. Every
name under it is server-generated; a client's filename is display text only::

    <root>/<tenant>/<attachment_id>             a registered file (32 hex)
    <root>/<tenant>/incoming/<id>.part          an HTTP body being received
    <root>/<tenant>/uploads/<upload_id>.part    an iris chunked upload (resumable)
    <root>/<tenant>/uploads/<upload_id>.json    its metadata

The plugin's registry (SQLite in its data dir) is the authority on which ids exist, which
conversation they belong to and when they expire; edges ask it over the bus.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
import struct
import unicodedata
from pathlib import Path

ID_RE = re.compile(r"^[0-9a-f]{32}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MIME_RE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")

MAX_PER_MESSAGE = 10
INLINE_TEXT_MAX_BYTES = 100 * 1024
MAX_FILENAME_CHARS = 200
# iris media frames
CHUNK_MAX_BYTES = 512 * 1024
PULL_FRAME_BYTES = 256 * 1024
# Every binary media.pull frame starts with the media id (16 raw bytes, the 32-hex id
# decoded) and the big-endian byte offset of the data that follows.
PULL_HEADER = struct.Struct(">16sQ")

KINDS = ("image", "voice", "video", "audio", "document")
INLINE_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})
VOICE_MIMES = frozenset({"audio/ogg", "audio/opus", "audio/x-opus+ogg"})
_TEXT_MIMES = frozenset(
    {
        "application/json",
        "application/ld+json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-sh",
        "application/javascript",
        "application/sql",
        "application/x-ndjson",
    }
)
_TEXT_EXTENSIONS = frozenset(
    {
        ".txt",
        ".md",
        ".markdown",
        ".csv",
        ".tsv",
        ".log",
        ".json",
        ".jsonl",
        ".xml",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".py",
        ".js",
        ".ts",
        ".sh",
        ".sql",
        ".html",
        ".css",
        ".rst",
    }
)
_EXTRA_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".jsonl": "application/x-ndjson",
    ".webp": "image/webp",
    ".opus": "audio/opus",
    ".m4a": "audio/mp4",
}
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"BM", 0, "image/bmp"),
    (b"WEBP", 8, "image/webp"),
)


def valid_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.match(value) is not None


def tenant_dir(root: Path, tenant: str) -> Path:
    """The tenant's directory: its name when that is a safe path segment, else a digest."""
    name = (
        tenant
        if _TENANT_RE.match(tenant)
        else "t-" + hashlib.sha256(tenant.encode()).hexdigest()[:24]
    )
    return root / name


def attachment_path(root: Path, tenant: str, attachment_id: str) -> Path:
    if not valid_id(attachment_id):
        raise ValueError("not an attachment id")
    return tenant_dir(root, tenant) / attachment_id


# The media worker's WebP thumbnail of an image, beside the file (workers/media/image.py,
# gateway_plugin/media_jobs.derived_dir).
THUMBNAIL_NAME = "thumb.webp"


def thumbnail_path(root: Path, tenant: str, attachment_id: str) -> Path:
    if not valid_id(attachment_id):
        raise ValueError("not an attachment id")
    return tenant_dir(root, tenant) / "derived" / attachment_id / THUMBNAIL_NAME


def incoming_dir(root: Path, tenant: str) -> Path:
    return tenant_dir(root, tenant) / "incoming"


def uploads_dir(root: Path, tenant: str) -> Path:
    return tenant_dir(root, tenant) / "uploads"


def sanitize_filename(name: str | None, default: str = "file") -> str:
    """Display name only (never a path): last path segment, no control characters."""
    if not name:
        return default
    last = re.split(r"[/\\]", name)[-1]
    cleaned = "".join(ch for ch in last if unicodedata.category(ch)[0] != "C").strip().strip(".")
    cleaned = re.sub(r"\s+", " ", cleaned)
    if not cleaned:
        return default
    if len(cleaned) > MAX_FILENAME_CHARS:
        stem, dot, ext = cleaned.rpartition(".")
        if dot and 0 < len(ext) <= 16:
            cleaned = stem[: MAX_FILENAME_CHARS - len(ext) - 1] + "." + ext
        else:
            cleaned = cleaned[:MAX_FILENAME_CHARS]
    return cleaned


def guess_mime(filename: str, declared: str | None = None) -> str:
    """The declared Content-Type when it is a plain ``type/subtype``, else from the name."""
    if declared:
        base = declared.split(";", 1)[0].strip().lower()
        if _MIME_RE.match(base) and base != "application/octet-stream":
            return base
    ext = Path(filename).suffix.lower()
    if ext in _EXTRA_TYPES:
        return _EXTRA_TYPES[ext]
    guessed, _ = mimetypes.guess_type("f" + ext) if ext else (None, None)
    return guessed or "application/octet-stream"


def sniff_image(head: bytes) -> str | None:
    """The image type the first bytes prove, or None."""
    for magic, offset, mime in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            if mime == "image/webp" and head[:4] != b"RIFF":
                continue
            return mime
    return None


def classify(mime: str, head: bytes = b"", *, voice: bool = False) -> tuple[str, bool]:
    """(kind, inline_image). Inline previews only for formats the bytes prove."""
    if mime.startswith("image/"):
        proven = sniff_image(head)
        return "image", proven is not None and proven in INLINE_IMAGE_MIMES
    if mime.startswith("video/"):
        return "video", False
    if mime.startswith("audio/"):
        return ("voice" if voice or mime in VOICE_MIMES else "audio"), False
    return "document", False


def is_text(mime: str, filename: str) -> bool:
    """Text the agent can read inline (markdown, json, csv, source...)."""
    return (
        mime.startswith("text/")
        or mime in _TEXT_MIMES
        or mime.endswith(("+json", "+xml"))
        or Path(filename).suffix.lower() in _TEXT_EXTENSIONS
    )


__all__ = [
    "CHUNK_MAX_BYTES",
    "ID_RE",
    "INLINE_TEXT_MAX_BYTES",
    "KINDS",
    "MAX_PER_MESSAGE",
    "PULL_FRAME_BYTES",
    "PULL_HEADER",
    "SHA256_RE",
    "attachment_path",
    "classify",
    "guess_mime",
    "incoming_dir",
    "is_text",
    "sanitize_filename",
    "sniff_image",
    "tenant_dir",
    "uploads_dir",
    "valid_id",
]
