"""The WebSocket opening handshake's common case, decided without websockets' HTTP parser.

uvicorn parses a request with httptools, then (websockets-sansio) writes it back out as
bytes for websockets to parse a second time, with a generator per line and a ``Headers``
multidict, before ``ServerProtocol.accept`` checks it and builds the 101 response field by
field (and formats a ``Date`` that uvicorn then deletes). In a reconnect storm that was
about a third of an edge's CPU per device (py-spy).

``plain_upgrade_accept`` looks at the headers httptools already parsed and recognises the
request every real client sends: ``GET``, one ``Upgrade: websocket``, ``Connection``
naming ``upgrade``, one valid ``Sec-WebSocket-Key``, ``Sec-WebSocket-Version: 13``, no
subprotocol offer. For that request websockets would accept, and its answer is fixed, so
``switching_protocols`` writes the same bytes directly. Anything else (a malformed,
repeated or oversized header, a subprotocol, a body, another method) returns None and goes
through websockets' own parser and checks unchanged: this module never decides a
rejection, so every error response stays websockets'. Pure functions; the I/O is in
``edge.fastpath.protocols``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from hashlib import sha1

# RFC 6455 §1.3: the GUID appended to the key before hashing.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# websockets' own limits and grammar (websockets.http11), so what passes here would pass there.
MAX_HEADERS = 128
MAX_LINE = 8192
_TOKEN = re.compile(rb"[-!#$%&\'*+.^_`|~0-9a-zA-Z]+")
_VALUE = re.compile(rb"[\x09\x20-\x7e\x80-\xff]*")
# A Connection header that websockets' parse_connection reads as plain tokens.
_TOKEN_LIST = re.compile(
    rb"[-!#$%&\'*+.^_`|~0-9a-zA-Z]+(?:[ \t]*,[ \t]*[-!#$%&\'*+.^_`|~0-9a-zA-Z]+)*"
)
# Headers whose presence sends the request down websockets' path: it rejects bodies and
# transfer codings, and parses (and may reject) a subprotocol offer.
_DEFER = frozenset((b"content-length", b"transfer-encoding", b"sec-websocket-protocol"))
_ONCE = frozenset((b"upgrade", b"sec-websocket-key", b"sec-websocket-version", b"origin"))


def accept_value(key: bytes) -> bytes:
    """``Sec-WebSocket-Accept`` for a client's key (RFC 6455 §4.2.2)."""
    return base64.b64encode(sha1(key + _GUID).digest())


def plain_upgrade_accept(
    method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]]
) -> bytes | None:
    """The ``Sec-WebSocket-Accept`` value when websockets would accept this upgrade as it
    is, else None (let websockets parse and judge it).

    ``headers`` are as uvicorn's httptools protocol keeps them: lower-case names, values
    without trailing whitespace, in arrival order.
    """
    if method != b"GET" or not target.isascii() or b" " in target:
        return None
    if len(target) + 16 > MAX_LINE or len(headers) >= MAX_HEADERS:  # (a margin: never
        # near a limit, where an off-by-one would decide)
        return None
    key = version = None
    upgrade_ok = connection_ok = False
    seen: set[bytes] = set()
    for name, value in headers:
        if len(name) + len(value) + 6 > MAX_LINE or name in _DEFER:
            return None
        if not _TOKEN.fullmatch(name):
            return None
        value = value.strip(b" \t")
        if not _VALUE.fullmatch(value):
            return None
        if name in _ONCE:
            if name in seen:
                return None  # websockets: "multiple values" or an upgrade list
            seen.add(name)
        if name == b"connection":
            if not _TOKEN_LIST.fullmatch(value):
                return None
            if b"upgrade" in (token.strip(b" \t").lower() for token in value.split(b",")):
                connection_ok = True
        elif name == b"upgrade":
            upgrade_ok = value.lower() == b"websocket"
        elif name == b"sec-websocket-key":
            key = value
        elif name == b"sec-websocket-version":
            version = value
    if not (upgrade_ok and connection_ok) or version != b"13" or key is None:
        return None
    try:
        raw_key = base64.b64decode(key, validate=True)
    except binascii.Error:
        return None
    if len(raw_key) != 16:
        return None
    return accept_value(key)


def switching_protocols(accept: bytes, extra_headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The 101 response uvicorn's websockets-sansio protocol sends on ``websocket.accept``
    (websockets' headers, then uvicorn's ``date``/``server``), byte for byte: uvicorn
    decodes those headers as latin-1 and lower-cases their names, websockets encodes UTF-8."""
    parts = [
        b"HTTP/1.1 101 Switching Protocols\r\n"
        b"Upgrade: websocket\r\n"
        b"Connection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: ",
        accept,
        b"\r\n",
    ]
    for name, value in extra_headers:
        if name.isascii() and value.isascii():  # the usual case: the same bytes either way
            parts += (name.lower(), b": ", value, b"\r\n")
        else:
            parts += (name.decode("latin-1").lower().encode(), b": ")
            parts += (value.decode("latin-1").encode(), b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


__all__ = ["MAX_HEADERS", "MAX_LINE", "accept_value", "plain_upgrade_accept", "switching_protocols"]
