"""Pure classification of push-service responses into typed outcomes.

No I/O: status code, body bytes and headers in, exactly one outcome out, for *any*
input (property-tested). The senders in :mod:`workers.push.fcm` and
:mod:`workers.push.ntfy` act on the outcome; the job turns it into a result dict or an
``arq.Retry``.

Outcomes::

    Delivered        accepted by the service                     -> done
    TokenInvalid     the device token is dead                    -> drop the token, done
    RetryAfter(s)    the service asked us to wait s seconds       -> retry after >= s
    RetryLater       transient failure, no hint                   -> retry with backoff
    Failed           retrying cannot help (our bug, config, auth) -> done, failed
    AuthExpired      (FCM only) our OAuth token was rejected     -> refresh it once, resend once

FCM errors are read from ``error.details[]`` entries whose ``@type`` is
``type.googleapis.com/google.firebase.fcm.v1.FcmError`` (their ``errorCode``), because
the HTTP status alone is ambiguous (a 404 is a dead token *or* a wrong project URL).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal

__all__ = [
    "FCM_ERROR_TYPE",
    "AuthExpired",
    "Delivered",
    "Failed",
    "FcmVerdict",
    "PushOutcome",
    "RetryAfter",
    "RetryLater",
    "TokenInvalid",
    "classify_fcm",
    "classify_ntfy",
    "parse_retry_after",
]

FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
MAX_RETRY_AFTER = 86_400.0
# delta-seconds with HTTP's optional whitespace (space, tab) only: str patterns' \s and \d
# also match Unicode separators and digits that float() refuses (e.g. "0\x1f").
_SECONDS = re.compile(r"[ \t]*[0-9]{1,12}(\.[0-9]{1,6})?[ \t]*")


# -- outcomes -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivered:
    """The service accepted the message."""

    message_id: str | None = None
    kind: Literal["delivered"] = field(default="delivered", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.kind, "message_id": self.message_id}


@dataclass(frozen=True, slots=True)
class TokenInvalid:
    """The device token (FCM registration token) will never work again."""

    reason: str
    kind: Literal["token_invalid"] = field(default="token_invalid", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.kind, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """The service asked for a pause of ``seconds`` before the next attempt."""

    seconds: float
    reason: str
    kind: Literal["retry_after"] = field(default="retry_after", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.kind, "retry_after": self.seconds, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RetryLater:
    """A transient failure without a hint: retry with exponential backoff."""

    reason: str
    kind: Literal["retry"] = field(default="retry", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.kind, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Failed:
    """A permanent failure for this message (the token is kept)."""

    reason: str
    kind: Literal["failed"] = field(default="failed", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.kind, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class AuthExpired:
    """FCM rejected our OAuth access token (plain 401): refresh once and resend once."""

    reason: str
    kind: Literal["auth_expired"] = field(default="auth_expired", init=False)


PushOutcome = Delivered | TokenInvalid | RetryAfter | RetryLater | Failed
FcmVerdict = PushOutcome | AuthExpired


# -- helpers ------------------------------------------------------------------------------


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date).

    Returns ``None`` when absent or unparseable; clamps to ``[0, MAX_RETRY_AFTER]``.
    """
    if value is None:
        return None
    if _SECONDS.fullmatch(value):
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    reference = time.time() if now is None else now
    try:
        delta = when.timestamp() - reference
    except (OverflowError, OSError, ValueError):
        return None
    if not math.isfinite(delta):
        return None
    return min(max(delta, 0.0), MAX_RETRY_AFTER)


def _json_object(body: bytes | str | None) -> dict[str, Any]:
    if not body:
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    wanted = name.lower()
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == wanted and isinstance(value, str):
            return value
    return None


def _text(value: object, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class _GoogleError:
    status: str  # e.g. NOT_FOUND, UNAUTHENTICATED
    message: str
    fcm_code: str  # e.g. UNREGISTERED; "" when no FcmError detail
    fields: tuple[str, ...]  # google.rpc.BadRequest field violations


def _google_error(body: dict[str, Any]) -> _GoogleError:
    error = body.get("error")
    if not isinstance(error, dict):
        return _GoogleError("", "", "", ())
    fcm_code = ""
    fields: list[str] = []
    details = error.get("details")
    if isinstance(details, list):
        for detail in details:
            if not isinstance(detail, dict):
                continue
            kind = detail.get("@type")
            if kind == FCM_ERROR_TYPE and isinstance(detail.get("errorCode"), str):
                fcm_code = fcm_code or detail["errorCode"]
            elif kind == BAD_REQUEST_TYPE and isinstance(detail.get("fieldViolations"), list):
                for violation in detail["fieldViolations"]:
                    if isinstance(violation, dict) and isinstance(violation.get("field"), str):
                        fields.append(violation["field"])
    return _GoogleError(
        _text(error.get("status"), 64), _text(error.get("message")), fcm_code, tuple(fields)
    )


def _about_token(error: _GoogleError) -> bool:
    if any(f in ("message.token", "token") or f.endswith(".token") for f in error.fields):
        return True
    text = error.message.lower()
    return "registration token" in text


def _wait(
    reason: str, headers: Mapping[str, str] | None, now: float | None
) -> RetryAfter | RetryLater:
    seconds = parse_retry_after(_header(headers, "retry-after"), now=now)
    return RetryLater(reason) if seconds is None else RetryAfter(seconds, reason)


# -- FCM HTTP v1 --------------------------------------------------------------------------


def classify_fcm(
    status: int,
    body: bytes | str | None,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> FcmVerdict:
    """Classify one ``messages:send`` response. Never raises."""
    payload = _json_object(body)
    if 200 <= status < 300:
        name = payload.get("name")
        return Delivered(name if isinstance(name, str) else None)

    error = _google_error(payload)
    code = error.fcm_code
    label = code or error.status or f"HTTP {status}"
    reason = f"{label}: {error.message}" if error.message else label

    if code == "UNREGISTERED":
        return TokenInvalid(reason)
    if code == "SENDER_ID_MISMATCH":
        return TokenInvalid(reason)
    if code == "INVALID_ARGUMENT" or (not code and error.status == "INVALID_ARGUMENT"):
        return TokenInvalid(reason) if _about_token(error) else Failed(reason)
    if code == "QUOTA_EXCEEDED" or status == 429:
        return _wait(reason, headers, now)
    if code in ("UNAVAILABLE", "INTERNAL") or status in (500, 502, 503, 504):
        return _wait(reason, headers, now)
    if code == "THIRD_PARTY_AUTH_ERROR":
        return Failed(reason)
    if status == 401:
        return AuthExpired(reason)
    return Failed(reason)


# -- ntfy ---------------------------------------------------------------------------------


def classify_ntfy(
    status: int,
    body: bytes | str | None,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> PushOutcome:
    """Classify one ntfy publish response. Never raises.

    ntfy answers errors as ``{"code": 42901, "http": 429, "error": "..."}``.
    """
    payload = _json_object(body)
    if 200 <= status < 300:
        message_id = payload.get("id")
        return Delivered(message_id if isinstance(message_id, str) else None)
    detail = _text(payload.get("error"))
    reason = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
    if status == 429:
        return _wait(reason, headers, now)
    if 500 <= status < 600:
        return _wait(reason, headers, now)
    return Failed(reason)
