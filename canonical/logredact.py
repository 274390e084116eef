"""Log redaction: tokens, secrets and message bodies never reach a log line.

Scoped to the project's own records: :func:`install` puts a redacting pass-through handler
first on each of our top-level loggers (`OUR_LOGGERS`), so every record of their subtrees
is redacted in place before any handler further up (the root's, Hermes' files) formats
it, and a filter on the one uvicorn logger our edge's server writes to. Records of other
loggers — Hermes' own, whose ``text``/``content`` fields are its business — are never
touched. :class:`RedactingFilter` does the same for one handler or logger.

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
from typing import Final

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

# The top-level loggers of our packages: `hdg.*` names, and `__name__` loggers.
OUR_LOGGERS: Final = ("hdg", "canonical", "edge", "workers", "gateway_plugin", "hdgctl")
# uvicorn runs only as our edge's server (in an edge process, or embedded in the gateway).
OUR_SERVER_LOGGERS: Final = ("uvicorn.error",)


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


class _Redactor(logging.Handler):
    """First handler of one of `OUR_LOGGERS`: redacts each record of its subtree in place
    (the record object the handlers further up receive) and writes nothing itself."""

    def handle(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        if _only_redactors_on_the_way(record):
            # Logging falls back to stderr (lastResort) for a record no handler takes;
            # this handler must not count as one.
            last = logging.lastResort
            if last is not None and record.levelno >= last.level:
                last.handle(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        return None


def _only_redactors_on_the_way(record: logging.LogRecord) -> bool:
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(not isinstance(h, _Redactor) for h in logger.handlers):
            return False
        if not logger.propagate:
            return True
        logger = logger.parent
    return True


def install(secrets: Iterable[str | None] = ()) -> None:
    """Redact every record of our loggers from now on (idempotent); other loggers'
    records are left as they are."""
    add_secret(*secrets)
    with _lock:
        for name in OUR_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(h, _Redactor) for h in logger.handlers):
                logger.handlers.insert(0, _Redactor())
        for name in OUR_SERVER_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, RedactingFilter) for f in logger.filters):
                logger.addFilter(RedactingFilter())


__all__ = [
    "MASK",
    "OUR_LOGGERS",
    "OUR_SERVER_LOGGERS",
    "RedactingFilter",
    "add_secret",
    "install",
    "redact",
    "redact_record",
]
