"""Dialect codecs: pure functions between wire frames and the canonical model.

A codec never does I/O. `decode` turns a client frame into a canonical command
(canonical.model.commands; or a local answer such as pong); `encode_event` turns a
canonical event into the frame for that dialect, `encode_reply` a canonical reply, each
or None when the dialect has no such frame. The plugin sees only canonical commands and
sends only canonical events and replies: everything a dialect spells its own way is
here.
"""

from __future__ import annotations

from typing import Any, Protocol

from canonical.model import Json


class Dialect(Protocol):
    name: str

    def decode(self, frame: Json) -> Json:
        """Validate a client frame; return {"local": frame} or {"cmd": type, "args": {...}}.

        Raises FrameRejected for bad frames.
        """
        ...

    def encode_event(self, event: Json) -> Json | None: ...

    def encode_reply(self, reply: Json) -> Json | None:
        """A canonical reply (canonical.model.replies) as this dialect's frame, or None."""
        ...

    def encode_command(self, cmd: str, args: Json) -> Json | None:
        """The frame ``decode`` turns into this canonical command, or None when the
        dialect cannot say it (the inverse of decode where the mapping is invertible)."""
        ...

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
