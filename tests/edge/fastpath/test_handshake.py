"""edge.fastpath.handshake: the fast path says yes only where websockets would accept, with its key."""

from __future__ import annotations

import base64
import os

from hypothesis import example, given, settings
from hypothesis import strategies as st
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.utils import accept_key

from edge.fastpath.handshake import accept_value, plain_upgrade_accept, switching_protocols

Headers = list[tuple[bytes, bytes]]


def a_key() -> bytes:
    return base64.b64encode(os.urandom(16))


def okhttp_request(key: bytes) -> Headers:
    """What the Android app's HTTP client sends (names lower-cased, as uvicorn keeps them)."""
    return [
        (b"host", b"gateway.example:8790"),
        (b"upgrade", b"websocket"),
        (b"connection", b"Upgrade"),
        (b"sec-websocket-key", key),
        (b"sec-websocket-version", b"13"),
        (b"sec-websocket-extensions", b"permessage-deflate"),
        (b"accept-encoding", b"gzip"),
        (b"user-agent", b"okhttp/4.12.0"),
    ]


def websockets_verdict(method: bytes, target: bytes, headers: Headers) -> tuple[int, str | None]:
    """What websockets itself answers, fed the bytes uvicorn feeds it: (status, accept)."""
    protocol = ServerProtocol(max_size=None)
    lines = [method + b" " + target + b" HTTP/1.1\r\n"]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    protocol.receive_data(b"".join(lines) + b"\r\n")
    requests = protocol.events_received()
    if not requests:
        return 400, None  # not even parsed
    response = protocol.accept(requests[0])  # type: ignore[arg-type]
    return response.status_code, response.headers.get("Sec-WebSocket-Accept")


def test_the_accept_value_is_rfc_6455s() -> None:
    # RFC 6455 §1.3's own example.
    assert accept_value(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    key = a_key()
    assert accept_value(key).decode() == accept_key(key.decode())


def test_the_android_clients_upgrade_takes_the_fast_path_with_websockets_own_answer() -> None:
    key = a_key()
    fast = plain_upgrade_accept(b"GET", b"/ws", okhttp_request(key))
    assert fast is not None
    assert websockets_verdict(b"GET", b"/ws", okhttp_request(key)) == (101, fast.decode())


def test_a_browsers_upgrade_with_keep_alive_and_an_origin_takes_the_fast_path_too() -> None:
    headers = [
        (b"host", b"127.0.0.1"),
        (b"connection", b"keep-alive, Upgrade"),
        (b"upgrade", b"WebSocket"),
        (b"origin", b"https://app.example"),
        (b"sec-websocket-version", b"13"),
        (b"sec-websocket-key", a_key()),
        (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits"),
    ]
    fast = plain_upgrade_accept(b"GET", b"/ws?x=1", headers)
    assert fast is not None
    assert websockets_verdict(b"GET", b"/ws?x=1", headers) == (101, fast.decode())


def without(headers: Headers, name: bytes) -> Headers:
    return [(n, v) for n, v in headers if n != name]


def test_anything_unusual_is_left_to_websockets() -> None:
    key = a_key()
    plain = without(okhttp_request(key), b"sec-websocket-extensions")
    unusual = {
        "a POST": (b"POST", b"/ws", plain),
        "a subprotocol offer": (b"GET", b"/ws", [*plain, (b"sec-websocket-protocol", b"chat")]),
        "a body": (b"GET", b"/ws", [*plain, (b"content-length", b"0")]),
        "a second key": (b"GET", b"/ws", [*plain, (b"sec-websocket-key", a_key())]),
        "two origins": (b"GET", b"/ws", [*plain, (b"origin", b"a"), (b"origin", b"b")]),
        "no version": (b"GET", b"/ws", without(plain, b"sec-websocket-version")),
        "version 8": (
            b"GET",
            b"/ws",
            [*without(plain, b"sec-websocket-version"), (b"sec-websocket-version", b"8")],
        ),
        "a short key": (
            b"GET",
            b"/ws",
            [
                *without(plain, b"sec-websocket-key"),
                (b"sec-websocket-key", base64.b64encode(b"x" * 15)),
            ],
        ),
        "no upgrade": (b"GET", b"/ws", without(plain, b"upgrade")),
        "upgrade to h2c": (b"GET", b"/ws", [*without(plain, b"upgrade"), (b"upgrade", b"h2c")]),
        "connection close": (
            b"GET",
            b"/ws",
            [*without(plain, b"connection"), (b"connection", b"close")],
        ),
        "a non-ASCII path": (b"GET", "/wś".encode(), plain),
        "an oversize path": (b"GET", b"/" + b"a" * 9000, plain),
        "128 headers": (b"GET", b"/ws", plain + [(b"x-%d" % i, b"1") for i in range(121)]),
        "a control character": (b"GET", b"/ws", [*plain, (b"x-bad", b"a\x01b")]),
    }
    for why, (method, target, headers) in unusual.items():
        assert plain_upgrade_accept(method, target, headers) is None, why


TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~"
BYTE_TEXT = st.binary(min_size=0, max_size=24)
TOKENS = st.text(TOKEN_CHARS, min_size=1, max_size=10).map(str.encode)
HEADER_NAMES = st.sampled_from(
    [
        b"connection",
        b"upgrade",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"origin",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"host",
        b"x-extra",
    ]
)
HEADER_VALUES = st.one_of(
    st.sampled_from(
        [
            b"Upgrade",
            b"upgrade",
            b"keep-alive, Upgrade",
            b"websocket",
            b"WebSocket",
            b"13",
            b"8",
            b"",
            b"upgrade,",
            b", upgrade",
            b"websocket, h2c",
        ]
    ),
    st.binary(min_size=16, max_size=16).map(base64.b64encode),
    st.binary(min_size=0, max_size=20).map(base64.b64encode),
    st.lists(TOKENS, min_size=1, max_size=3).map(b", ".join),
    BYTE_TEXT,
)


@settings(max_examples=400)
@given(
    st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=9),
    st.sampled_from([b"GET", b"POST", b"get"]),
    st.sampled_from([b"/ws", b"/ws?a=b", b"/", b"/a b"]),
)
@example(
    [
        (b"connection", b"Upgrade"),
        (b"upgrade", b"websocket"),
        (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
        (b"sec-websocket-version", b"13"),
    ],
    b"GET",
    b"/ws",
)
def test_the_fast_path_never_accepts_what_websockets_would_refuse_or_answer_otherwise(
    headers: Headers, method: bytes, target: bytes
) -> None:
    # httptools hands over values without surrounding whitespace and without CR/LF.
    headers = [(n, v.strip(b" \t").replace(b"\r", b"").replace(b"\n", b"")) for n, v in headers]
    fast = plain_upgrade_accept(method, target, headers)
    if fast is not None:
        assert websockets_verdict(method, target, headers) == (101, fast.decode())


def test_the_101_is_websockets_response_with_uvicorns_headers_after_it() -> None:
    key = a_key()
    protocol = ServerProtocol(max_size=None)
    request = b"GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
    request += b"sec-websocket-key: " + key + b"\r\nsec-websocket-version: 13\r\n\r\n"
    protocol.receive_data(request)
    response = protocol.accept(protocol.events_received()[0])  # type: ignore[arg-type]
    # What uvicorn does on websocket.accept: websockets' Date out, its own headers in.
    del response.headers["Date"]
    response.headers.update([("date", "Thu, 03 Dec 2026 07:44:31 GMT")])
    protocol.send_response(response)
    assert protocol.state is State.OPEN
    expected = b"".join(protocol.data_to_send())
    ours = switching_protocols(accept_value(key), [(b"date", b"Thu, 03 Dec 2026 07:44:31 GMT")])
    assert ours == expected
