"""Dialect codecs: pure functions between wire frames and the canonical model.

A codec never does I/O. `decode` turns a client frame into a canonical command (or a
local answer such as pong); `encode_event` turns a canonical event into the frame for
that dialect, or None when the dialect has no such frame.
"""

from __future__ import annotations

from typing import Any, Protocol

Json = dict[str, Any]


class Dialect(Protocol):
    name: str

    def decode(self, frame: Json) -> Json:
        """Validate a client frame; return {"local": frame} or {"cmd": type, "args": {...}}.

        Raises FrameRejected for bad frames.
        """
        ...

    def encode_event(self, event: Json) -> Json | None: ...

    def encode_reply(self, reply: Json) -> Json | None: ...

    def error_frame(self, code: str, message: str, request_id: Any = None) -> Json: ...


def detect(hello: Json) -> str | None:
    """Which dialect a first frame speaks: pheby (secret + protocol_version) or iris."""
    if hello.get("type") != "hello":
        return None
    if "secret" in hello or "protocol_version" in hello:
        return "pheby"
    if "token" in hello or "device_id" in hello:
        return "iris"
    return None
