"""The attachment file store: the tenant's directory in the deployment's shared storage
(``canonical.attachments`` describes the layout). Where a body lives, the first bytes
that classify it, copying or moving a deliverable in, and the sweeps that delete what no
registration will ever claim: abandoned HTTP bodies and resumable uploads, and orphans.

It knows files only; which ids exist and which are expired is the registry's
(``registry.py``) to say. Everything here blocks on the file system.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Set
from dataclasses import dataclass
from pathlib import Path

from canonical import attachments as spec
from canonical.protocol import new_id
from gateway_plugin.attachments.record import AttachmentError

INCOMING_TTL_S = 3600.0  # an HTTP body an edge never registered (the edge died mid-way)
UPLOAD_TTL_S = 86400.0  # a resumable iris upload nobody finished
ORPHAN_TTL_S = 3600.0  # a file whose registration never happened
COPY_BLOCK = 1024 * 1024
HEAD_BYTES = 16  # enough for every magic number ``spec.classify`` looks at


@dataclass(frozen=True)
class StoredFile:
    """A deliverable now in storage under a new id, with what was read on the way."""

    attachment_id: str
    path: Path
    size: int
    sha256: str
    head: bytes


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    with path.open("rb") as fh:
        return fh.read(size)


class AttachmentFiles:
    """The tenant's directory in the shared storage (created if missing)."""

    def __init__(self, storage_root: Path, tenant: str) -> None:
        self.storage_root = storage_root
        self.tenant = tenant
        self.directory = spec.tenant_dir(storage_root, tenant)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path_of(self, attachment_id: str) -> Path:
        return spec.attachment_path(self.storage_root, self.tenant, attachment_id)

    def store(self, source: Path, *, max_bytes: int, move: bool = False) -> StoredFile:
        """Copy (or, for a file already in storage, move) ``source`` in under a new id.

        A copy goes through ``<id>.part`` and is renamed when complete; on any failure
        nothing is left behind. The source is never modified by a copy.
        """
        try:
            stat = source.stat()
        except OSError:
            raise AttachmentError("not_found", "the file to deliver does not exist") from None
        if not source.is_file():
            raise AttachmentError("bad_request", "only regular files can be delivered")
        if stat.st_size > max_bytes:
            raise AttachmentError("too_large", "the file is larger than the attachment limit")
        attachment_id = new_id()
        target = self.path_of(attachment_id)
        partial = target.with_name(attachment_id + ".part")
        digest = hashlib.sha256()
        size = 0
        head = b""
        try:
            if move:
                with source.open("rb") as fh:
                    while block := fh.read(COPY_BLOCK):
                        head = head or block[:HEAD_BYTES]
                        digest.update(block)
                        size += len(block)
                os.replace(source, target)
            else:
                with source.open("rb") as src, partial.open("wb") as dst:
                    while block := src.read(COPY_BLOCK):
                        head = head or block[:HEAD_BYTES]
                        size += len(block)
                        if size > max_bytes:
                            raise AttachmentError(
                                "too_large", "the file is larger than the attachment limit"
                            )
                        digest.update(block)
                        dst.write(block)
                os.replace(partial, target)
        except BaseException:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise
        return StoredFile(attachment_id, target, size, digest.hexdigest(), head)

    def remove(self, ids: Iterable[str]) -> None:
        """Delete the bodies of ``ids``; one already gone is no error."""
        for attachment_id in ids:
            with contextlib.suppress(FileNotFoundError):
                self.path_of(attachment_id).unlink()

    def sweep_partials(self, now: float) -> int:
        """Delete HTTP bodies and resumable uploads abandoned before their time-to-live."""
        return _sweep(
            spec.incoming_dir(self.storage_root, self.tenant), now - INCOMING_TTL_S
        ) + _sweep(spec.uploads_dir(self.storage_root, self.tenant), now - UPLOAD_TTL_S)

    def sweep_orphans(self, now: float, known: Set[str]) -> int:
        """Delete files named like an attachment (or its ``.part``) that are not in
        ``known`` and older than ``ORPHAN_TTL_S``. Anything else in the directory (a
        preview, a file with another name) is left alone."""
        removed = 0
        for path in self.directory.iterdir():
            name = path.name
            stem = name.removesuffix(".part")
            if not path.is_file() or not spec.valid_id(stem):
                continue
            if (name == stem and name in known) or _newer(path, now - ORPHAN_TTL_S):
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
        return removed


def _newer(path: Path, cutoff: float) -> bool:
    try:
        return path.stat().st_mtime > cutoff
    except FileNotFoundError:
        return True


def _sweep(directory: Path, cutoff: float) -> int:
    if not directory.is_dir():
        return 0
    removed = 0
    for path in directory.iterdir():
        if path.is_file() and not _newer(path, cutoff):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed
