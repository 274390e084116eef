"""The doorbell: sequenced events published on the bus, in cursor order.

Devices read what they missed from the outbox (replay); the bus only rings them live.
An event whose publish fails stays in the outbox: the edges are told to resync once the
bus answers again. Deliveries another process appended to the outbox (a CLI cron run)
are published from here too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from canonical.backoff import Attempts
from canonical.bus import Bus
from canonical.errors import BusUnavailable
from canonical.jsonenc import dumps
from canonical.model import Json
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.shutdown import Deadline
from gateway_plugin.storage.thread import StorageClosed
from gateway_plugin.storage.threads import StorageBusy

log = logging.getLogger("hdg.plugin")

T = TypeVar("T")

EXTERNAL_RETRY_S = 1.0  # a locked outbox: how long until the new rows are read again
PUBLISH_BATCH = 256
# outbox meta: the head a stopping process had published in full (see publish_rest).
PUBLISHED_UPTO = "published_upto"
PUBLISH_REST_S = 2.0


class Publisher:
    """Publishes sequenced events in cursor order; `on_published` sees each batch first
    (the push policy), `running` says whether a lost doorbell may still be repaired."""

    def __init__(
        self,
        bus: Bus,
        tenant: str,
        outbox: Outbox,
        *,
        on_published: Callable[[list[Json]], None],
        running: Callable[[], bool],
    ) -> None:
        self.bus = bus
        self.tenant = tenant
        self.outbox = outbox
        self._on_published = on_published
        self._running = running
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.publishing = False  # the publisher has a batch in flight
        # Tells the edges to resync once an event could not be published (doorbell_lost).
        self._doorbell_repair: asyncio.Task[None] | None = None
        self._unpublished = False  # an event's publish failed; the edges are not told yet
        self.seen_head = outbox.head()
        self._elsewhere = asyncio.Event()  # rows another process appended (`appended_elsewhere`)
        # Runs outbox reads off the loop, behind the writes queued before them
        # (`Sequencer.run`); None: on the caller's thread.
        self.reads: Callable[..., Awaitable[Any]] | None = None

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        if self.reads is None:
            return fn(*args)
        result: T = await self.reads(fn, *args)
        return result

    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return self.queue.empty() and not self.publishing

    def publish(self, sequenced: list[Json]) -> None:
        self.ring(sequenced, [dumps(event).encode() for event in sequenced])

    def ring(self, sequenced: list[Json], payloads: list[bytes]) -> None:
        self._on_published(sequenced)
        for event in sequenced:
            # Only while contiguous: rows another process appended in between (a CLI cron
            # run) must stay ahead of the mark, or the poller would never publish them.
            cursor = event.get("cursor")
            if cursor == self.seen_head + 1:
                self.seen_head += 1
            elif isinstance(cursor, int) and cursor > self.seen_head + 1:
                self._elsewhere.set()
        queue = self.queue
        # One event straight onto the bus connection when nothing is queued or in flight
        # (no task wake-up); several (a committed batch) to the publisher task, which
        # sends them in one pipeline; otherwise behind what is queued, so order holds.
        if len(payloads) == 1 and queue.empty() and not self.publishing:
            if self.bus.publish_nowait(self.tenant, payloads[0], self.doorbell_lost):
                return
        for payload in payloads:
            queue.put_nowait(payload)

    def appended_elsewhere(self) -> None:
        """Another process committed to the outbox (`FileWatch`), or a published cursor
        skipped some: `external_appends` reads what is new."""
        self._elsewhere.set()

    async def external_appends(self) -> None:
        """Deliveries another process (a CLI cron run) appended to the outbox: publish them.
        Devices would get them by replay anyway; this makes them live."""
        while True:
            await self._elsewhere.wait()
            self._elsewhere.clear()
            try:
                head = await self._read(self.outbox.head)
                if head <= self.seen_head:
                    continue
                events, _ = await self._read(self.outbox.since, self.seen_head)
            except StorageClosed:
                return  # stopping: publish_rest takes what is left
            except StorageBusy:
                self._elsewhere.set()  # locked out for now: again after a pause
                await asyncio.sleep(EXTERNAL_RETRY_S)
                continue
            self.publish(events)  # ours among them too: edges drop a cursor seen twice
            if events:
                self.seen_head = max(self.seen_head, int(events[-1]["cursor"]))

    async def run(self) -> None:
        # What queued up while a publish was in flight goes out in one round trip (a
        # pipeline on Redis), still in cursor order.
        while True:
            batch = [await self.queue.get()]
            while len(batch) < PUBLISH_BATCH and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            self.publishing = True
            try:
                if len(batch) > 1:
                    await self.bus.publish_many(self.tenant, batch)
                else:
                    await self.bus.publish(self.tenant, batch[0])
            except BusUnavailable:
                # The outbox has it, and devices catch up from their cursors once told.
                log.warning("bus unavailable; event kept in the outbox for replay")
                self.doorbell_lost()
            except Exception:
                # An error reply (out of memory, an ACL refusing PUBLISH): the same, but
                # the publisher must live on, or no event would ever be published again.
                log.exception("publishing events failed; kept in the outbox for replay")
                self.doorbell_lost()
            finally:
                self.publishing = False

    def _unpublished_events(self) -> tuple[int, list[Json]]:
        """The head, and the events after the last one seen (none when it is the head)."""
        head = self.outbox.head()
        return head, self.outbox.since(self.seen_head)[0] if head > self.seen_head else []

    async def publish_rest(self, deadline: Deadline) -> bool:
        """At a stop: publish what is sequenced and not yet published (in the queue, or
        appended by another process since the last poll), within the stop budget. True
        when every event reached the bus, so the next start need not resync devices."""
        # The outbox's thread has stopped: read on one of asyncio's, never on the loop.
        head, events = await asyncio.to_thread(self._unpublished_events)
        if head > self.seen_head:
            if not events or int(events[-1]["cursor"]) < head:
                return False  # more than one read holds: leave them to the resync
            for event in events:  # not self.publish(): pushes are closed by now
                self.queue.put_nowait(dumps(event).encode())
        end = time.monotonic() + deadline.left(PUBLISH_REST_S)
        while not self.idle():
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(0.01)
        # Behind the publishes sent straight to the bus: their outcome is known after it.
        try:
            async with asyncio.timeout(max(0.0, end - time.monotonic())):
                answered = await self.bus.ping()
        except TimeoutError:
            return False
        await asyncio.sleep(0)  # their failure callbacks (doorbell_lost) run first
        return answered and not self._unpublished

    def take_repair(self) -> asyncio.Task[None] | None:
        """The doorbell repair in flight, if any, handed over for the stop to cancel."""
        task, self._doorbell_repair = self._doorbell_repair, None
        return task

    def resync_notice(self) -> bytes:
        return dumps({"type": "_control", "action": "resync", "tenant": self.tenant}).encode()

    def doorbell_lost(self) -> None:
        """An event's publish failed. The edges resync their devices when their own
        subscription was lost, but Redis may have been out of reach of this process alone
        (a partition, or a command timeout shorter than their health check): then
        nothing else tells them. Once the bus answers, they are told to resync."""
        self._unpublished = True
        if self._running() and (self._doorbell_repair is None or self._doorbell_repair.done()):
            self._doorbell_repair = asyncio.get_running_loop().create_task(
                self._repair_doorbell(), name="hdg-doorbell-repair"
            )

    async def _repair_doorbell(self) -> None:
        attempts = Attempts()
        while True:
            await asyncio.sleep(attempts.next_delay())
            try:
                await self.bus.publish(self.tenant, self.resync_notice())
            except BusUnavailable:
                continue
            except Exception:  # an error reply (out of memory...): the next try may pass
                log.exception("telling the edges to resync failed; retrying")
                continue
            self._unpublished = False
            log.info("bus back after lost events: edges told to resync their devices")
            return


def take_published_upto(outbox: Outbox) -> tuple[str | None, int]:
    """At a start: the head the previous process published up to (None: unknown), and the
    head now. The mark is removed: a crash of this process proves nothing."""
    published = outbox.get_meta(PUBLISHED_UPTO)
    outbox.delete_meta(PUBLISHED_UPTO)
    return published, outbox.head()


def mark_published(outbox: Outbox) -> None:
    """At a stop that published everything: the head devices have had published."""
    outbox.set_meta(PUBLISHED_UPTO, str(outbox.head()))


__all__ = [
    "EXTERNAL_RETRY_S",
    "PUBLISHED_UPTO",
    "Publisher",
    "mark_published",
    "take_published_upto",
]
