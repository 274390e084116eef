"""ntfy sender: JSON publish to the server root.

``POST <NTFY_SERVER_URL>/`` with ``{topic, title, message, priority, tags, click,
actions?, sequence_id}``; ``Authorization: Bearer <NTFY_TOKEN>`` or Basic for
``NTFY_USER``/``NTFY_PASSWORD`` (or a ``user:pass`` NTFY_TOKEN, as Hermes' adapter does).
The topic is the device's registered topic, else ``NTFY_TOPIC``.
"""

from __future__ import annotations

import httpx

from .classify import Failed, PushOutcome, RetryLater, classify_ntfy
from .notification import Notification, ntfy_message

__all__ = ["NtfySender"]


class NtfySender:
    """Publishes one notification to one ntfy topic over a shared client."""

    backend = "ntfy"

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        server_url: str = "https://ntfy.sh",
        default_topic: str | None = None,
        authorization: str | None = None,
    ) -> None:
        self._client = client
        self._url = server_url.rstrip("/") + "/"
        self._default_topic = default_topic
        self._headers = {"Authorization": authorization} if authorization else {}

    async def send(self, notification: Notification, link: str) -> PushOutcome:
        """Publish; never raises for service or network errors (they are outcomes)."""
        topic = notification.token_or_topic or self._default_topic
        if not topic:
            return Failed("no ntfy topic: the device registered none and NTFY_TOPIC is unset")
        body = ntfy_message(notification, topic, link)
        try:
            response = await self._client.post(self._url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            return RetryLater(f"ntfy request failed: {exc!r}")
        return classify_ntfy(response.status_code, response.content, response.headers)
