"""The push job's payload and the per-service message bodies built from it (pure).

Privacy default: a notification carries *no message content* — only a title, the
kind, the chat/thread ids and the cursor the app resumes from. A content preview is
sent only when the producer passes ``preview`` explicitly (opt-in).

Collapsing: a burst of notifications for one chat becomes one notification.

* FCM: ``android.collapse_key`` = chat id (FCM keeps only the latest undelivered
  message per key while the device is offline) and ``android.notification.tag`` = chat
  id (a displayed notification is replaced, not stacked). FCM honours at most four
  distinct collapse keys per device at a time; beyond that it may drop older ones,
  which is acceptable for "you have new messages" notifications.
* ntfy: ``sequence_id`` = chat-derived id (ntfy >= 2.16 replaces the notification with
  the same sequence id on the phone). Older servers ignore the field and show one
  notification per message.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args
from urllib.parse import quote

from ..errors import JobPayloadError

__all__ = [
    "Backend",
    "Kind",
    "Notification",
    "deep_link",
    "fcm_message",
    "ntfy_message",
    "ntfy_sequence_id",
]

Backend = Literal["fcm", "ntfy"]
Kind = Literal["reply", "approval", "clarify", "cron"]

_DEFAULT_TITLES: dict[str, str] = {
    "reply": "New reply",
    "approval": "Approval needed",
    "clarify": "Hermes has a question",
    "cron": "Scheduled task finished",
}
# Generic body text (no content) shown when no preview was opted into.
_GENERIC_BODIES: dict[str, str] = {
    "reply": "Open the app to read it.",
    "approval": "A command is waiting for your approval.",
    "clarify": "Hermes needs an answer to continue.",
    "cron": "Open the app to see the result.",
}
_NTFY_PRIORITY: dict[str, int] = {"reply": 3, "approval": 4, "clarify": 4, "cron": 2}
_NTFY_TAGS: dict[str, str] = {
    "reply": "speech_balloon",
    "approval": "warning",
    "clarify": "question",
    "cron": "alarm_clock",
}
_SEQUENCE_ID = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
MAX_PREVIEW_CHARS = 240
MAX_TITLE_CHARS = 120


@dataclass(frozen=True, slots=True)
class Notification:
    """One push to one device, as enqueued by the plugin."""

    idempotency_key: str
    tenant: str
    device_id: str
    backend: Backend
    token_or_topic: str
    kind: Kind
    chat_id: str
    thread_id: str | None
    cursor: str | None
    title: str
    preview: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Notification:
        """Validate a job payload; raise :class:`JobPayloadError` naming the bad field."""
        if not isinstance(data, Mapping):
            raise JobPayloadError("notification", "must be a dict")
        backend = _required(data, "backend")
        if backend not in get_args(Backend):
            raise JobPayloadError("backend", f"must be one of fcm, ntfy (got {backend!r})")
        kind = _required(data, "kind")
        if kind not in get_args(Kind):
            raise JobPayloadError(
                "kind", f"must be one of reply, approval, clarify, cron (got {kind!r})"
            )
        title = _optional(data, "title") or _DEFAULT_TITLES[kind]
        preview = _optional(data, "preview")
        token = _optional(data, "token_or_topic") or ""
        if backend == "fcm" and not token:
            raise JobPayloadError("token_or_topic", "an FCM registration token is required")
        return cls(
            idempotency_key=_required(data, "idempotency_key"),
            tenant=_required(data, "tenant"),
            device_id=_required(data, "device_id"),
            backend=backend,  # type: ignore[arg-type]  # checked against Backend above
            token_or_topic=token,
            kind=kind,  # type: ignore[arg-type]  # checked against Kind above
            chat_id=_required(data, "chat_id"),
            thread_id=_optional(data, "thread_id"),
            cursor=_optional(data, "cursor"),
            title=title[:MAX_TITLE_CHARS],
            preview=preview[:MAX_PREVIEW_CHARS] if preview else None,
        )

    @property
    def body_text(self) -> str:
        """What the notification says: the opt-in preview, else a content-free line."""
        return self.preview if self.preview else _GENERIC_BODIES[self.kind]


def _required(data: Mapping[str, Any], name: str) -> str:
    value = _optional(data, name)
    if not value:
        raise JobPayloadError(name, "is required")
    return value


def _optional(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise JobPayloadError(name, f"must be a string (got {type(value).__name__})")
    return str(value)


def deep_link(scheme: str, chat_id: str, thread_id: str | None = None) -> str:
    """``<scheme>://chat/<chat_id>[?thread=<thread_id>]``, ids percent-encoded."""
    link = f"{scheme}://chat/{quote(chat_id, safe='')}"
    if thread_id:
        link += f"?thread={quote(thread_id, safe='')}"
    return link


def fcm_message(notification: Notification, link: str) -> dict[str, Any]:
    """The ``messages:send`` request body for one registration token."""
    n = notification
    data = {"kind": n.kind, "chat_id": n.chat_id, "title": n.title, "link": link}
    if n.thread_id:
        data["thread_id"] = n.thread_id
    if n.cursor:
        data["cursor"] = n.cursor
    if n.preview:
        data["preview"] = n.preview
    urgent = n.kind != "cron"
    return {
        "message": {
            "token": n.token_or_topic,
            "data": data,
            "notification": {"title": n.title, "body": n.body_text},
            "android": {
                "priority": "HIGH" if urgent else "NORMAL",
                "collapse_key": n.chat_id,
                "ttl": "86400s",
                "notification": {"tag": n.chat_id},
            },
        }
    }


def ntfy_sequence_id(chat_id: str) -> str:
    """A sequence id ntfy accepts (``[-_A-Za-z0-9]{1,64}``), stable per chat."""
    if _SEQUENCE_ID.match(chat_id):
        return chat_id
    return "c" + hashlib.sha256(chat_id.encode()).hexdigest()[:32]


def ntfy_message(notification: Notification, topic: str, link: str) -> dict[str, Any]:
    """The JSON publish body (``POST <server>/``)."""
    n = notification
    body: dict[str, Any] = {
        "topic": topic,
        "title": n.title,
        "message": n.body_text,
        "priority": _NTFY_PRIORITY[n.kind],
        "tags": [_NTFY_TAGS[n.kind]],
        "click": link,
        "sequence_id": ntfy_sequence_id(n.chat_id),
    }
    if n.kind in ("approval", "clarify"):
        body["actions"] = [{"action": "view", "label": "Open", "url": link, "clear": True}]
    return body
