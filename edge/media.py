"""Iris media frames, handled on the edge (docs/protocol/media.md).

Uploads are chunked, resumable, size-limited and checksummed. Partial uploads live in the
deployment's shared storage (``<tenant>/uploads/<upload_id>.part`` + ``.json``), so a
device that reconnects to another edge resumes where it stopped. A finished upload is
verified against its sha256, moved to ``<tenant>/<attachment_id>`` and registered with
the plugin exactly like an HTTP upload; its ``media_ref`` is the attachment id.

``media.pull`` streams a registered file as binary frames (``PULL_HEADER`` + data),
paced by the connection's send queue, and ends with ``media.pulled``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from canonical import attachments as spec
from canonical.model import Json
from canonical.protocol import new_id, now_iso

from .attachments import AttachmentStore, Refused, Stored
from .connection import Connection
from .errors import FrameRejected
from .hub import encode

log = logging.getLogger("hdg.edge.media")

PULL_QUEUE_FRAMES = 4  # binary frames queued ahead of the writer per pull
MAX_PULLS_PER_CONNECTION = 4
# Started, unfinished uploads per tenant (each holds files until it expires after a day).
MAX_UNFINISHED_UPLOADS = 64
HASH_BLOCK = 1024 * 1024
_IRIS_CODES = {"conversation_not_found": "not_found"}


class _OffsetMismatch(Exception):
    def __init__(self, current: int) -> None:
        super().__init__(current)
        self.current = current


class _Busy(Exception):
    pass


def _write_chunk(part: Path, offset: int, data: bytes, size: int) -> int:
    """Append ``data`` at ``offset`` under an exclusive lock; the new end offset.

    The lock (flock on the shared storage) keeps two connections, on this edge or another,
    from writing the same upload at once.
    """
    fd = os.open(part, os.O_WRONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise _Busy() from None
            raise
        current = os.fstat(fd).st_size
        if offset != current:
            raise _OffsetMismatch(current)
        if offset + len(data) > size:
            raise ValueError("chunk goes past the declared size")
        view = memoryview(data)
        position = offset
        while view:
            written = os.pwrite(fd, view, position)
            view = view[written:]
            position += written
        return position
    finally:
        os.close(fd)


def _unlink(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def _unfinished(directory: Path) -> int:
    """Uploads started and neither finished nor expired (their meta files)."""
    try:
        return sum(1 for name in os.listdir(directory) if name.endswith(".json"))
    except FileNotFoundError:
        return 0


def _stored_bytes(part: Path, meta: Json) -> int:
    """How much of an upload is in: the part's size, or all of it once a finish moved it."""
    try:
        return part.stat().st_size
    except FileNotFoundError:
        if meta.get("attachment_id"):
            return int(meta["size"])
        raise


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _write_json(path: Path, body: Json) -> None:
    tmp = path.with_name(path.name + f".{new_id(4)}.tmp")
    tmp.write_text(json.dumps(body), encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path) -> Json | None:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


class MediaFrames:
    """``media.upload.start`` / ``media.upload.chunk`` / ``media.pull`` for one edge."""

    def __init__(self, store: AttachmentStore) -> None:
        self.store = store
        self._pulls: dict[str, set[asyncio.Task[None]]] = {}
        self._finishing: set[str] = set()  # upload ids being finished on this edge

    async def handle(self, conn: Connection, cmd: str, args: Json, request_id: Any) -> None:
        try:
            if not self.store.configured:
                raise FrameRejected(
                    "unavailable", "media storage is not configured on this edge", request_id
                )
            if cmd == "media.upload.start":
                await self._start(conn, args, request_id)
            elif cmd == "media.upload.chunk":
                await self._chunk(conn, args, request_id)
            elif cmd == "media.pull":
                await self._pull(conn, args, request_id)
            else:
                raise FrameRejected("unknown_type", f"unknown type {cmd[:64]!r}", request_id)
        except Refused as refused:
            raise FrameRejected(
                _IRIS_CODES.get(refused.code, refused.code), refused.message, request_id
            ) from None
        except OSError as exc:
            log.error("media storage failed for %s: %s", cmd, type(exc).__name__)
            raise FrameRejected(
                "unavailable", "media storage failed; retry shortly", request_id
            ) from None

    # -- uploads
    def _paths(self, tenant: str, upload_id: str) -> tuple[Path, Path, Path]:
        directory = spec.uploads_dir(self.store.require_root(), tenant)
        return (
            directory / f"{upload_id}.part",
            directory / f"{upload_id}.json",
            directory / f"{upload_id}.done",
        )

    def _send(self, conn: Connection, frame: Json, request_id: Any) -> None:
        if request_id is not None:
            frame["request_id"] = request_id
        conn.send_frame(encode(frame))

    def _uploaded(self, conn: Connection, done: Json, request_id: Any) -> None:
        self._send(
            conn,
            {
                "type": "media.uploaded",
                "upload_id": done["upload_id"],
                "media_ref": done["media_ref"],
                "attachment": done.get("attachment"),
                "ts": now_iso(),
            },
            request_id,
        )

    async def _start(self, conn: Connection, args: Json, request_id: Any) -> None:
        size = int(args["size"])
        if size > self.store.max_bytes:
            raise FrameRejected(
                "too_large", f"files are limited to {self.store.max_bytes} bytes", request_id
            )
        upload_id = args.get("upload_id")
        if upload_id is not None:
            part, meta_path, done_path = self._paths(conn.tenant, upload_id)
            done = await asyncio.to_thread(_read_json, done_path)
            if done is not None:
                self._uploaded(conn, done, request_id)
                return
            meta = await asyncio.to_thread(_read_json, meta_path)
            if meta is not None:
                if meta.get("size") != size or meta.get("sha256") != args["sha256"]:
                    raise FrameRejected(
                        "bad_request", "upload_id belongs to a different file", request_id
                    )
                if (meta.get("chat_id"), meta.get("thread_id")) != (
                    args["chat_id"],
                    args.get("thread_id"),
                ):  # it would be registered where it was started, not where it is asked
                    raise FrameRejected(
                        "bad_request", "upload_id belongs to another conversation", request_id
                    )
                offset = await asyncio.to_thread(_stored_bytes, part, meta)
                if offset >= size:  # all bytes are in, but finishing them failed: again
                    await self._finish(conn, meta, part, meta_path, done_path, request_id)
                    return
                self._ready(conn, upload_id, offset, request_id)
                return
        lane = {"chat_id": args["chat_id"], "thread_id": args.get("thread_id")}
        await self.store.check(conn.tenant, lane)
        directory = spec.uploads_dir(self.store.require_root(), conn.tenant)
        if await asyncio.to_thread(_unfinished, directory) >= MAX_UNFINISHED_UPLOADS:
            raise FrameRejected(
                "rate_limited",
                f"{MAX_UNFINISHED_UPLOADS} uploads are unfinished: finish one, or wait a day "
                "for the oldest to expire",
                request_id,
            )
        upload_id = new_id()
        part, meta_path, _ = self._paths(conn.tenant, upload_id)
        meta = {
            "upload_id": upload_id,
            "filename": spec.sanitize_filename(args.get("filename")),
            "mime": args.get("mime"),
            "size": size,
            "sha256": args["sha256"],
            **lane,
            "device_id": conn.device_id,
            "created": now_iso(),
        }

        def create() -> None:
            part.parent.mkdir(parents=True, exist_ok=True)
            part.touch(exist_ok=False)
            _write_json(meta_path, meta)

        await asyncio.to_thread(create)
        self._ready(conn, upload_id, 0, request_id)

    def _ready(self, conn: Connection, upload_id: str, offset: int, request_id: Any) -> None:
        self._send(
            conn,
            {
                "type": "media.upload.ready",
                "upload_id": upload_id,
                "offset": offset,
                "chunk_max": spec.CHUNK_MAX_BYTES,
            },
            request_id,
        )

    async def _chunk(self, conn: Connection, args: Json, request_id: Any) -> None:
        upload_id = args["upload_id"]
        part, meta_path, done_path = self._paths(conn.tenant, upload_id)
        meta = await asyncio.to_thread(_read_json, meta_path)
        if meta is None:
            done = await asyncio.to_thread(_read_json, done_path)
            if done is not None:
                self._uploaded(conn, done, request_id)
                return
            raise FrameRejected("not_found", "unknown or expired upload_id", request_id)
        try:
            data = base64.b64decode(args["data"], validate=True)
        except (binascii.Error, ValueError):
            raise FrameRejected("bad_request", "data must be base64", request_id) from None
        if not data or len(data) > spec.CHUNK_MAX_BYTES:
            raise FrameRejected(
                "bad_request", f"chunks carry 1 to {spec.CHUNK_MAX_BYTES} bytes", request_id
            )
        size = int(meta["size"])
        offset = int(args["offset"])
        try:
            end = await asyncio.to_thread(_write_chunk, part, offset, data, size)
        except _Busy:
            raise FrameRejected(
                "unavailable", "this upload is being written by another connection", request_id
            ) from None
        except _OffsetMismatch as mismatch:
            if offset < mismatch.current:
                if mismatch.current >= size:  # the last chunk again: its finish failed
                    await self._finish(conn, meta, part, meta_path, done_path, request_id)
                    return
                # A chunk sent again after a lost ack: already stored.
                self._ack(conn, upload_id, mismatch.current, request_id)
                return
            raise FrameRejected(
                "bad_request",
                f"offset {offset} is past the upload's end {mismatch.current}",
                request_id,
            ) from None
        except ValueError:
            raise FrameRejected(
                "bad_request", "the chunk goes past the declared size", request_id
            ) from None
        except FileNotFoundError:
            if meta.get("attachment_id"):  # moved into place by a finish that then failed
                await self._finish(conn, meta, part, meta_path, done_path, request_id)
                return
            raise FrameRejected("not_found", "unknown or expired upload_id", request_id) from None
        if end < size:
            self._ack(conn, upload_id, end, request_id)
            return
        await self._finish(conn, meta, part, meta_path, done_path, request_id)

    def _ack(self, conn: Connection, upload_id: str, offset: int, request_id: Any) -> None:
        self._send(
            conn, {"type": "media.upload.ack", "upload_id": upload_id, "offset": offset}, request_id
        )

    async def _finish(
        self,
        conn: Connection,
        meta: Json,
        part: Path,
        meta_path: Path,
        done_path: Path,
        request_id: Any,
    ) -> None:
        """Check, move into place and register a complete upload. Retryable: until the
        plugin has answered, the meta (with the attachment id it chose) and the file stay,
        and a resumed start or the last chunk sent again finishes it."""
        upload_id = str(meta["upload_id"])
        if upload_id in self._finishing:
            raise FrameRejected(
                "unavailable", "this upload is being finished; retry shortly", request_id
            )
        self._finishing.add(upload_id)
        try:
            done = await self._finish_once(conn, meta, part, meta_path, request_id)
        finally:
            self._finishing.discard(upload_id)
        await asyncio.to_thread(_write_json, done_path, done)
        await asyncio.to_thread(_unlink, meta_path)
        self._uploaded(conn, done, request_id)

    async def _finish_once(
        self, conn: Connection, meta: Json, part: Path, meta_path: Path, request_id: Any
    ) -> Json:
        root = self.store.require_root()
        chosen = meta.get("attachment_id")
        attachment_id = chosen if isinstance(chosen, str) and spec.valid_id(chosen) else None
        if await asyncio.to_thread(part.is_file):
            actual = await asyncio.to_thread(_sha256_of, part)
            if actual != meta["sha256"]:
                await asyncio.to_thread(_unlink, part, meta_path)
                raise FrameRejected(
                    "checksum_mismatch",
                    "the uploaded bytes do not match sha256; start the upload again",
                    request_id,
                )
            if attachment_id is None:
                # Noted before the move, so a retry finds the file where it went.
                attachment_id = new_id()
                meta = {**meta, "attachment_id": attachment_id}
                await asyncio.to_thread(_write_json, meta_path, meta)
            final = spec.attachment_path(root, conn.tenant, attachment_id)
            await asyncio.to_thread(os.replace, part, final)
        else:  # moved by an earlier finish, unless it expired meanwhile
            if attachment_id is None:
                raise FrameRejected("not_found", "unknown or expired upload_id", request_id)
            final = spec.attachment_path(root, conn.tenant, attachment_id)
            if not await asyncio.to_thread(final.is_file):
                raise FrameRejected("not_found", "unknown or expired upload_id", request_id)
        stored = Stored(attachment_id, final, int(meta["size"]), str(meta["sha256"]))
        filename = str(meta.get("filename") or "file")
        mime = spec.guess_mime(filename, meta.get("mime"))
        lane = {"chat_id": meta["chat_id"], "thread_id": meta.get("thread_id")}
        try:
            attachment = await self.store.register(
                conn.tenant, stored, lane, filename, mime, keep_unanswered=True
            )
        except Refused as refused:
            if refused.status != 503:  # refused for good: the file is gone, so is the upload
                await asyncio.to_thread(_unlink, meta_path)
            raise
        return {
            "upload_id": meta["upload_id"],
            "media_ref": attachment_id,
            "attachment": attachment,
        }

    # -- pulls
    async def _pull(self, conn: Connection, args: Json, request_id: Any) -> None:
        # Registered only once a pull starts: a refused one must leave no entry behind.
        running = self._pulls.get(conn.id) or set()
        if len(running) >= MAX_PULLS_PER_CONNECTION:
            raise FrameRejected(
                "rate_limited", f"at most {MAX_PULLS_PER_CONNECTION} pulls at once", request_id
            )
        media_id = args["media_id"]
        found = await self.store.resolve(conn.tenant, media_id)
        if found is None:
            raise FrameRejected("not_found", "media unavailable", request_id)
        reply, path = found
        size = int(reply["attachment"]["size"])
        offset = int(args.get("offset") or 0)
        if offset > size:
            raise FrameRejected("bad_request", "offset is past the end of the media", request_id)
        task = asyncio.create_task(
            self._stream(conn, media_id, path, offset, size, str(reply.get("sha256")), request_id),
            name=f"hdg-pull-{media_id[:8]}",
        )
        running.add(task)
        self._pulls[conn.id] = running

        def finished(done: asyncio.Task[None]) -> None:
            running.discard(done)
            if not running:
                self._pulls.pop(conn.id, None)

        task.add_done_callback(finished)

    async def _stream(
        self,
        conn: Connection,
        media_id: str,
        path: Path,
        offset: int,
        size: int,
        sha256: str,
        request_id: Any,
    ) -> None:
        key = bytes.fromhex(media_id)
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except OSError:
            frame = conn.dialect.error_frame("not_found", "media unavailable", request_id)
            conn.send_frame(encode(frame))
            return
        try:
            await asyncio.to_thread(handle.seek, offset)
            position = offset
            while position < size and not conn.closed:
                data = await asyncio.to_thread(handle.read, spec.PULL_FRAME_BYTES)
                if not data:
                    break
                conn.send_binary(spec.PULL_HEADER.pack(key, position) + data)
                position += len(data)
                await conn.wait_queued_below(PULL_QUEUE_FRAMES)
        except OSError as exc:  # the device would wait for media.pulled forever
            log.error("media pull failed reading storage: %s", type(exc).__name__)
            frame = conn.dialect.error_frame(
                "unavailable", "media storage failed; pull again from the last offset", request_id
            )
            conn.send_frame(encode(frame))
            return
        finally:
            await asyncio.to_thread(handle.close)
        if conn.closed:
            return
        self._send(
            conn,
            {
                "type": "media.pulled",
                "media_id": media_id,
                "offset": offset,
                "size": size,
                "sha256": sha256,
                "ts": now_iso(),
            },
            request_id,
        )


__all__ = ["MediaFrames"]
