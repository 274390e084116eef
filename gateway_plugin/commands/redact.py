"""Redaction of tool arguments and errors before they leave the gateway (pure)."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
MAX_ERROR_CHARS = 500
MAX_DEPTH = 8
_SECRET_KEY = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|api[_-]?key|apikey|auth|credential|private[_-]?key|cookie|session[_-]?id|bearer|signature)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"\b(sk-[A-Za-z0-9_-]{12,}|ghp_[A-Za-z0-9]{20,}|xox[abp]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b"
)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy with secret-looking keys (recursively) and token-like values masked."""
    if depth > MAX_DEPTH:
        return "…"
    if isinstance(value, dict):
        return {
            str(k): (REDACTED if is_secret_key(str(k)) else redact(v, depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, depth + 1) for v in value[:200]]
    if isinstance(value, str):
        return _SECRET_VALUE.sub(REDACTED, value[:4000])
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(str(value), depth + 1)


def truncate_error(error: Any) -> str | None:
    if error is None or error == "":
        return None
    text = _SECRET_VALUE.sub(REDACTED, str(error))
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
