"""The life of one WebSocket: hello and auth, then frames in, commands out.

Auth: the first frame must be `hello` within 10 s. The token's digest resolves the tenant
through the bus (constant-time compare); failures count towards a per-address lockout
held on the bus, so it holds across every edge.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from canonical.errors import BusUnavailable
from canonical.jsonenc import TooDeep, has_lone_surrogate, loads_bounded
from canonical.model import Json
from canonical.protocol import (
    HELLO_TIMEOUT_S,
    LOCKOUT_FAILURES,
    LOCKOUT_WINDOW_S,
    MAX_CURSOR,
    MAX_FRAME_BYTES,
    MAX_JSON_DEPTH,
    new_id,
    now_iso,
)

from . import dialects, metrics
from .connection import Connection
from .dialects.iris import IRIS_VERSION, cursor_rule, valid_cursor
from .dialects.pheby import PROTOCOL_VERSION
from .errors import (
    BUS_UNREACHABLE,
    CLOSE_AUTH_TIMEOUT,
    CLOSE_LOCKED_OUT,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNAVAILABLE,
    CLOSE_VERSION_MISMATCH,
    FrameRejected,
)
from .hub import DIALECTS, Hub, encode
from .ratelimit import TokenBucket

if TYPE_CHECKING:  # imported only where its contract holds (edge.fastpath)
    from .fastpath.wire import UvicornWire as Wire

log = logging.getLogger("hdg.edge.session")

NESTED_TOO_DEEP = f"frames may nest arrays and objects at most {MAX_JSON_DEPTH} levels deep"
LONE_SURROGATE = "frames must be valid Unicode: a lone surrogate escape (\\ud800-\\udfff) is not"


class _Refused(Exception):
    def __init__(
        self, dialect: str, code: str, message: str, close: int, request_id: Any = None
    ) -> None:
        super().__init__(message)
        self.dialect = dialect
        self.code = code
        self.message = message
        self.close = close
        self.request_id = request_id


async def _receive_frame(ws: WebSocket) -> str | None:
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text = message.get("text")
    if text is None and message.get("bytes") is not None:
        data: bytes = message["bytes"]
        if len(data) > MAX_FRAME_BYTES:
            return "\x00too_large"
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "\x00invalid"
    if (
        text is not None
        and len(text) > MAX_FRAME_BYTES // 4
        and len(text.encode("utf-8")) > MAX_FRAME_BYTES
    ):
        return "\x00too_large"
    return text


REQUEST_ID_RULE = "request_id must be a string of at most 256 characters"


def valid_request_id(value: Any) -> bool:
    """Absent, a string of at most 256 characters, or an integer (not true/false, NaN, a
    list...): it is echoed in replies, and iris user message ids are made of it."""
    if value is None:
        return True
    if isinstance(value, str):
        return len(value) <= 256
    return type(value) is int and -MAX_CURSOR <= value <= MAX_CURSOR


def _iris_hello_problem(hello: Json) -> str | None:
    name, caps, fcm_token = hello.get("device_name"), hello.get("caps"), hello.get("fcm_token")
    if name is not None and not isinstance(name, str):
        return "device_name must be a string"
    if caps is not None and not (
        isinstance(caps, list) and len(caps) <= 64 and all(isinstance(c, str) for c in caps)
    ):
        return "caps must be a list of strings"
    if fcm_token is not None and not (isinstance(fcm_token, str) and len(fcm_token) <= 4096):
        return "fcm_token must be a string"
    return None


def _online_settled(conn: Connection, online: asyncio.Future[None]) -> None:
    """The hello's bus writes failed: the plugin never got it (iris) or presence is
    unknown, so the device hears why and reconnects (it loses nothing: replay)."""
    if online.cancelled():
        return
    error = online.exception()
    if error is None or conn.closed:
        return
    log.warning("hello not delivered to the bus: %s", type(error).__name__)
    conn.send_frame(encode(conn.dialect.error_frame("unavailable", BUS_UNREACHABLE)))
    conn.request_close(CLOSE_UNAVAILABLE)


def _with_client_id(error: Json, conn: Connection, frame: Any) -> Json:
    """An iris send is matched to its answer by client_id (it may have no request_id): an
    error the edge gives it carries the client_id too, or the device never sees its send
    refused and cannot retry it. Echoed only when it is one the device could send again."""
    if conn.dialect.name != "iris" or not isinstance(frame, dict):
        return error
    client_id = frame.get("client_id")
    if isinstance(client_id, str) and client_id.strip() and len(client_id) <= 128:
        error["client_id"] = client_id
    return error


class DeviceSession:
    def __init__(
        self,
        ws: WebSocket,
        hub: Hub,
        *,
        send_queue_frames: int = 1024,
        wire: Wire | None = None,
        on_hello: Callable[[], None] | None = None,
    ) -> None:
        self.ws = ws
        self.wire = wire
        self.hub = hub
        self.bus = hub.bus
        self.source = ws.client.host if ws.client else "unknown"
        self.send_queue_frames = send_queue_frames
        self.conn: Connection | None = None
        self.bucket = TokenBucket(rate=50.0, burst=200.0)
        self.on_hello = on_hello  # the socket has shown who it is (edge.guard)

    async def _send_now(self, frame: Json) -> None:
        await self.ws.send_text(encode(frame))

    async def run(self) -> None:
        await self.ws.accept()
        if self.wire is not None:
            self.wire.release_handshake()
        try:
            if await self.bus.lockout_count(self.source) >= LOCKOUT_FAILURES:
                metrics.LOCKOUTS.inc()
                await self._send_now(
                    DIALECTS["pheby"].error_frame(
                        "rate_limited", "too many failed hellos; try again later"
                    )
                )
                await self.ws.close(CLOSE_LOCKED_OUT)
                return
        except BusUnavailable:
            await self._unavailable()
            return
        try:
            conn = await self._hello()
        except _Refused as refused:
            await self._send_now(
                DIALECTS[refused.dialect].error_frame(
                    refused.code, refused.message, refused.request_id
                )
            )
            await self.ws.close(refused.close)
            return
        except BusUnavailable:
            await self._unavailable()
            return
        except WebSocketDisconnect:
            return
        self.conn = conn
        if self.on_hello is not None:
            self.on_hello()
        try:
            await self._frames(conn)
        except WebSocketDisconnect:
            pass
        finally:
            await self.hub.detach(conn)
            await conn.stop()
            try:
                await self.bus.set_presence(conn.tenant, conn.device_id, None)
            except BusUnavailable:
                pass

    async def _unavailable(self) -> None:
        try:
            await self._send_now(DIALECTS["pheby"].error_frame("unavailable", BUS_UNREACHABLE))
            await self.ws.close(CLOSE_UNAVAILABLE)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            # The device left first (uvicorn's ClientDisconnected is an OSError; Starlette
            # refuses a send after the close with RuntimeError): nobody left to tell.
            log.debug("could not tell the device the bus is unavailable: %s", type(exc).__name__)

    async def _fail_hello(
        self, dialect: str, code: str, message: str, close: int, request_id: Any = None
    ) -> None:
        metrics.hello_refused(code)
        count = await self.bus.lockout_hit(self.source, LOCKOUT_WINDOW_S)
        log.info("hello refused source=%s code=%s failures=%d", self.source, code, count)
        raise _Refused(dialect, code, message, close, request_id)

    async def _hello(self) -> Connection:
        try:
            # asyncio.timeout, not wait_for: no extra task per connection (3.11).
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                raw = await _receive_frame(self.ws)
        except TimeoutError:
            raise _Refused(
                "pheby", "auth_timeout", "no hello within 10 seconds", CLOSE_AUTH_TIMEOUT
            ) from None
        not_json = "the first frame must be a JSON hello"
        try:
            hello = (
                loads_bounded(raw, MAX_JSON_DEPTH)
                if raw is not None and not raw.startswith("\x00")
                else None
            )
        except TooDeep:
            hello, not_json = None, NESTED_TOO_DEEP
        except ValueError:
            hello = None
        if raw is not None and hello is not None and has_lone_surrogate(raw, hello):
            hello = None
        if not isinstance(hello, dict):
            await self._fail_hello("pheby", "invalid_json", not_json, CLOSE_UNAUTHORIZED)
            raise AssertionError("unreachable")
        dialect = dialects.detect(hello)
        request_id = hello.get("request_id")
        if dialect is None:
            await self._fail_hello(
                "pheby",
                "unauthorized",
                "the first frame must be hello",
                CLOSE_UNAUTHORIZED,
                request_id,
            )
        assert dialect is not None
        if not valid_request_id(request_id):  # echoed in the reply: it must be sane JSON
            raise _Refused(dialect, "bad_request", REQUEST_ID_RULE, CLOSE_UNAUTHORIZED)
        token = hello.get("secret") if dialect == "pheby" else hello.get("token")
        if dialect == "pheby":
            version = hello.get("protocol_version")
            if type(version) is not int or version != PROTOCOL_VERSION:  # not true, not 1.0
                await self._fail_hello(
                    dialect,
                    "version_mismatch",
                    f"server speaks protocol_version {PROTOCOL_VERSION}",
                    CLOSE_VERSION_MISMATCH,
                    request_id,
                )
        else:
            version = hello.get("version", IRIS_VERSION)
            if type(version) is not int or version != IRIS_VERSION:
                await self._fail_hello(
                    dialect,
                    "version_mismatch",
                    f"server speaks iris version {IRIS_VERSION}",
                    CLOSE_VERSION_MISMATCH,
                    request_id,
                )
        tenant = (
            await self.bus.resolve_tenant(token)
            if isinstance(token, str) and 0 < len(token) <= 512
            else None
        )
        if tenant is None:
            await self._fail_hello(
                dialect, "unauthorized", "invalid credentials", CLOSE_UNAUTHORIZED, request_id
            )
        assert tenant is not None
        device_id = hello.get("device_id") if dialect == "iris" else None
        if dialect == "iris" and (not isinstance(device_id, str) or not 0 < len(device_id) <= 128):
            raise _Refused(
                dialect, "bad_request", "device_id is required", CLOSE_UNAUTHORIZED, request_id
            )
        problem = _iris_hello_problem(hello) if dialect == "iris" else None
        if problem is not None:  # said, not silently coerced or dropped
            raise _Refused(dialect, "bad_request", problem, CLOSE_UNAUTHORIZED, request_id)
        conn_id = new_id(8)
        conn = Connection(
            conn_id,
            DIALECTS[dialect],
            tenant,
            str(device_id or f"pheby-{conn_id}"),
            self.ws.send_text,
            self.ws.close,
            self.send_queue_frames,
            send_bytes=self.ws.send_bytes,
            wire=self.wire,
        )
        if dialect == "iris":
            cursor = hello.get("cursor")
            # No cursor: a fresh device, starting at the head. A cursor (0 included): replay after it.
            if cursor is not None and not valid_cursor(cursor):
                # Not taken as "fresh": that would skip the events the device is missing.
                raise _Refused(
                    dialect, "bad_request", cursor_rule(), CLOSE_UNAUTHORIZED, request_id
                )
            conn.last_cursor = cursor or 0
            conn.begin_replay()
        await self.hub.attach(conn)
        if dialect == "pheby":
            ready: Json = {
                "type": "ready",
                "protocol_version": PROTOCOL_VERSION,
                "server": "pheby",
                "ts": conn.since,  # the same instant: one clock read per set-up
            }
            if request_id is not None:
                ready["request_id"] = request_id
            conn.send_frame(encode(ready))
            command: Json | None = None
        else:
            # The plugin answers with hello.ack (directory, sync cursor) and the replay.
            command = self._command(
                conn,
                "hello",
                {
                    "device_name": (hello.get("device_name") or "")[:128],
                    "caps": hello.get("caps") or [],
                    "cursor": cursor,
                    "fcm_token": hello.get("fcm_token"),
                    "request_id": request_id,
                },
                request_id,
            )
        # The hello for the plugin and the device's presence, in a round trip shared with
        # other set-ups. Not awaited: the session reads frames meanwhile, and a failure
        # reaches the device as `unavailable` and a close (_online_settled).
        online = self.bus.device_online_soon(
            tenant,
            conn.device_id,
            self.hub.presence_info(conn),
            command,
        )
        online.add_done_callback(functools.partial(_online_settled, conn))
        return conn

    def _command(self, conn: Connection, cmd: str, args: Json, request_id: Any) -> Json:
        return {
            "cmd": cmd,
            "edge": self.hub.edge_id,
            "conn": conn.id,
            "dialect": conn.dialect.name,
            "device_id": conn.device_id,
            "request_id": request_id,
            "args": args,
            "ts": now_iso(),
        }

    async def _submit(self, conn: Connection, cmd: str, args: Json, request_id: Any) -> None:
        await self.bus.submit(conn.tenant, self._command(conn, cmd, args, request_id))

    async def _frames(self, conn: Connection) -> None:
        while not conn.closed:
            raw = await _receive_frame(self.ws)
            self.hub.frames_in += 1
            request_id: Any = None
            frame: Any = None
            try:
                if raw is None or raw == "\x00invalid":
                    raise FrameRejected("invalid_json", "frames must be UTF-8 JSON text")
                if raw == "\x00too_large":
                    raise FrameRejected(
                        "too_large", f"frames are limited to {MAX_FRAME_BYTES} bytes"
                    )
                if not self.bucket.take():
                    raise FrameRejected("rate_limited", "too many frames; slow down")
                try:
                    frame = loads_bounded(raw, MAX_JSON_DEPTH)
                except TooDeep:
                    raise FrameRejected("invalid_json", NESTED_TOO_DEEP) from None
                except ValueError:
                    raise FrameRejected("invalid_json", "frame is not valid JSON") from None
                if not isinstance(frame, dict):
                    raise FrameRejected("invalid_json", "frame must be a JSON object")
                request_id = frame.get("request_id")
                if not valid_request_id(request_id):
                    request_id = None  # not echoed: it is what is wrong
                    raise FrameRejected("bad_request", REQUEST_ID_RULE)
                if has_lone_surrogate(raw, frame):
                    # UTF-8 cannot carry it: the plugin could store or echo none of it.
                    raise FrameRejected("invalid_json", LONE_SURROGATE)
                decoded = conn.dialect.decode(frame)
                if "local" in decoded:
                    local = decoded["local"]
                    if request_id is not None:
                        local["request_id"] = request_id
                    conn.send_frame(encode(local))
                    continue
                if decoded["cmd"].startswith("media.") and self.hub.media is not None:
                    # Media bytes stay on the edge (shared storage), never on the bus.
                    await self.hub.media.handle(conn, decoded["cmd"], decoded["args"], request_id)
                    continue
                if decoded["cmd"] == "sync":
                    # The device says what it has: replay from its cursor, even events this
                    # connection already delivered (it may have lost them) or never had (a
                    # connection that started at the head).
                    conn.begin_replay()
                    conn.last_cursor = decoded["args"]["cursor"]
                await self._submit(conn, decoded["cmd"], decoded["args"], request_id)
            except FrameRejected as rejected:
                rid = rejected.request_id if rejected.request_id is not None else request_id
                error = conn.dialect.error_frame(rejected.code, rejected.message, rid)
                conn.send_frame(encode(_with_client_id(error, conn, frame)))
            except BusUnavailable:
                if conn.replaying and conn.finish_replay([]):
                    conn.request_close(CLOSE_UNAVAILABLE)  # it resumes on reconnecting
                error = conn.dialect.error_frame(
                    "unavailable",
                    "the gateway is unreachable right now; retry shortly",
                    request_id,
                )
                conn.send_frame(encode(_with_client_id(error, conn, frame)))
