"""The attachment registry (``attachments.db``): which attachment ids exist, their
conversation, whether a send has claimed them, when they expire; registration of
uploads, resolution of downloads, claims, the agent's deliverables and retention.
What sends, the agent and the bus commands do with it is in ``flow.py``; the record
type is in ``record.py``, the files themselves in ``files.py``.

Files live in the deployment's shared storage (``canonical.attachments`` describes the
layout); edges write inbound bodies there and ask this registry, over the bus, to record
them (``attachment.register``) and to resolve a download (``attachment.get``). Nothing
here imports Hermes: the controller reaches it through ``AgentPort.stage_media``.

A send claims its attachments after the ``run_active`` check, right after the outbox
transaction that records the run, with no await in between (the controller handles one
command at a time, so no other send can claim them in that window). The send's
idempotency record carries the ids, so a retry after a crash between the two writes
claims them again before dispatching.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canonical import attachments as spec
from gateway_plugin.attachments.files import AttachmentFiles, read_head
from gateway_plugin.attachments.media_jobs import drop_outputs
from gateway_plugin.attachments.record import (
    COLUMN_COUNT,
    COLUMNS,
    Attachment,
    AttachmentError,
    from_row,
    to_row,
)
from gateway_plugin.storage.sqlite_file import open_wal

if TYPE_CHECKING:
    from gateway_plugin.channels.store import ChannelEntry

log = logging.getLogger("hdg.plugin.attachments")

StageMedia = Callable[[Path, str, str], Awaitable[tuple[str, str]]]

DAY_S = 86400.0
CLEANUP_PERIOD_S = 3600.0
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
        self.files = AttachmentFiles(storage_root, tenant)
        self.storage_root = storage_root
        self.tenant = tenant
        self.directory = self.files.directory
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
        return self.files.path_of(attachment_id)

    def _expires(self, now: float) -> float | None:
        return None if self.retention_s <= 0 else now + self.retention_s

    def _insert(self, record: Attachment) -> None:
        with self._lock:
            self._db.execute(
                f"INSERT INTO attachments({COLUMNS}) VALUES ({', '.join('?' * COLUMN_COUNT)})",
                to_row(record),
            )

    def _select(self, where: str, params: Sequence[Any]) -> list[Attachment]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {COLUMNS} FROM attachments WHERE {where}", tuple(params)
            ).fetchall()
        return [from_row(r) for r in rows]

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
        kind, inline = spec.classify(mime, read_head(path))
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
        stored = self.files.store(source, max_bytes=self.max_bytes, move=move)
        name = spec.sanitize_filename(filename or source.name)
        mime = spec.guess_mime(name)
        classified, inline = spec.classify(mime, stored.head, voice=kind == "voice")
        final_kind = kind if kind in spec.KINDS else classified
        now = self.clock()
        record = Attachment(
            stored.attachment_id,
            "outbound",
            entry.conversation_id,
            entry.chat_id,
            entry.thread_id,
            name,
            mime,
            stored.size,
            stored.sha256,
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
                stored.path.unlink()
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
        self.files.remove(expired)
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
        counts["partial"] += self.files.sweep_partials(now)
        counts["orphans"] += self.files.sweep_orphans(now, known)
        if any(counts.values()):
            log.info("attachment retention: %s", counts)
        return counts
