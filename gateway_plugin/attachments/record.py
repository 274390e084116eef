"""One attachment as the plugin knows it: the ``Attachment`` record, its wire descriptor
(pheby spec), its mapping to and from a row of ``attachments.db``, and ``AttachmentError``,
the refusal whose ``code`` goes to the requester. Pure data: no I/O here; the registry
(``registry.py``) stores the rows and the file store (``files.py``) holds the bodies.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from canonical.model import Json, Lane
from canonical.protocol import iso_from_unix
from gateway_plugin.errors import CommandError

# The columns of a record, in the order of the dataclass's fields.
COLUMNS = (
    "attachment_id, direction, conversation_id, chat_id, thread_id, filename, mime_type, size, "
    "sha256, kind, inline_image, created, expires, message_id, run_id, claim_key"
)
COLUMN_COUNT = 16


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


def to_row(record: Attachment) -> tuple[Any, ...]:
    """The values of ``COLUMNS`` for ``record``."""
    return (
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
    )


def from_row(row: sqlite3.Row | tuple[Any, ...]) -> Attachment:
    """The record of a row selected as ``COLUMNS``."""
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
