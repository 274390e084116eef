"""Presence writes (and the iris hello commands that travel with them), batched.

Why: every device set-up wrote its presence in a round trip of its own (HSET + EXPIRE,
plus the XADD of an iris hello), and the hello waited for it. In a reconnect storm that
round trip was ~15 % of an edge's CPU per set-up. Here the writes of a short window
(``BATCH_WINDOW_S``) go out as one pipeline: the hello commands in arrival order, then per
tenant one HDEL and one HSET of every field and one EXPIRE. A device's later write
replaces its earlier one in the same batch (last writer wins, as in arrival order).

``PresenceBatch`` is the pure part (what to send, who depends on which reply);
``PresenceWriter`` flushes batches on a connection and settles each caller's future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import ResponseError

from .bus import presence_key

Command = Sequence[str | bytes | int | float]
BATCH_WINDOW_S = 0.002  # a hello waits at most this long for its round trip to start
BATCH_MAX = 256  # writes per batch: a full batch goes out at once


class PresenceBatch:
    """The writes of one window and which commands each caller's outcome depends on."""

    def __init__(self) -> None:
        self._commands: list[Command] = []  # hello commands, in arrival order
        self._command_of: list[int | None] = []  # caller -> its own command's index
        self._tenant_of: list[str] = []  # caller -> the tenant whose hash it writes
        self._fields: dict[str, dict[str, str | None]] = {}  # tenant -> device -> entry
        self._expire: dict[str, int] = {}  # tenant -> the hash's TTL (longest asked)
        self._tenant_replies: dict[str, list[int]] = {}  # by commands(): tenant -> its replies

    def __len__(self) -> int:
        return len(self._tenant_of)

    def add(
        self,
        tenant: str,
        device_id: str,
        entry: str | None,
        ttl_s: int = 0,
        command: Command | None = None,
    ) -> None:
        """One caller's write (``entry`` None: the device went offline)."""
        if command is not None:
            self._command_of.append(len(self._commands))
            self._commands.append(command)
        else:
            self._command_of.append(None)
        self._tenant_of.append(tenant)
        fields = self._fields.setdefault(tenant, {})
        fields.pop(device_id, None)  # re-inserted: dict order is arrival order
        fields[device_id] = entry
        if entry is not None:
            self._expire[tenant] = max(self._expire.get(tenant, 0), ttl_s)

    def commands(self) -> list[Command]:
        """The pipeline: the hello commands, then each tenant's presence writes."""
        out = list(self._commands)
        tenant_replies = self._tenant_replies = {}
        for tenant, fields in self._fields.items():
            key = presence_key(tenant)
            gone = [device for device, entry in fields.items() if entry is None]
            online: list[str] = []
            for device, value in fields.items():
                if value is not None:
                    online += (device, value)
            replies = tenant_replies[tenant] = []
            if gone:
                replies.append(len(out))
                out.append(("HDEL", key, *gone))
            if online:
                replies.append(len(out))
                out.append(("HSET", key, *online))
                replies.append(len(out))
                out.append(("EXPIRE", key, self._expire[tenant]))
        return out

    def depends(self) -> list[list[int]]:
        """For each caller, the indexes of the replies (of ``commands()``) it depends on:
        only needed when one of them failed."""
        tenant_replies = self._tenant_replies
        return [
            ([] if own is None else [own]) + tenant_replies[writer]
            for own, writer in zip(self._command_of, self._tenant_of, strict=True)
        ]


# Sends a pipeline; returns each reply or its ResponseError; raises BusUnavailable when
# the connection fails.
SendPipeline = Callable[[Sequence[Command]], Awaitable[list[Any]]]


class PresenceWriter:
    """Collects writes for ``BATCH_WINDOW_S`` (or ``BATCH_MAX`` of them), then sends them
    in one pipeline; each caller's future gets None or the first error among its replies."""

    def __init__(self, send: SendPipeline, window_s: float = BATCH_WINDOW_S) -> None:
        self._send = send
        self._window_s = window_s
        self._batch = PresenceBatch()
        self._waiters: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    def write(
        self,
        tenant: str,
        device_id: str,
        entry: str | None,
        ttl_s: int = 0,
        command: Command | None = None,
    ) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        self._batch.add(tenant, device_id, entry, ttl_s, command)
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        if len(self._batch) >= BATCH_MAX:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window_s, self.flush)
        return waiter

    def flush(self) -> None:
        """Send what is collected now (the timer's job; also when a batch is full)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._waiters:
            return
        batch, waiters = self._batch, self._waiters
        self._batch, self._waiters = PresenceBatch(), []
        task = asyncio.get_running_loop().create_task(self._write(batch, waiters))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _write(self, batch: PresenceBatch, waiters: list[asyncio.Future[None]]) -> None:
        try:
            replies = await self._send(batch.commands())
        except asyncio.CancelledError:  # the loop is closing
            for waiter in waiters:
                waiter.cancel()
            raise
        except Exception as exc:  # BusUnavailable
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
                    waiter.exception()  # the caller gets it; not logged if it stopped waiting
            return
        if not any(isinstance(reply, ResponseError) for reply in replies):
            for waiter in waiters:  # the usual case: nobody's reply failed
                if not waiter.done():  # (done: the caller was cancelled)
                    waiter.set_result(None)
            return
        for waiter, needed in zip(waiters, batch.depends(), strict=True):
            if waiter.done():  # the caller was cancelled
                continue
            error = next(
                (replies[i] for i in needed if isinstance(replies[i], ResponseError)), None
            )
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
                waiter.exception()

    async def close(self) -> None:
        """Send what is collected and wait (bounded by the connection's own failures)."""
        self.flush()
        if self._flushing:
            await asyncio.wait(list(self._flushing))


__all__ = ["BATCH_MAX", "BATCH_WINDOW_S", "PresenceBatch", "PresenceWriter"]
