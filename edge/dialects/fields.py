"""Field validation shared by the codecs: each helper raises FrameRejected(bad_request)."""

from __future__ import annotations

from typing import Any

from canonical.protocol import MAX_TEXT_CHARS

from ..errors import FrameRejected

Json = dict[str, Any]


def opt_str(frame: Json, key: str, *, max_len: int = 256) -> str | None:
    value = frame.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FrameRejected("bad_request", f"{key} must be a string", frame.get("request_id"))
    if len(value) > max_len:
        raise FrameRejected(
            "bad_request", f"{key} is longer than {max_len}", frame.get("request_id")
        )
    return value


def req_str(frame: Json, key: str, *, max_len: int = 256) -> str:
    value = opt_str(frame, key, max_len=max_len)
    if value is None or not value.strip():
        raise FrameRejected("bad_request", f"{key} is required", frame.get("request_id"))
    return value


def text(frame: Json, key: str = "text", *, required: bool = True) -> str:
    value = frame.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise FrameRejected("bad_request", f"{key} must be a string", frame.get("request_id"))
    if len(value) > MAX_TEXT_CHARS:
        raise FrameRejected(
            "too_large",
            f"{key} is longer than {MAX_TEXT_CHARS} characters",
            frame.get("request_id"),
        )
    if required and not value.strip():
        raise FrameRejected("bad_request", f"{key} must not be blank", frame.get("request_id"))
    return value


def opt_int(frame: Json, key: str, *, lo: int, hi: int, default: int | None = None) -> int | None:
    value = frame.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameRejected("bad_request", f"{key} must be an integer", frame.get("request_id"))
    return max(lo, min(hi, value))


def req_bool(frame: Json, key: str) -> bool:
    value = frame.get(key)
    if not isinstance(value, bool):
        raise FrameRejected("bad_request", f"{key} must be a JSON boolean", frame.get("request_id"))
    return value


def str_list(frame: Json, key: str, *, max_items: int, max_len: int = 64) -> list[str]:
    value = frame.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(v, str) and 0 < len(v) <= max_len for v in value
    ):
        raise FrameRejected("bad_request", f"{key} must be a list of ids", frame.get("request_id"))
    if len(value) > max_items:
        raise FrameRejected(
            "bad_request", f"{key} has more than {max_items} items", frame.get("request_id")
        )
    if len(set(value)) != len(value):
        raise FrameRejected("bad_request", f"{key} must be distinct", frame.get("request_id"))
    return list(value)
