"""One device connection: a bounded send queue drained by its own writer task.

A slow device never stalls the others or the bus reader: frames queue here, streaming
deltas of one message coalesce to the latest, and a device whose queue stays full is
closed (it recovers by replay). Cursors make delivery exactly-once across the replay seam.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from canonical.protocol import COALESCABLE_EVENTS, now_iso

from .delivery import ReplayGate
from .dialects import Dialect
from .errors import CLOSE_SLOW_CONSUMER

log = logging.getLogger("hdg.edge.conn")

Json = dict[str, Any]
SendText = Callable[[str], Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]
CloseFn = Callable[[int, str], Awaitable[None]]


class _Item:
    __slots__ = ("key", "text")

    def __init__(self, text: str | bytes | None, key: str | None) -> None:
        self.text = text
        self.key = key


class Connection:
    def __init__(
        self,
        conn_id: str,
        dialect: Dialect,
        tenant: str,
        device_id: str,
        send_text: SendText,
        close: CloseFn,
        max_frames: int = 1024,
        send_bytes: SendBytes | None = None,
    ) -> None:
        self.id = conn_id
        self.dialect = dialect
        self.tenant = tenant
        self.device_id = device_id
        self._send_text = send_text
        self._send_bytes = send_bytes
        self._close = close
        self._max = max_frames
        self._queue: deque[_Item] = deque()
        self._live = 0
        self._coalesce: dict[str, _Item] = {}
        # A bare future, not an asyncio.Event: no waiter deque per connection (~0.9 KiB)
        # and no Event bookkeeping per wake-up. _sent exists only while someone paces.
        self._waiter: asyncio.Future[None] | None = None
        self._sent: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        # A send that had to wait (back-pressure) while being written on the spot: the
        # writer finishes it before anything queued after it.
        self._inflight: tuple[Any, Any] | None = None
        self.closed = False
        self.close_code: int | None = None
        self.since = now_iso()
        self.gate: ReplayGate[tuple[Json, str | None]] = ReplayGate()
        self.frames_out = 0
        # Devices that resume from cursors (iris) get gaps repaired by a resync.
        self.tracks_cursor = dialect.name == "iris"

    @property
    def last_cursor(self) -> int:
        return self.gate.last_cursor

    @last_cursor.setter
    def last_cursor(self, cursor: int) -> None:
        self.gate.last_cursor = cursor

    @property
    def replaying(self) -> bool:
        return self.gate.replaying

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name=f"hdg-writer-{self.id}")

    # -- queueing (called from the bus handler: synchronous, never awaits)
    def send_frame(self, text: str) -> None:
        """Queue a frame that is not sequenced (replies, errors, pongs)."""
        self._enqueue(text, None)

    def send_binary(self, data: bytes) -> None:
        """Queue a binary frame (media.pull data), in order with the text frames."""
        if self._send_bytes is None:
            raise RuntimeError("this connection cannot send binary frames")
        self._enqueue(data, None)

    async def wait_queued_below(self, frames: int) -> None:
        """Until at most ``frames`` frames are queued or the connection closed (pacing)."""
        while self._live > frames and not self.closed:
            if self._sent is None:
                self._sent = asyncio.Event()
            self._sent.clear()
            await self._sent.wait()

    def offer_event(self, event: Json, text: str | None) -> bool:
        """Queue a sequenced event unless this device already has it.

        Returns True when the cursor jumped past events this device never got (they were
        sequenced while the doorbell was down): the event is held and the caller must
        start a resync from `last_cursor`.
        """
        if self.closed:
            return False
        cursor = event.get("cursor") or 0
        gate = self.gate
        if (
            self.tracks_cursor
            and cursor
            and not gate.replaying
            and 0 < gate.last_cursor < cursor - 1
        ):
            gate.begin_replay()
            gate.live(cursor, (event, text))
            return True
        for admitted in gate.live(cursor, (event, text)):
            self._queue_event(*admitted)
        return False

    def _queue_event(self, event: Json, text: str | None) -> None:
        if text is None:
            return
        key = None
        if event.get("type") in COALESCABLE_EVENTS:
            key = f"{event.get('type')}:{event.get('message_id') or event.get('lane')}"
        self._enqueue(text, key)

    def begin_replay(self) -> None:
        self.gate.begin_replay()

    def replay_chunk(self, events: list[tuple[Json, str | None]]) -> None:
        for admitted in self.gate.replay_chunk(
            [(event.get("cursor") or 0, (event, text)) for event, text in events]
        ):
            self._queue_event(*admitted)

    def finish_replay(self, events: list[tuple[Json, str | None]]) -> bool:
        """Deliver replayed events, then what arrived live meanwhile, each exactly once.
        True when a hole remains (the caller resyncs from `last_cursor`)."""
        replayed = [(event.get("cursor") or 0, (event, text)) for event, text in events]
        admitted, gap = self.gate.finish_replay(replayed)
        for item in admitted:
            self._queue_event(*item)
        return gap

    def _enqueue(self, text: str | bytes, key: str | None) -> None:
        if self.closed:
            return
        if key is not None:
            previous = self._coalesce.get(key)
            if previous is not None and previous.text is not None:
                # The queued delta is stale: drop it, append the newest at the tail so
                # cursors stay in order on the wire.
                previous.text = None
                self._live -= 1
        if self._waiter is not None and not self._queue and isinstance(text, str):
            self._send_now(text)  # the writer is idle: no queue, no task switch
            return
        if self._live >= self._max:
            log.warning("closing slow device conn=%s queued=%d", self.id, self._live)
            self.closed = True
            self.close_code = CLOSE_SLOW_CONSUMER
            self._queue.clear()
            self._wakeup()
            return
        item = _Item(text, key)
        if key is not None:
            self._coalesce[key] = item
        self._queue.append(item)
        self._live += 1
        if self._waiter is not None:
            self._wakeup()

    def _send_now(self, text: str) -> None:
        """Write a frame on the spot. A send that completes without waiting (the socket
        is writable) costs no task switch, as on a broadcast; one that has to wait is
        handed to the writer, which finishes it before anything queued after it."""
        coro: Any = self._send_text(text)  # a coroutine, stepped here instead of in a task
        try:
            yielded = coro.send(None)
        except StopIteration:
            self.frames_out += 1
            if self._sent is not None:
                self._sent.set()
            return
        except Exception as exc:  # a dead socket ends this connection only
            log.debug("send to conn=%s failed: %s", self.id, type(exc).__name__)
            self.closed = True
            if self._sent is not None:
                self._sent.set()
            if self._writer is not None:
                self._writer.cancel()
            return
        self._inflight = (coro, yielded)
        self._wakeup()

    def _wakeup(self) -> None:
        """Wake the writer (if it waits) and anyone pacing on the queue."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._sent is not None:
            self._sent.set()

    @property
    def queued(self) -> int:
        return self._live

    @property
    def max_frames(self) -> int:
        return self._max

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._queue and not self.closed and self._inflight is None:
                    self._waiter = loop.create_future()
                    await self._waiter
                if self._inflight is not None:
                    coro, yielded = self._inflight
                    self._inflight = None
                    await _finish(coro, yielded)
                    self.frames_out += 1
                    if self._sent is not None:
                        self._sent.set()
                while self._queue:
                    item = self._queue.popleft()
                    if item.key is not None and self._coalesce.get(item.key) is item:
                        del self._coalesce[item.key]
                    if item.text is None:
                        continue
                    self._live -= 1
                    if isinstance(item.text, bytes):
                        assert self._send_bytes is not None
                        await self._send_bytes(item.text)
                    else:
                        await self._send_text(item.text)
                    self.frames_out += 1
                    if self._sent is not None:
                        self._sent.set()
                if self.closed:
                    code = self.close_code or 1000
                    await self._close(
                        code, "slow consumer" if code == CLOSE_SLOW_CONSUMER else "closing"
                    )
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dead socket ends this connection only
            log.debug("writer for conn=%s ended: %s", self.id, type(exc).__name__)
            self.closed = True
            if self._sent is not None:
                self._sent.set()

    def request_close(self, code: int) -> None:
        """Close after what is queued has been written."""
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        self._wakeup()

    async def stop(self) -> None:
        self.closed = True
        if self._inflight is not None:
            self._inflight[0].close()
            self._inflight = None
        if self._sent is not None:
            self._sent.set()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
            try:
                await self._writer
            except (asyncio.CancelledError, Exception):
                pass


async def _finish(coro: Any, yielded: Any) -> None:
    """Drive a coroutine that suspended outside any task (on ``yielded``) to its end."""
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                await yielded
        except BaseException:
            coro.close()
            raise
        try:
            yielded = coro.send(None)
        except StopIteration:
            return
