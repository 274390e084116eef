"""Field validation shared by the codecs: each helper raises FrameRejected(bad_request)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from canonical.model import Json
from canonical.protocol import MAX_TEXT_CHARS, now_iso

from ..errors import FrameRejected

Decoder = tuple[str, Callable[[Json], Any]]
"""A dialect frame type's canonical command name, and the function validating the frame
into that command's arguments (canonical.model.commands)."""


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


def opt_ref(frame: Json, key: str, *, max_len: int = 64) -> str | None:
    """An optional reference (an id): absent or null means none, but "" is not an id (it
    must not pass for "absent", which means something else: e.g. the global scope)."""
    value = opt_str(frame, key, max_len=max_len)
    if value is not None and not value.strip():
        raise FrameRejected("bad_request", f"{key} must not be empty", frame.get("request_id"))
    return value


def name_token(frame: Json, key: str, *, max_len: int, required: bool) -> str | None:
    """A model or provider name: one word. Hermes parses `/model <name> --flags`, so a
    space or a leading "-" would smuggle flags (`--session`) into the command."""
    value = (
        req_str(frame, key, max_len=max_len) if required else opt_str(frame, key, max_len=max_len)
    )
    if value is not None and (value.startswith("-") or any(c.isspace() for c in value)):
        raise FrameRejected(
            "bad_request",
            f"{key} must be one name, without spaces or a leading '-'",
            frame.get("request_id"),
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


def decode_with(decoders: dict[str, Decoder], frame: Json) -> Json:
    """The part of decoding both dialects share: ping answered locally, a second hello
    refused, unknown types rejected, the rest handed to the type's decoder, which names
    the canonical command the frame is."""
    kind = frame.get("type")
    if kind == "ping":
        return {"local": {"type": "pong", "ts": now_iso()}}
    if kind == "hello":
        raise FrameRejected("bad_request", "already authenticated", frame.get("request_id"))
    decoder = decoders.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        raise FrameRejected(
            "unknown_type", f"unknown type {str(kind)[:64]!r}", frame.get("request_id")
        )
    name, decode = decoder
    return {"cmd": name, "args": decode(frame)}


def answering(frame: Json | None) -> Json | None:
    """A reply frame as sent: the answer to a request sent without a request_id carries
    none (a null one is valid in neither dialect)."""
    if frame is not None and "request_id" in frame and frame["request_id"] is None:
        return {k: v for k, v in frame.items() if k != "request_id"}
    return frame


def error_frame(code: str, message: str, request_id: Any = None) -> Json:
    """The one error shape of both dialects."""
    frame: Json = {"type": "error"}
    if request_id is not None:
        frame["request_id"] = request_id
    frame["error"] = {"code": code, "message": message}
    frame["ts"] = now_iso()
    return frame
