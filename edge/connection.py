"""One device connection: frames written on the spot, or queued when the socket is busy.

A slow device never stalls the others or the bus reader: when its socket cannot take a
frame now, frames queue here, streaming deltas of one message coalesce to the latest, and
a device whose queue stays full is closed (it recovers by replay). A writer task exists
only while something is queued. Cursors make delivery exactly-once across the replay seam.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from canonical.model import Json
from canonical.protocol import COALESCABLE_EVENTS, now_iso

from .delivery import ReplayGate
from .dialects import Dialect
from .errors import CLOSE_SLOW_CONSUMER, WireClosed
from .wire import OutFrame, Wire

log = logging.getLogger("hdg.edge.conn")

SendText = Callable[[str], Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]
CloseFn = Callable[[int, str], Awaitable[None]]
Frame = OutFrame | str
# How long stopping a connection waits for a requested close (what was queued, then the
# close frame) to reach the socket before giving up on a stalled one.
CLOSE_FLUSH_S = 2.0


class _Item:
    __slots__ = ("frame", "key")

    def __init__(self, frame: OutFrame | bytes | None, key: str | None) -> None:
        self.frame = frame
        self.key = key


class Connection:
    __slots__ = (
        "_close",
        "_coalesce",
        "_live",
        "_max",
        "_queue",
        "_send_bytes",
        "_send_text",
        "_sent",
        "_wire",
        "_writer",
        "close_code",
        "closed",
        "device_id",
        "dialect",
        "frames_out",
        "gate",
        "id",
        "replay_since",
        "since",
        "tenant",
        "tracks_cursor",
    )

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
        wire: Wire | None = None,
    ) -> None:
        self.id = conn_id
        self.dialect = dialect
        self.tenant = tenant
        self.device_id = device_id
        self._send_text = send_text
        self._send_bytes = send_bytes
        self._close = close
        # Direct frame writes (edge.wire) when the server allows them, else ASGI sends.
        self._wire = wire
        self._max = max_frames
        # Allocated while frames wait (a deque is ~0.8 KiB; most connections are idle).
        self._queue: deque[_Item] | None = None
        self._coalesce: dict[str, _Item] | None = None
        self._live = 0
        self._sent: asyncio.Event | None = None  # exists only while someone paces
        self._writer: asyncio.Task[None] | None = None
        self.closed = False
        self.close_code: int | None = None
        self.since = now_iso()
        # Monotonic time the pending replay began or last moved (0.0: none pending).
        self.replay_since = 0.0
        self.gate: ReplayGate[tuple[Json, Frame | None]] = ReplayGate()
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

    # -- queueing (called from the bus handler: synchronous, never awaits)
    def send_frame(self, frame: Frame) -> None:
        """Send a frame that is not sequenced (replies, errors, pongs)."""
        self._enqueue(frame if isinstance(frame, OutFrame) else OutFrame(frame), None)

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

    def offer_event(self, event: Json, frame: Frame | None) -> bool:
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
            self.begin_replay()
            gate.live(cursor, (event, frame))
            return True
        if not gate.replaying:
            if gate.admit(cursor):  # the common case: no tuple, no list per delivery
                self._queue_event(event, frame)
            return False
        if gate.held >= self._max:
            # The replay is not coming fast enough to hold more back: reconnecting resumes
            # from the device's cursor, losing nothing (memory stays bounded meanwhile).
            self.request_close(CLOSE_SLOW_CONSUMER)
            return False
        gate.live(cursor, (event, frame))  # held until the replay arrives
        return False

    def _queue_event(self, event: Json, frame: Frame | None) -> None:
        if frame is not None:
            self._enqueue(frame if isinstance(frame, OutFrame) else OutFrame(frame), event)

    def begin_replay(self) -> None:
        self.gate.begin_replay()
        self.replay_since = time.monotonic()

    def replay_stalled(self, now: float, after_s: float) -> bool:
        """A replay asked for ``after_s`` ago that has not moved since (its reply lost)."""
        return self.gate.replaying and 0.0 < self.replay_since < now - after_s

    def replay_chunk(self, events: list[tuple[Json, Frame | None]]) -> None:
        self.replay_since = time.monotonic()
        for admitted in self.gate.replay_chunk(
            [(event.get("cursor") or 0, (event, frame)) for event, frame in events]
        ):
            self._queue_event(*admitted)

    def finish_replay(self, events: list[tuple[Json, Frame | None]]) -> bool:
        """Deliver replayed events, then what arrived live meanwhile, each exactly once.
        True when a hole remains (the caller resyncs from `last_cursor`)."""
        replayed = [(event.get("cursor") or 0, (event, frame)) for event, frame in events]
        admitted, gap = self.gate.finish_replay(replayed)
        for item in admitted:
            self._queue_event(*item)
        self.replay_since = time.monotonic() if gap else 0.0
        return gap

    def _enqueue(self, frame: OutFrame | bytes, event: Json | None) -> None:
        """Write now, else queue (``event``: the sequenced event the frame shows)."""
        if self.closed:
            return
        queue = self._queue
        if not queue:
            # Nothing waits: write on the spot (no task switch, no per-device encoding).
            wire = self._wire
            if wire is not None and self._writer is None and isinstance(frame, OutFrame):
                try:
                    if wire.write(frame.wire):
                        self._wrote()
                        return
                except WireClosed:
                    self._ended()
                    return
            if queue is None:
                queue = self._queue = deque()
        key = None
        if event is not None and event.get("type") in COALESCABLE_EVENTS:
            # Only a queued delta can be superseded: no key for a frame written on the spot.
            key = f"{event.get('type')}:{event.get('message_id') or event.get('lane')}"
        if key is not None and self._coalesce is not None:
            previous = self._coalesce.get(key)
            if previous is not None and previous.frame is not None:
                # The queued delta is stale: drop it, append the newest at the tail so
                # cursors stay in order on the wire.
                previous.frame = None
                self._live -= 1
        if self._live >= self._max:
            log.warning("closing slow device conn=%s queued=%d", self.id, self._live)
            self.closed = True
            self.close_code = CLOSE_SLOW_CONSUMER
            queue.clear()
            self._live = 0
            self._start_writer()
            return
        item = _Item(frame, key)
        if key is not None:
            if self._coalesce is None:
                self._coalesce = {}
            self._coalesce[key] = item
        queue.append(item)
        self._live += 1
        self._start_writer()

    def _wrote(self) -> None:
        self.frames_out += 1
        if self._sent is not None:
            self._sent.set()

    def _ended(self) -> None:
        """The socket is gone: this connection ends, nothing more is written."""
        self.closed = True
        if self._queue:
            self._queue.clear()
        self._live = 0
        if self._sent is not None:
            self._sent.set()

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(
                self._write_loop(), name=f"hdg-writer-{self.id}"
            )

    @property
    def queued(self) -> int:
        return self._live

    @property
    def max_frames(self) -> int:
        return self._max

    async def _write(self, frame: OutFrame | bytes) -> None:
        if isinstance(frame, bytes):
            assert self._send_bytes is not None
            await self._send_bytes(frame)
            return
        wire = self._wire
        if wire is None:
            await self._send_text(frame.text)
            return
        data = frame.wire
        while not wire.write(data):
            await wire.drained()

    async def _write_loop(self) -> None:
        """Drain the queue in order, then close if asked to; ends when nothing waits."""
        try:
            queue = self._queue
            while queue:
                item = queue.popleft()
                if (
                    item.key is not None
                    and self._coalesce is not None
                    and self._coalesce.get(item.key) is item
                ):
                    del self._coalesce[item.key]
                if item.frame is None:
                    continue
                self._live -= 1
                await self._write(item.frame)
                self._wrote()
            self._queue = None
            self._coalesce = None
            if self.closed:
                code = self.close_code or 1000
                await self._close(
                    code, "slow consumer" if code == CLOSE_SLOW_CONSUMER else "closing"
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dead socket ends this connection only
            log.debug("writer for conn=%s ended: %s", self.id, type(exc).__name__)
            self._ended()
        finally:
            self._writer = None

    def request_close(self, code: int) -> None:
        """Close after what is queued has been written."""
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        self._start_writer()

    async def stop(self) -> None:
        self.closed = True
        if self._sent is not None:
            self._sent.set()
        writer = self._writer
        if writer is not None and not writer.done() and self.close_code is not None:
            # A requested close still being written (e.g. the plugin refused a revoked
            # device before the session read a frame): let the device get its close code.
            await asyncio.wait((writer,), timeout=CLOSE_FLUSH_S)
        if writer is not None and not writer.done():
            writer.cancel()
            try:
                await writer
            except (asyncio.CancelledError, Exception):
                pass
