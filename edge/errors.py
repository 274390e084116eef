"""Errors of the edge.

EdgeError            root
├── FrameRejected    one frame is bad: answer with an error frame, keep the connection
├── ConnectionEnded  the connection must close with `close_code`
└── WireClosed       a direct frame write found the socket closing (edge.wire)
"""

from __future__ import annotations


class EdgeError(Exception):
    """Root of the edge's errors."""


class FrameRejected(EdgeError):
    def __init__(self, code: str, message: str, request_id: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class ConnectionEnded(EdgeError):
    def __init__(self, close_code: int, reason: str) -> None:
        super().__init__(reason)
        self.close_code = close_code
        self.reason = reason


class WireClosed(EdgeError):
    """The socket is gone or closing: nothing more may be written to it."""


# Close codes the apps can act on (documented in docs/protocol/).
CLOSE_GOING_AWAY = 1001
CLOSE_SERVICE_RESTART = 1012
CLOSE_UNAUTHORIZED = 4401
CLOSE_REVOKED = 4403
CLOSE_AUTH_TIMEOUT = 4408
CLOSE_VERSION_MISMATCH = 4426
CLOSE_LOCKED_OUT = 4429
CLOSE_SLOW_CONSUMER = 4008
CLOSE_UNAVAILABLE = 1013
BUS_UNREACHABLE = "the gateway bus is unreachable; retry shortly"  # what a device is told
