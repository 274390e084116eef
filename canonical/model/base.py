"""The two aliases every package shares: a JSON object, and a lane."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
"""A JSON object as parsed or about to be encoded (frames, bus messages, stored rows)."""

Lane = tuple[str, str | None]
"""``(chat_id, thread_id)``: a channel's flat lane (thread_id None) or one of its threads."""

__all__ = ["Json", "Lane"]
