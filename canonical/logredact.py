"""Log redaction: tokens, secrets and message bodies never reach a log line.

One process-wide hook (:func:`install`) wraps the log-record factory, so every record of
every logger — ours, Hermes', uvicorn's — is redacted when it is created, whatever handler
later writes it. :class:`RedactingFilter` does the same for one handler or logger.

What is masked (the value becomes ``[REDACTED]``, the key stays so the line still reads):

- every secret registered with :func:`add_secret` (the pairing token, the admin token);
- ``NAME=value`` where NAME ends in TOKEN, SECRET, PASSWORD, API_KEY or SERVER_KEY
  (``ANDROID_TOKEN=…``, ``?token=…&``, ``secret=…``);
- ``Bearer …`` / ``Basic …`` credentials;
- JSON and Python-repr fields named like a credential (``"token": "…"``, ``'secret': '…'``,
  ``"admin_token"``, ``"fcm_token"``, ``"authorization"``) and message bodies (``"text"``,
  ``"content"``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"
MIN_SECRET_CHARS = 8

_CREDENTIAL_NAME = r"[A-Za-z0-9_.-]*(?:token|secret|password|passwd|api_key|apikey|server_key)"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # key=value in env lines, query strings, log key=value pairs
    (re.compile(rf"(?i)\b({_CREDENTIAL_NAME})=([^\s&\"',;)\]}}]+)"), rf"\1={MASK}"),
    # "key": "value" / 'key': 'value' (JSON, dict reprs); bodies of messages too
    (
        re.compile(
            rf"(?i)([\"'])({_CREDENTIAL_NAME}|authorization|text|content)\1(\s*:\s*)"
            r"([\"'])(?:\\.|(?!\4).)*\4"
        ),
        rf"\1\2\1\3\4{MASK}\4",
    ),
    # HTTP credentials
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\1 {MASK}"),
)

_lock = threading.Lock()
_secrets: set[str] = set()
_secret_re: re.Pattern[str] | None = None
_installed = False


def add_secret(*values: str | None) -> None:
    """Mask these exact values wherever they appear (short values are ignored)."""
    global _secret_re
    with _lock:
        changed = False
        for value in values:
            if value and len(value) >= MIN_SECRET_CHARS and value not in _secrets:
                _secrets.add(value)
                changed = True
        if changed:
            ordered = sorted(_secrets, key=len, reverse=True)
            _secret_re = re.compile("|".join(re.escape(s) for s in ordered))


def redact(text: str) -> str:
    """``text`` with every secret and credential-shaped value masked."""
    secret_re = _secret_re
    if secret_re is not None:
        text = secret_re.sub(MASK, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Format the record's message now, masked; tracebacks too."""
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: leave it for logging to report
        return record
    masked = redact(message)
    if masked != message:
        record.msg = masked
        record.args = None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    return record


class RedactingFilter(logging.Filter):
    """Attach to a handler (or logger) to redact what passes through it."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def install(secrets: Iterable[str | None] = ()) -> None:
    """Redact every log record created in this process from now on (idempotent)."""
    global _installed
    add_secret(*secrets)
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return redact_record(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)
        _installed = True


__all__ = ["MASK", "RedactingFilter", "add_secret", "install", "redact", "redact_record"]
