"""Group commit: the events of one loop tick go into the outbox in one transaction.

Hermes calls the plugin from synchronous callbacks on its loop, one event (a streamed
delta) at a time. A transaction per event costs 40-140 µs of CPU on the loop; with many
lanes streaming at once that saturates it. So `emit` only queues: what is queued while
no batch is being written forms the next batch, taken whole on the next loop turn
(`call_soon`), or as soon as the batch being written commits. Each batch is appended in
one transaction on the outbox's storage thread (one thread per file: its jobs run in
submission order, so cursors follow the order of the calls), and only once it has
committed are its events published, in cursor order. Nothing is ever published that is
not durable, and a reply that acknowledges something waits for it (`durable`).

An event whose content is not known yet (a run's end waits for Hermes' transcript, read
off the loop) keeps its place with `reserve`: nothing queued after it is written until it
is `fill`ed, so the order of the calls still holds.

Every other outbox job the loop needs (a send's record, a command's record, acks, replays,
meta, retention) runs on the same thread, behind the batches queued before it (`run`): no
outbox.db call runs on the loop, so another process holding the file's write lock stalls
that thread, never the loop. A job still locked out after its retries fails with
`StorageBusy` (the device gets an ``unavailable`` reply).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from canonical.model import Json
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.storage.locked import retry_locked
from gateway_plugin.storage.thread import StorageThread
from gateway_plugin.storage.threads import as_busy

log = logging.getLogger("hdg.plugin")

T = TypeVar("T")


@dataclass
class Batch(Generic[T]):
    number: int
    items: list[T] = field(default_factory=list)


class Batches(Generic[T]):
    """What is queued, in batches (pure bookkeeping, no I/O). Items join the open batch;
    `take` hands the open batch over whole; batches are done in the order taken."""

    def __init__(self) -> None:
        self._open: Batch[T] | None = None
        self._in_flight: deque[int] = deque()
        self._next = 1

    def add(self, items: Iterable[T]) -> int:
        """Queue items in the open batch (opened if none); its number."""
        batch = self._opened()
        batch.items.extend(items)
        return batch.number

    def add_one(self, item: T) -> int:
        """`add([item])`, without the list."""
        batch = self._opened()
        batch.items.append(item)
        return batch.number

    def _opened(self) -> Batch[T]:
        if self._open is None:
            self._open = Batch(self._next)
            self._next += 1
        return self._open

    def take(self) -> Batch[T] | None:
        """The open batch, now in flight (None: nothing queued)."""
        batch, self._open = self._open, None
        if batch is not None:
            self._in_flight.append(batch.number)
        return batch

    def done(self, number: int) -> None:
        """The oldest batch in flight has committed (or failed)."""
        oldest = self._in_flight.popleft()
        if oldest != number:
            raise RuntimeError(f"batch {number} done before batch {oldest}")

    def ready(self) -> bool:
        """Something is queued and no batch is in flight: take it now."""
        return self._open is not None and not self._in_flight

    def newest(self) -> int | None:
        """The number of the newest batch not yet done, open or in flight."""
        if self._open is not None:
            return self._open.number
        return self._in_flight[-1] if self._in_flight else None

    def __len__(self) -> int:
        """How many batches are open or in flight."""
        return len(self._in_flight) + (self._open is not None)


@dataclass(slots=True)
class Entry:
    """One `emit`: events to sequence, run rows opened (before them) and finished (after
    them) in the same transaction; or `unsequenced` events, published in their place and
    never stored (typing, control frames)."""

    events: list[Json] = field(default_factory=list)
    opened: Sequence[Json] = ()
    finished: Sequence[str] = ()
    unsequenced: list[Json] | None = None
    waiter: asyncio.Future[list[Json]] | None = None


Ring = Callable[[list[Json], list[bytes]], None]


class Sequencer:
    """Owns the outbox's storage thread. `ring(sequenced, payloads)` publishes events
    in cursor order (`Publisher.ring`), `publish(events)` events never sequenced."""

    def __init__(
        self, outbox: Outbox, *, ring: Ring, publish: Callable[[list[Json]], None]
    ) -> None:
        self.outbox = outbox
        self.thread = StorageThread("hdg-outbox-db")
        self._ring = ring
        self._publish = publish
        self._batches: Batches[Entry] = Batches()
        self._flush_scheduled = False
        self._jobs_in_flight = 0  # jobs other than batches (run), for drain
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._idle: asyncio.Event | None = None
        self._held = 0  # entries reserved and not yet filled
        self._released: asyncio.Event | None = None
        self.batches_committed = 0
        self.events_committed = 0

    # -- queueing (synchronous, on the loop)
    def emit(
        self, events: list[Json], *, opened: Sequence[Json] = (), finished: Sequence[str] = ()
    ) -> None:
        """Queue events (and run rows) for the next batch; published once committed."""
        if events or opened or finished:
            self._queue(Entry(events, opened, finished))

    def publish(self, events: list[Json]) -> None:
        """Publish events never sequenced, in order with what is queued before them."""
        if len(self._batches) == 0:
            self._publish(events)
        else:
            self._queue(Entry(unsequenced=events))

    def reserve(self) -> Entry:
        """Keep the next place in the order for events known later (`fill`); what is
        queued after it waits for them. Always `fill` it (with nothing, on a failure)."""
        entry = Entry()
        self._held += 1
        self._batches.add_one(entry)
        return entry

    def fill(
        self,
        entry: Entry,
        events: list[Json],
        *,
        opened: Sequence[Json] = (),
        finished: Sequence[str] = (),
    ) -> None:
        """The events of a reserved place: written with what was queued around it."""
        entry.events, entry.opened, entry.finished = events, opened, finished
        self._held -= 1
        if self._held == 0:
            if self._released is not None:
                self._released.set()
                self._released = None
            self._schedule_flush()

    async def _unheld(self) -> None:
        while self._held:
            if self._released is None:
                self._released = asyncio.Event()
            await self._released.wait()

    async def append(
        self, events: list[Json], *, opened: Sequence[Json] = (), finished: Sequence[str] = ()
    ) -> list[Json]:
        """As `emit`, and wait until they are committed: the events with their cursors."""
        waiter: asyncio.Future[list[Json]] = asyncio.get_running_loop().create_future()
        self._queue(Entry(list(events), opened, finished, waiter=waiter))
        return await waiter

    def _queue(self, entry: Entry) -> None:
        self._batches.add_one(entry)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Take the open batch on the next loop turn, unless one is being written."""
        if self._batches.ready() and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def durable(self) -> None:
        """Wait until everything queued so far has committed (and been published)."""
        newest = self._batches.newest()
        if newest is None:
            return
        waiter = self._waiters.get(newest)
        if waiter is None:
            waiter = self._waiters[newest] = asyncio.get_running_loop().create_future()
            # Its failure reaches every caller awaiting it; none left is no error.
            waiter.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.shield(waiter)

    # -- other outbox jobs, in order behind the batches
    async def run(
        self, fn: Callable[..., T], *args: Any, then: Callable[[T], None] | None = None
    ) -> T:
        """`fn(*args)` on the storage thread behind everything queued so far; `then(result)`
        runs on the loop in commit order (to publish what a job sequenced). A job the
        file stayed locked for, retries included, raises `StorageBusy`."""
        if self._held:
            await self._unheld()  # behind the reserved events too
        self._submit_open()
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def finished(result: T, error: BaseException | None) -> None:
            self._jobs_in_flight -= 1
            if error is None:
                if then is not None:
                    then(result)
                if not waiter.done():
                    waiter.set_result(result)
            elif not waiter.done():
                waiter.set_exception(as_busy(error, self.thread.name))
            self._check_idle()

        self.thread.call(retry_locked, fn, *args, on_done=finished)
        self._jobs_in_flight += 1
        return await waiter

    # -- the batches
    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._batches.ready():
            self._submit_open()

    def _submit_open(self) -> None:
        if self._held:
            return  # fill submits it
        batch = self._batches.take()
        if batch is None:
            return
        events: list[Json] = []
        opened: list[Json] = []
        finished: list[str] = []
        for entry in batch.items:
            events.extend(entry.events)
            opened.extend(entry.opened)
            finished.extend(entry.finished)
        try:
            self.thread.call(
                retry_locked,
                self.outbox.append_encoded,
                events,
                opened,
                finished,
                on_done=lambda stored, error: self._committed(batch, stored, error),
            )
        except Exception as error:  # the thread is stopped: nothing of it is kept
            self._committed(batch, None, error)

    def _committed(
        self,
        batch: Batch[Entry],
        stored: list[tuple[Json, str]] | None,
        error: BaseException | None,
    ) -> None:
        self._batches.done(batch.number)
        if stored is None:
            log.error(
                "appending %d events to the outbox failed; they are lost",
                sum(len(e.events) for e in batch.items),
                exc_info=error,
            )
        else:
            self.batches_committed += 1
            self.events_committed += len(stored)
            self._publish_committed(batch, stored)
        waiter = self._waiters.pop(batch.number, None)
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        for entry in batch.items:
            if entry.waiter is not None and not entry.waiter.done():
                if stored is None:
                    entry.waiter.set_exception(error or RuntimeError("outbox append failed"))
        if self._batches.ready():
            self._submit_open()  # what queued up while this one was written
        self._check_idle()

    def _publish_committed(self, batch: Batch[Entry], stored: list[tuple[Json, str]]) -> None:
        sequenced: list[Json] = []
        payloads: list[bytes] = []
        at = 0
        for entry in batch.items:
            if entry.unsequenced is not None:
                if sequenced:
                    self._ring(sequenced, payloads)
                    sequenced, payloads = [], []
                self._publish(entry.unsequenced)
                continue
            mine = stored[at : at + len(entry.events)]
            at += len(entry.events)
            for event, body in mine:
                sequenced.append(event)
                payloads.append(body.encode())
            if entry.waiter is not None and not entry.waiter.done():
                entry.waiter.set_result([event for event, _ in mine])
        if sequenced:
            self._ring(sequenced, payloads)

    # -- stopping
    def _check_idle(self) -> None:
        if self._idle is not None and len(self._batches) == 0 and self._jobs_in_flight == 0:
            self._idle.set()

    async def drain(self) -> None:
        """Commit and publish everything queued so far."""
        self._submit_open()
        while len(self._batches) or self._jobs_in_flight:
            self._idle = asyncio.Event()
            self._check_idle()
            await self._idle.wait()
            self._idle = None

    async def stop(self) -> None:
        """Drain, then stop the storage thread (further jobs raise `StorageClosed`)."""
        await self.drain()
        await asyncio.to_thread(self.thread.stop)


__all__ = ["Batch", "Batches", "Entry", "Sequencer"]
