"""A small device client for both dialects: used by the terminal client, tests and benchmarks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from canonical.model import Json


class DeviceClient:
    """One WebSocket to an edge; frames are collected in order with receive times."""

    def __init__(self, url: str, *, ssl: Any = None) -> None:
        self.url = url
        self.ssl = ssl
        self.ws: ClientConnection | None = None
        self.frames: list[Json] = []
        self.received_at: list[float] = []
        self._new = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.closed_code: int | None = None
        self.last_cursor = 0

    async def connect(self, **kwargs: Any) -> DeviceClient:
        self.ws = await websockets.connect(
            self.url, ssl=self.ssl, max_size=None, compression=None, **kwargs
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                if isinstance(raw, bytes):  # media.pull data: not a JSON frame
                    self.on_binary(raw)
                    continue
                frame = json.loads(raw)
                self.on_frame(frame)
                # hello.ack's sync_cursor is where a fresh device starts; events carry cursor.
                cursor = (
                    frame.get("cursor")
                    if frame.get("type") != "hello.ack"
                    else frame.get("sync_cursor")
                )
                if isinstance(cursor, int) and cursor > self.last_cursor:
                    self.last_cursor = cursor
                self.frames.append(frame)
                self.received_at.append(time.monotonic())
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed_code = self.ws.close_code
            self._new.set()

    def on_frame(self, frame: Json) -> None:
        """Called with every frame received, before it is collected (a subclass may
        check it)."""

    def on_binary(self, data: bytes) -> None:
        """Called with every binary frame received (not collected: a subclass may keep
        it)."""

    async def send(self, frame: Json) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps(frame))

    async def send_raw(self, data: str | bytes) -> None:
        assert self.ws is not None
        await self.ws.send(data)

    async def wait_for(
        self, predicate: Callable[[Json], bool], timeout: float = 30.0, start: int = 0
    ) -> Json:
        """The first frame (at index >= start) matching predicate; waits for it."""
        deadline = time.monotonic() + timeout
        index = start
        while True:
            while index < len(self.frames):
                if predicate(self.frames[index]):
                    return self.frames[index]
                index += 1
            if self.closed_code is not None:
                raise ConnectionError(
                    f"closed with {self.closed_code} while waiting; got {self.frames[start:]}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no matching frame within {timeout}s; got {self.frames[start:]}"
                )
            self._new.clear()
            try:
                await asyncio.wait_for(self._new.wait(), remaining)
            except TimeoutError:
                pass

    async def wait_type(
        self, kind: str, timeout: float = 30.0, start: int = 0, **match: Any
    ) -> Json:
        return await self.wait_for(
            lambda f: f.get("type") == kind and all(f.get(k) == v for k, v in match.items()),
            timeout,
            start,
        )

    async def wait_closed(self, timeout: float = 15.0) -> int | None:
        if self._reader is not None:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.closed_code

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5)
            except (TimeoutError, asyncio.CancelledError):
                self._reader.cancel()

    # -- dialect helpers
    async def hello_pheby(self, secret: str, request_id: str | None = None) -> Json:
        frame: Json = {"type": "hello", "secret": secret, "protocol_version": 1}
        if request_id:
            frame["request_id"] = request_id
        await self.send(frame)
        return await self.wait_for(lambda f: f.get("type") in ("ready", "error"), 15)

    async def hello_iris(
        self, token: str, device_id: str, *, cursor: int | None = None, device_name: str = "test"
    ) -> Json:
        """Without a cursor the device is fresh and starts at the head; with one it replays."""
        hello: Json = {
            "type": "hello",
            "token": token,
            "device_id": device_id,
            "device_name": device_name,
            "caps": ["streaming"],
            "version": 1,
        }
        if cursor is not None:
            hello["cursor"] = cursor
        await self.send(hello)
        return await self.wait_for(lambda f: f.get("type") in ("hello.ack", "error"), 15)

    async def request(self, frame: Json, timeout: float = 30.0) -> Json:
        """Send a request with a fresh request_id and wait for the frame echoing it."""
        request_id = frame.setdefault("request_id", f"r{time.monotonic_ns()}")
        start = len(self.frames)
        await self.send(frame)
        return await self.wait_for(lambda f: f.get("request_id") == request_id, timeout, start)
