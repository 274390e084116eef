"""Attachments over HTTP on the edge port (pheby spec, "Attachments (both directions)").

``POST /attachments?conversation_id=&filename=`` streams the raw body to the deployment's
shared storage under a server-generated name (never the client's filename), then asks the
tenant's plugin to register it (``attachment.register``); a refusal deletes the file.
``GET /attachments/{id}`` resolves the id with the plugin (``attachment.get``) and streams
the file. Both accept ``Authorization: Bearer <token>``, ``Authorization: ApiKey <token>``
or ``X-Pheby-Secret: <token>``; a bad or missing token counts towards the same per-address
lockout as a failed hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from canonical import attachments as spec
from canonical.bus import Bus
from canonical.errors import BusUnavailable
from canonical.model import Json
from canonical.protocol import LOCKOUT_FAILURES, LOCKOUT_WINDOW_S, new_id

from . import metrics
from .errors import BUS_UNREACHABLE
from .hub import Hub

log = logging.getLogger("hdg.edge.attachments")

FLUSH_BYTES = 1024 * 1024
MAX_TOKEN_CHARS = 512
NOT_FOUND_MESSAGE = "Attachment unavailable"
# The plugin's refusal codes, as HTTP statuses.
_STATUS = {
    "conversation_not_found": 400,
    "bad_request": 400,
    "not_found": 404,
    "too_large": 413,
    "unavailable": 503,
}


class Refused(Exception):
    """The request fails with ``status`` and the wire error ``code``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


def not_found() -> JSONResponse:
    return error_response(404, "not_found", NOT_FOUND_MESSAGE)


@dataclass
class Stored:
    """A body written to storage: where, how big, its digest."""

    attachment_id: str
    path: Path
    size: int
    sha256: str


# Bodies one tenant may stream into this edge at once (HTTP): a token holder cannot tie up
# the edge's connections, memory and disk with many slow uploads.
MAX_UPLOADS_AT_ONCE = 4


class AttachmentStore:
    """The edge's side of attachment storage: it writes files and asks the plugin."""

    def __init__(
        self, hub: Hub, root: Path | None, max_bytes: int, body_idle_timeout_s: float = 30.0
    ) -> None:
        self.hub = hub
        self.root = root
        self.max_bytes = max_bytes
        # An upload whose body stops coming for this long is cut: it would hold one of
        # the tenant's MAX_UPLOADS_AT_ONCE places for as long as the client liked.
        self.body_idle_timeout_s = body_idle_timeout_s
        self._receiving: dict[str, int] = {}  # tenant -> HTTP bodies being received

    def check_room(self, tenant: str) -> None:
        """Refused (429) while ``tenant`` has as many HTTP uploads in flight as allowed."""
        if self._receiving.get(tenant, 0) >= MAX_UPLOADS_AT_ONCE:
            raise Refused(
                429, "rate_limited", f"at most {MAX_UPLOADS_AT_ONCE} uploads at once; retry"
            )

    @contextlib.contextmanager
    def receiving(self, tenant: str) -> Iterator[None]:
        """One HTTP upload of ``tenant`` in flight; Refused (429) beyond the limit."""
        self.check_room(tenant)
        self._receiving[tenant] = self._receiving.get(tenant, 0) + 1
        try:
            yield
        finally:
            left = self._receiving.pop(tenant) - 1
            if left:
                self._receiving[tenant] = left

    @property
    def configured(self) -> bool:
        return self.root is not None

    def require_root(self) -> Path:
        if self.root is None:
            raise Refused(
                503,
                "unavailable",
                "attachments are not configured on this edge (ANDROID_ATTACHMENTS_DIR)",
            )
        return self.root

    async def ask(self, tenant: str, cmd: str, args: Json) -> Json:
        """The plugin's reply; an error reply becomes Refused."""
        try:
            reply = await self.hub.request(tenant, cmd, args)
        except (TimeoutError, BusUnavailable):
            raise Refused(503, "unavailable", "the gateway did not answer; retry shortly") from None
        if reply.get("type") == "error":
            code = str(reply.get("code") or "internal_error")
            raise Refused(_STATUS.get(code, 500), code, str(reply.get("message") or code))
        return reply

    async def check(self, tenant: str, lane_or_conversation: Json) -> Json:
        return await self.ask(tenant, "attachment.check", lane_or_conversation)

    async def register(
        self,
        tenant: str,
        stored: Stored,
        where: Json,
        filename: str,
        mime: str,
        *,
        keep_unanswered: bool = False,
    ) -> Json:
        """Register a file already at its final path; delete it if the plugin refuses.
        ``keep_unanswered``: keep it when the plugin did not answer (503, cancelled), for
        a retry to register it again (a resumable upload)."""
        try:
            reply = await self.ask(
                tenant,
                "attachment.register",
                {
                    **where,
                    "attachment_id": stored.attachment_id,
                    "filename": filename,
                    "mime_type": mime,
                    "size": stored.size,
                    "sha256": stored.sha256,
                },
            )
        except BaseException as failure:
            unanswered = not isinstance(failure, Refused) or failure.status == 503
            if not (keep_unanswered and unanswered):
                with contextlib.suppress(OSError):
                    stored.path.unlink()
            raise
        attachment = reply.get("attachment")
        return attachment if isinstance(attachment, dict) else {}

    async def resolve(self, tenant: str, attachment_id: str) -> tuple[Json, Path] | None:
        """(plugin's answer, file path) for a live attachment of the tenant, else None."""
        root = self.require_root()
        if not spec.valid_id(attachment_id):
            return None
        try:
            reply = await self.ask(tenant, "attachment.get", {"attachment_id": attachment_id})
        except Refused as refused:
            if refused.status == 404:
                return None
            raise
        path = spec.attachment_path(root, tenant, attachment_id)
        if not path.is_file():
            return None
        return reply, path


class BodyWriter:
    """Writes a streamed body to a part file in blocks, hashing as it goes, off the loop."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.size = 0
        self.digest = hashlib.sha256()
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._fh: IO[bytes] | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("xb")

    def _write(self, blocks: list[bytes]) -> None:
        assert self._fh is not None
        for block in blocks:
            self.digest.update(block)
            self._fh.write(block)

    async def add(self, chunk: bytes) -> bool:
        """False once the body is over the limit (nothing more is written)."""
        self.size += len(chunk)
        if self.size > self.limit:
            return False
        self._buffer.append(chunk)
        self._buffered += len(chunk)
        if self._buffered >= FLUSH_BYTES:
            await self.flush()
        return True

    async def flush(self) -> None:
        blocks, self._buffer, self._buffered = self._buffer, [], 0
        if blocks:
            await asyncio.to_thread(self._write, blocks)

    async def close(self) -> None:
        await self.flush()
        if self._fh is not None:
            await asyncio.to_thread(self._fh.close)
            self._fh = None

    def discard(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None
        with contextlib.suppress(OSError):
            self.path.unlink()


def presented_token(request: Request) -> str | None:
    authorization = request.headers.get("authorization")
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() in ("bearer", "apikey") and value.strip():
            return value.strip()
        return None
    secret = request.headers.get("x-pheby-secret")
    return secret.strip() if secret and secret.strip() else None


async def authenticate(request: Request, bus: Bus) -> str:
    """The tenant the request's token opens; failures count towards the lockout."""
    source = request.client.host if request.client else "unknown"
    try:
        if await bus.lockout_count(source) >= LOCKOUT_FAILURES:
            raise Refused(429, "rate_limited", "too many failed attempts; try again later")
        token = presented_token(request)
        tenant = (
            await bus.resolve_tenant(token)
            if token is not None and len(token) <= MAX_TOKEN_CHARS
            else None
        )
        if tenant is None:
            count = await bus.lockout_hit(source, LOCKOUT_WINDOW_S)
            log.info("attachment request refused source=%s failures=%d", source, count)
            raise Refused(
                401,
                "unauthorized",
                "missing credentials" if token is None else "invalid credentials",
            )
    except BusUnavailable:
        raise Refused(503, "unavailable", BUS_UNREACHABLE) from None
    return tenant


def _refusal(refused: Refused) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="hermes"'} if refused.status == 401 else None
    if refused.status == 408:  # the rest of the body is not read: the connection is done
        headers = {"Connection": "close"}
    return error_response(refused.status, refused.code, refused.message, headers)


def _is_form(content_type: str | None) -> bool:
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind.startswith("multipart/") or kind == "application/x-www-form-urlencoded"


def _declared_length(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    value = raw.strip()
    if not (value.isascii() and value.isdigit()):  # "²" is a digit to isdigit
        raise Refused(400, "bad_request", "invalid Content-Length")
    return int(value)


def routes(store: AttachmentStore) -> list[Route]:
    bus = store.hub.bus

    async def upload(request: Request) -> Response:
        try:
            tenant = await authenticate(request, bus)
            store.check_room(tenant)  # before anything else is looked at
            root = store.require_root()
            conversation_id = request.query_params.get("conversation_id") or ""
            if not conversation_id.strip():
                raise Refused(400, "bad_request", "conversation_id is required")
            if len(conversation_id) > 64:
                raise Refused(400, "bad_request", "conversation_id is longer than 64")
            filename = spec.sanitize_filename(request.query_params.get("filename"))
            if _is_form(request.headers.get("content-type")):
                # Stored as sent, the file would be the form's envelope (boundaries and all).
                raise Refused(
                    415, "bad_request", "send the file's raw bytes as the body, not a form"
                )
            declared = _declared_length(request)
            if declared is not None and declared > store.max_bytes:
                raise Refused(413, "too_large", f"files are limited to {store.max_bytes} bytes")
            if declared == 0:
                raise Refused(400, "bad_request", "the request body is empty")
            where = {"conversation_id": conversation_id}
            await store.check(tenant, where)
            with store.receiving(tenant):
                stored = await _receive(
                    request, root, tenant, store.max_bytes, store.body_idle_timeout_s
                )
                mime = spec.guess_mime(filename, request.headers.get("content-type"))
                attachment = await store.register(tenant, stored, where, filename, mime)
        except Refused as refused:
            return _refusal(refused)
        return JSONResponse({"attachment": attachment}, 201)

    async def download(request: Request) -> Response:
        try:
            tenant = await authenticate(request, bus)
            found = await store.resolve(tenant, str(request.path_params.get("attachment_id")))
        except Refused as refused:
            return _refusal(refused)
        if found is None:
            return not_found()
        reply, path = found
        attachment = reply["attachment"]
        return FileResponse(
            path,
            media_type=str(attachment["mime_type"]),
            filename=str(attachment["filename"]),
            content_disposition_type="inline" if attachment.get("inline_image") else "attachment",
            headers={
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, max-age=3600",
                "Content-Security-Policy": "default-src 'none'; sandbox",
            },
        )

    async def thumbnail(request: Request) -> Response:
        """The media worker's thumbnail of an uploaded image (announced by `media.ready`
        with `thumbnail` in its variants): what a client shows inline instead of the
        full file."""
        attachment_id = str(request.path_params.get("attachment_id"))
        try:
            tenant = await authenticate(request, bus)
            found = await store.resolve(tenant, attachment_id)
        except Refused as refused:
            return _refusal(refused)
        if found is None:
            return not_found()
        path = spec.thumbnail_path(store.require_root(), tenant, attachment_id)
        if not await asyncio.to_thread(path.is_file):
            return not_found()
        return FileResponse(
            path,
            media_type="image/webp",
            content_disposition_type="inline",
            headers={
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, max-age=3600",
                "Content-Security-Policy": "default-src 'none'; sandbox",
            },
        )

    return [
        Route("/attachments", upload, methods=["POST"]),
        Route("/attachments/{attachment_id}/thumbnail", thumbnail, methods=["GET", "HEAD"]),
        Route("/attachments/{attachment_id:path}", download, methods=["GET", "HEAD"]),
    ]


async def _receive(
    request: Request, root: Path, tenant: str, limit: int, idle_timeout: float
) -> Stored:
    """Stream the body to ``incoming/<id>.part``, then move it to ``<tenant>/<id>``; 408 when
    no byte of it comes for ``idle_timeout`` seconds."""
    attachment_id = new_id()
    writer = BodyWriter(spec.incoming_dir(root, tenant) / f"{attachment_id}.part", limit)
    try:
        writer.open()
        chunks = request.stream()
        while True:
            try:
                async with asyncio.timeout(idle_timeout):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                metrics.SLOW_REQUESTS.labels("body").inc()
                raise Refused(
                    408, "bad_request", f"the upload stalled: no data for {idle_timeout:g} s"
                ) from None
            if not await writer.add(chunk):
                raise Refused(413, "too_large", f"files are limited to {limit} bytes")
        await writer.close()
    except (Refused, ClientDisconnect, OSError) as exc:
        writer.discard()
        if isinstance(exc, OSError):
            log.error("attachment storage write failed: %s", type(exc).__name__)
            raise Refused(503, "unavailable", "the attachment could not be stored") from None
        if isinstance(exc, ClientDisconnect):
            raise Refused(400, "bad_request", "the upload was interrupted") from None
        raise
    except BaseException:
        writer.discard()
        raise
    if writer.size == 0:
        writer.discard()
        raise Refused(400, "bad_request", "the request body is empty")
    final = spec.attachment_path(root, tenant, attachment_id)
    try:
        os.replace(writer.path, final)
    except OSError:
        writer.discard()
        raise Refused(503, "unavailable", "the attachment could not be stored") from None
    return Stored(attachment_id, final, writer.size, writer.digest.hexdigest())


__all__ = [
    "AttachmentStore",
    "BodyWriter",
    "Refused",
    "Stored",
    "authenticate",
    "error_response",
    "not_found",
    "presented_token",
    "routes",
]
