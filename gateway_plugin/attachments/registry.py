"""Attachments in the plugin: the registry (``attachments.db``), claims and retention.
What sends, the agent and the bus commands do with it is in ``attachment_flow``.

The registry is the authority on attachment ids: which exist, their conversation, whether
a send has claimed them, when they expire. Files live in the deployment's shared storage
(``canonical.attachments`` describes the layout); edges write inbound bodies there and ask
this registry, over the bus, to record them (``attachment.register``) and to resolve a
download (``attachment.get``). Nothing here imports Hermes: the controller reaches it
through ``AgentPort.stage_media``.

A send claims its attachments after the ``run_active`` check, right after the outbox
transaction that records the run, with no await in between (the controller handles one
command at a time, so no other send can claim them in that window). The send's
idempotency record carries the ids, so a retry after a crash between the two writes
claims them again before dispatching.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canonical import attachments as spec
from canonical.model import Json, Lane
from canonical.protocol import iso_from_unix, new_id
from gateway_plugin.attachments.media_jobs import drop_outputs
from gateway_plugin.errors import CommandError
from gateway_plugin.storage.sqlite_file import open_wal

if TYPE_CHECKING:
    from gateway_plugin.channels.store import ChannelEntry

log = logging.getLogger("hdg.plugin.attachments")

StageMedia = Callable[[Path, str, str], Awaitable[tuple[str, str]]]

DAY_S = 86400.0
CLEANUP_PERIOD_S = 3600.0
INCOMING_TTL_S = 3600.0  # an HTTP body an edge never registered (the edge died mid-way)
UPLOAD_TTL_S = DAY_S  # a resumable iris upload nobody finished
ORPHAN_TTL_S = 3600.0  # a file whose registration never happened
COPY_BLOCK = 1024 * 1024
CLOCK_SKEW_S = 5.0  # Hermes stores the user turn a moment after the send is recorded

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attachments (
    attachment_id TEXT PRIMARY KEY,
    direction TEXT NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    conversation_id TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    thread_id TEXT,
    filename TEXT NOT NULL,
    mime_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    kind TEXT NOT NULL,
    inline_image INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL,
    message_id TEXT,
    run_id TEXT,
    claim_key TEXT,
    claimed REAL
);
CREATE INDEX IF NOT EXISTS attachments_conversation ON attachments(conversation_id);
CREATE INDEX IF NOT EXISTS attachments_expires ON attachments(expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS sends (
    message_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    run_id TEXT,
    text TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sends_conversation ON sends(conversation_id, created);
"""
_COLUMNS = (
    "attachment_id, direction, conversation_id, chat_id, thread_id, filename, mime_type, size, "
    "sha256, kind, inline_image, created, expires, message_id, run_id, claim_key"
)


class AttachmentError(CommandError):
    """An attachment cannot be used as asked; ``code`` goes to the requester."""


@dataclass(frozen=True)
class Attachment:
    attachment_id: str
    direction: str
    conversation_id: str
    chat_id: str
    thread_id: str | None
    filename: str
    mime_type: str
    size: int
    sha256: str
    kind: str
    inline_image: bool
    created: float
    expires: float | None
    message_id: str | None
    run_id: str | None
    claim_key: str | None

    @property
    def lane(self) -> Lane:
        return (self.chat_id, self.thread_id)

    def descriptor(self, message_id: str | None = None) -> Json:
        """The wire descriptor (pheby spec); ``message_id`` overrides the stored anchor."""
        return {
            "attachment_id": self.attachment_id,
            "filename": self.filename,
            "mime_type": self.mime_type,
            "size": self.size,
            "kind": self.kind,
            "inline_image": self.inline_image,
            "direction": self.direction,
            "conversation_id": self.conversation_id,
            "message_id": message_id if message_id is not None else self.message_id,
            "created_at": iso_from_unix(self.created),
            "expires_at": iso_from_unix(self.expires),
            "download_path": f"/attachments/{self.attachment_id}",
        }


def _row(row: sqlite3.Row | tuple[Any, ...]) -> Attachment:
    values = tuple(row)
    return Attachment(
        attachment_id=values[0],
        direction=values[1],
        conversation_id=values[2],
        chat_id=values[3],
        thread_id=values[4],
        filename=values[5],
        mime_type=values[6],
        size=int(values[7]),
        sha256=values[8],
        kind=values[9],
        inline_image=bool(values[10]),
        created=float(values[11]),
        expires=None if values[12] is None else float(values[12]),
        message_id=values[13],
        run_id=values[14],
        claim_key=values[15],
    )


def _read_head(path: Path, size: int = 16) -> bytes:
    with path.open("rb") as fh:
        return fh.read(size)


class AttachmentRegistry:
    """attachments.db plus the tenant's directory in the shared storage."""

    def __init__(
        self,
        db_path: Path,
        storage_root: Path,
        tenant: str,
        *,
        retention_days: float = 7.0,
        max_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage_root = storage_root
        self.tenant = tenant
        self.directory = spec.tenant_dir(storage_root, tenant)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.retention_s = retention_days * DAY_S
        self.max_bytes = max_bytes
        self.clock = clock
        self._db = open_wal(db_path, _SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- paths and times
    def path_of(self, attachment_id: str) -> Path:
        return spec.attachment_path(self.storage_root, self.tenant, attachment_id)

    def _expires(self, now: float) -> float | None:
        return None if self.retention_s <= 0 else now + self.retention_s

    def _insert(self, record: Attachment) -> None:
        with self._lock:
            self._db.execute(
                f"INSERT INTO attachments({_COLUMNS}) VALUES ({', '.join('?' * 16)})",
                (
                    record.attachment_id,
                    record.direction,
                    record.conversation_id,
                    record.chat_id,
                    record.thread_id,
                    record.filename,
                    record.mime_type,
                    record.size,
                    record.sha256,
                    record.kind,
                    int(record.inline_image),
                    record.created,
                    record.expires,
                    record.message_id,
                    record.run_id,
                    record.claim_key,
                ),
            )

    def _select(self, where: str, params: Sequence[Any]) -> list[Attachment]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM attachments WHERE {where}", tuple(params)
            ).fetchall()
        return [_row(r) for r in rows]

    # -- inbound
    def register_inbound(
        self,
        attachment_id: str,
        entry: ChannelEntry,
        *,
        filename: str,
        mime_type: str,
        size: int,
        sha256: str,
    ) -> Attachment:
        """Record a file an edge wrote to ``<tenant>/<attachment_id>``."""
        if not spec.valid_id(attachment_id) or not spec.SHA256_RE.match(sha256 or ""):
            raise AttachmentError("bad_request", "malformed attachment registration")
        path = self.path_of(attachment_id)
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise AttachmentError(
                "unavailable", "the uploaded file is not in the shared attachment storage"
            ) from None
        if stat.st_size != size or size <= 0:
            raise AttachmentError("bad_request", "the stored file does not match its size")
        if size > self.max_bytes:
            raise AttachmentError("too_large", "the file is larger than the upload limit")
        name = spec.sanitize_filename(filename)
        mime = spec.guess_mime(name, mime_type)
        kind, inline = spec.classify(mime, _read_head(path))
        now = self.clock()
        record = Attachment(
            attachment_id,
            "inbound",
            entry.conversation_id,
            entry.chat_id,
            entry.thread_id,
            name,
            mime,
            size,
            sha256,
            kind,
            inline,
            now,
            self._expires(now),
            None,
            None,
            None,
        )
        self._insert(record)
        return record

    def get(self, attachment_id: str) -> Attachment | None:
        """A live attachment: registered, unexpired, its file present."""
        if not spec.valid_id(attachment_id):
            return None
        found = self._select("attachment_id = ?", (attachment_id,))
        if not found:
            return None
        record = found[0]
        if record.expires is not None and record.expires <= self.clock():
            return None
        if not self.path_of(attachment_id).is_file():
            return None
        return record

    def records(self, ids: Sequence[str]) -> list[Attachment]:
        """Rows for ids in the given order (missing ones skipped), expired or not."""
        if not ids:
            return []
        found = {
            r.attachment_id: r
            for r in self._select(f"attachment_id IN ({', '.join('?' * len(ids))})", ids)
        }
        return [found[i] for i in ids if i in found]

    def validate_claim(
        self, ids: Sequence[str], entry: ChannelEntry, *, thread_may_adopt: bool = False
    ) -> list[Attachment]:
        """The uploads a send may claim, or AttachmentError(bad_request) saying which not.

        ``thread_may_adopt``: an upload made in a channel's flat lane may be sent in one of
        its threads (iris auto-threading moves a send into a new thread).
        """
        if len(ids) > spec.MAX_PER_MESSAGE:
            raise AttachmentError(
                "bad_request", f"at most {spec.MAX_PER_MESSAGE} attachments per message"
            )
        if len(set(ids)) != len(ids):
            raise AttachmentError("bad_request", "attachment ids must be distinct")
        found = {r.attachment_id: r for r in self.records(list(ids))}
        out: list[Attachment] = []
        for attachment_id in ids:
            record = found.get(attachment_id) if spec.valid_id(attachment_id) else None
            if record is None or self.get(attachment_id) is None:
                raise AttachmentError(
                    "bad_request", f"attachment {attachment_id[:64]} is unknown or expired"
                )
            if record.direction != "inbound":
                raise AttachmentError("bad_request", f"attachment {attachment_id} is not an upload")
            same = record.conversation_id == entry.conversation_id
            adopted = (
                thread_may_adopt
                and entry.thread_id is not None
                and record.thread_id is None
                and record.chat_id == entry.chat_id
            )
            if not (same or adopted):
                raise AttachmentError(
                    "bad_request", f"attachment {attachment_id} belongs to another conversation"
                )
            if record.claim_key is not None:
                raise AttachmentError("bad_request", f"attachment {attachment_id} was already sent")
            out.append(record)
        return out

    def claim(
        self,
        ids: Sequence[str],
        entry: ChannelEntry,
        *,
        message_id: str,
        run_id: str | None,
        claim_key: str,
        text: str,
    ) -> list[Attachment]:
        """Anchor uploads to a user turn. Idempotent for the same ``claim_key``."""
        if not ids:
            return []
        now = self.clock()
        marks = ", ".join("?" * len(ids))
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute(
                    "UPDATE attachments SET claim_key = ?, claimed = ?, message_id = ?, run_id = ?, "
                    "conversation_id = ?, chat_id = ?, thread_id = ? "
                    f"WHERE attachment_id IN ({marks}) AND direction = 'inbound' "
                    "AND (claim_key IS NULL OR claim_key = ?)",
                    (
                        claim_key,
                        now,
                        message_id,
                        run_id,
                        entry.conversation_id,
                        entry.chat_id,
                        entry.thread_id,
                        *ids,
                        claim_key,
                    ),
                )
                cur.execute(
                    "INSERT OR REPLACE INTO sends(message_id, conversation_id, run_id, text, created) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (message_id, entry.conversation_id, run_id, text, now),
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return [r for r in self.records(list(ids)) if r.claim_key == claim_key]

    # -- outbound
    def add_outbound(
        self,
        source: Path,
        entry: ChannelEntry,
        *,
        filename: str | None = None,
        kind: str | None = None,
        message_id: str | None = None,
        run_id: str | None = None,
        move: bool = False,
    ) -> Attachment:
        """Copy (or, for a file already in storage, move) a deliverable into storage.

        Blocking (it copies): call it in a thread. The source is never modified.
        """
        try:
            stat = source.stat()
        except OSError:
            raise AttachmentError("not_found", "the file to deliver does not exist") from None
        if not source.is_file():
            raise AttachmentError("bad_request", "only regular files can be delivered")
        if stat.st_size > self.max_bytes:
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
                        head = head or block[:16]
                        digest.update(block)
                        size += len(block)
                os.replace(source, target)
            else:
                with source.open("rb") as src, partial.open("wb") as dst:
                    while block := src.read(COPY_BLOCK):
                        head = head or block[:16]
                        size += len(block)
                        if size > self.max_bytes:
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
        name = spec.sanitize_filename(filename or source.name)
        mime = spec.guess_mime(name)
        classified, inline = spec.classify(mime, head, voice=kind == "voice")
        final_kind = kind if kind in spec.KINDS else classified
        now = self.clock()
        record = Attachment(
            attachment_id,
            "outbound",
            entry.conversation_id,
            entry.chat_id,
            entry.thread_id,
            name,
            mime,
            size,
            digest.hexdigest(),
            final_kind,
            inline and final_kind == "image",
            now,
            self._expires(now),
            message_id,
            run_id,
            None,
        )
        try:
            self._insert(record)
        except BaseException:
            with contextlib.suppress(OSError):
                target.unlink()
            raise
        return record

    # -- snapshots
    def for_conversation(self, conversation_id: str) -> list[Attachment]:
        """Unexpired attachments of a conversation that devices may see: sent uploads and
        the agent's deliverables (an upload no send claimed stays private)."""
        now = self.clock()
        records = self._select(
            "conversation_id = ? AND (expires IS NULL OR expires > ?) "
            "AND (direction = 'outbound' OR claim_key IS NOT NULL) ORDER BY created",
            (conversation_id, now),
        )
        return [r for r in records if self.path_of(r.attachment_id).is_file()]

    def sends(self, conversation_id: str) -> list[tuple[str, str, float]]:
        """(message_id, original text, time) of the conversation's sends with attachments."""
        with self._lock:
            rows = self._db.execute(
                "SELECT message_id, text, created FROM sends WHERE conversation_id = ? "
                "ORDER BY created",
                (conversation_id,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), float(r[2])) for r in rows]

    # -- retention
    def cleanup(self, now: float | None = None) -> dict[str, int]:
        """Delete expired attachments (and their previews), abandoned partial files and
        orphans.

        Only files under this tenant's storage directory are ever touched; the files an
        agent produced elsewhere were copied, never moved.
        """
        now = self.clock() if now is None else now
        expired = {
            r.attachment_id for r in self._select("expires IS NOT NULL AND expires <= ?", (now,))
        }
        for attachment_id in expired:
            with contextlib.suppress(FileNotFoundError):
                self.path_of(attachment_id).unlink()
        known = {r.attachment_id for r in self._select("1 = 1", ())} - expired
        missing = {i for i in known if not self.path_of(i).exists()}
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.executemany(
                    "DELETE FROM attachments WHERE attachment_id = ?",
                    [(i,) for i in expired | missing],
                )
                if self.retention_s > 0:
                    cur.execute("DELETE FROM sends WHERE created <= ?", (now - self.retention_s,))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        known -= missing
        counts = {
            "expired": len(expired),
            "missing": len(missing),
            "partial": 0,
            "orphans": 0,
            "previews": drop_outputs(self.directory, expired | missing),
        }
        counts["partial"] += _sweep(
            spec.incoming_dir(self.storage_root, self.tenant), now - INCOMING_TTL_S
        )
        counts["partial"] += _sweep(
            spec.uploads_dir(self.storage_root, self.tenant), now - UPLOAD_TTL_S
        )
        for path in self.directory.iterdir():
            name = path.name
            stem = name.removesuffix(".part")
            if not path.is_file() or not spec.valid_id(stem):
                continue
            if (name == stem and name in known) or _newer(path, now - ORPHAN_TTL_S):
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                counts["orphans"] += 1
        if any(counts.values()):
            log.info("attachment retention: %s", counts)
        return counts


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


# -- events
