"""When to push: a "go look" signal that is right every time.

A completed reply, an approval request, a clarification and a cron delivery are pushed
only if no device acknowledged the event (iris `ack`/`read.receipt`, or a later hello
cursor) within `ANDROID_PUSH_DELAY_S` — zero when no device is online. The push is
queued at once as a job deferred by that delay (arq keeps it in Redis, and embedded
``pending_pushes.db`` remembers it, so a restart of the gateway does not drop it); the
job checks the acks the plugin records before each send attempt, so an ack during the
delay cancels it. Payloads carry no message content
unless `ANDROID_PUSH_PREVIEW` is on. The send itself is an idempotent worker job (arq in
scaled mode, the same job function in-process in embedded mode).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from canonical.errors import BusUnavailable
from canonical.model import Json
from gateway_plugin.shutdown import UNBOUNDED, Deadline

if TYPE_CHECKING:
    from gateway_plugin.access.devices import Device
    from gateway_plugin.controller import Controller
    from gateway_plugin.jobs import JobQueue

log = logging.getLogger("hdg.plugin.push")

Submit = Callable[[Json, float], Awaitable[None]]  # a push, and its delay in seconds
CLOSE_WAIT_S = 5.0
ACK_WRITES_WAIT_S = 2.0

PREVIEW_CHARS = 120
_TITLES = {
    "reply": "New reply",
    "cron": "Scheduled delivery",
    "approval": "Approval needed",
    "clarify": "Question for you",
}


def push_kind(event: Json) -> str | None:
    """Which push an event deserves (None: no push)."""
    kind = event.get("type")
    if kind == "message.complete" and event.get("role") == "assistant":
        return {"reply": "reply", "cron": "cron"}.get(str(event.get("kind")))
    if kind == "approval.request":
        return "approval"
    if kind == "clarify.request":
        return "clarify"
    return None


@dataclass(frozen=True)
class Target:
    device_id: str
    backend: str
    address: str


def targets(
    devices: Iterable[Device],
    acks: dict[str, int],
    cursor: int,
    backend: str,
    shared_topic: str | None,
) -> list[Target]:
    """Devices to wake for the event at `cursor`: none once any device has it."""
    live = [d for d in devices if not d.revoked]
    if any(acks.get(d.device_id, 0) >= cursor for d in live):
        return []
    out: list[Target] = []
    seen: set[str] = set()
    for device in live:
        if backend == "fcm":
            address = device.fcm_token
        elif backend == "ntfy":
            address = device.ntfy_topic or shared_topic
        else:
            address = None
        if address and address not in seen:
            seen.add(address)
            out.append(Target(device.device_id, backend, address))
    return out


def _identity(event: Json) -> str:
    """What tells this event from another one given the same cursor: an outbox restored
    from a backup (or lost) numbers new events from cursors the old ones had, and a push
    keyed by the cursor alone would be taken for the old event's, already sent. The same
    event published again (a resync, the external-appends poller) keeps its identity."""
    ident = event.get("message_id") or event.get("picker_id") or ""
    return hashlib.blake2b(f"{ident}|{event.get('ts', '')}".encode(), digest_size=6).hexdigest()


def notification(tenant: str, target: Target, event: Json, kind: str, *, preview: bool) -> Json:
    lane = event.get("lane") or [None, None]
    body: Json = {
        "idempotency_key": f"{tenant}:{target.device_id}:{event['cursor']}:{_identity(event)}",
        "tenant": tenant,
        "device_id": target.device_id,
        "backend": target.backend,
        "token_or_topic": target.address,
        "kind": kind,
        "chat_id": lane[0],
        "thread_id": lane[1],
        "cursor": str(event["cursor"]),
        "title": _TITLES[kind],
    }
    if preview:
        text = str(
            event.get("reply")
            or event.get("text")
            or event.get("question")
            or event.get("command")
            or ""
        )
        body["preview"] = text[:PREVIEW_CHARS] or None
    return body


class PushScheduler:
    def __init__(self, controller: Controller, submit: Submit | None) -> None:
        self.c = controller
        self.submit = submit
        self.pending: dict[int, asyncio.Task[None]] = {}
        self._ack_writes: set[asyncio.Task[None]] = set()
        # The workers' ack mark is set from outbox.db once per process before it is relied
        # on (see sync_acks); until then every ack and push tries it again.
        self._acks_synced = False
        self._acks_syncing = asyncio.Lock()
        # The highest ack this process recorded (or is recording) in the ledger, which only
        # rises: an ack at or below it (every hello repeats its device's) costs no write.
        self._acked_mark = -1

    def on_published(self, events: list[Json]) -> None:
        if self.submit is None or self.c.settings.push_backend == "none":
            return
        for event in events:
            kind = push_kind(event)
            cursor = event.get("cursor")
            if kind is None or not isinstance(cursor, int) or cursor in self.pending:
                continue
            task = asyncio.get_running_loop().create_task(self._schedule(event, kind, cursor))
            self.pending[cursor] = task
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        for cursor, pending in list(self.pending.items()):
            if pending is task:
                del self.pending[cursor]

    def on_ack(self, cursor: int) -> None:
        """A device has everything up to `cursor`: nothing up to it needs a push. Pushes
        already queued learn it from the ack ledger, which their jobs read before each
        send attempt."""
        for pending_cursor, task in list(self.pending.items()):
            if pending_cursor <= cursor:
                task.cancel()
        if self.submit is None or cursor <= self._acked_mark:
            return
        self._acked_mark = cursor
        write = asyncio.get_running_loop().create_task(self._note_ack(cursor))
        self._ack_writes.add(write)
        write.add_done_callback(self._ack_writes.discard)

    async def sync_acks(self) -> None:
        """Set the workers' ack mark to this outbox's (the highest cursor a device acked),
        lowering it if need be. The mark is only ever raised otherwise, so after outbox.db
        was restored from a backup (or lost) it would still hold the old numbering's
        cursors, and every new event up to them would count as read: no push. A Redis
        error leaves it for the next ack or push to try again."""
        if self._acks_synced or self.submit is None:
            return
        async with self._acks_syncing:
            if self._acks_synced:
                return
            try:
                acks = await self.c.sequencer.run(self.c.outbox.acks)
                await self.c.jobs.reset_acks(self.c.tenant, max(acks.values(), default=0))
            except Exception:
                log.warning("could not set the push workers' ack mark; retrying", exc_info=True)
                return
            self._acks_synced = True

    async def _note_ack(self, cursor: int) -> None:
        try:
            await self.sync_acks()
            await self.c.jobs.note_ack(self.c.tenant, cursor)
        except Exception:  # at worst a push the user has read goes out
            log.warning("could not record an ack for the push workers", exc_info=True)
            if self._acked_mark == cursor:
                self._acked_mark = -1  # not recorded: the next ack writes again

    async def _schedule(self, event: Json, kind: str, cursor: int) -> None:
        try:
            online = await self.c.bus.presence(self.c.tenant)
        except BusUnavailable:
            online = {}
        delay = self.c.settings.push_delay_s if online else 0.0
        await self.sync_acks()
        await self.prune_dead_tokens()
        devices = await self.c.storage.devices.run(self.c.devices.list, include_revoked=False)
        acks = await self.c.sequencer.run(self.c.outbox.acks)
        chosen = targets(
            devices,
            acks,
            cursor,
            self.c.settings.push_backend,
            self.c.settings.ntfy_topic,
        )
        for target in chosen:
            assert self.submit is not None
            try:
                await self.submit(
                    notification(
                        self.c.tenant, target, event, kind, preview=self.c.settings.push_preview
                    ),
                    delay,
                )
            except Exception:
                log.exception("could not queue a push for device %s", target.device_id)

    async def prune_dead_tokens(self) -> None:
        """Drop the FCM tokens workers found dead (404 UNREGISTERED, a 400 about the token)
        from the registry, so no later push tries them; a device that registers a token
        again is pushed again. A Redis error leaves the reports for the next push."""
        try:
            dead = await self.c.jobs.dead_fcm_tokens(self.c.tenant)
            if not dead:
                return
            dropped = await self.c.storage.devices.run(self.c.devices.drop_fcm_tokens, dead)
            await self.c.jobs.forget_dead_fcm_tokens(self.c.tenant, dead)
        except Exception:
            log.warning(
                "could not prune dead push tokens; the next push tries again", exc_info=True
            )
            return
        if dropped:
            log.info("dropped dead FCM tokens of devices %s", ", ".join(dropped))

    async def token_registered(self, token: str) -> None:
        """A device registered `token` (again): an older report of it being dead must not
        clear it now."""
        try:
            await self.c.jobs.forget_dead_fcm_tokens(self.c.tenant, {token})
        except Exception:
            log.warning("could not clear an old dead-token report", exc_info=True)

    async def close(self, deadline: Deadline = UNBOUNDED) -> None:
        # Deciding and queueing takes milliseconds (the delay is the job's): let the
        # pushes of the last events get queued rather than drop them at shutdown.
        pending = set(self.pending.values())
        if pending:
            await asyncio.wait(pending, timeout=deadline.left(CLOSE_WAIT_S))
        for task in list(self.pending.values()):
            task.cancel()
        self.pending.clear()
        if self._ack_writes:  # short: let them land before the job queue closes
            await asyncio.wait(set(self._ack_writes), timeout=deadline.left(ACK_WRITES_WAIT_S))


def push_submitter(settings: Any, jobs: JobQueue) -> Submit | None:
    """How pushes are queued, or None when push is off."""
    if settings.push_backend == "none":
        return None
    if settings.push_backend == "fcm" and settings.fcm_service_account is None:
        log.info("push is off: set ANDROID_FCM_SERVICE_ACCOUNT (FCM) or ANDROID_PUSH_BACKEND=ntfy")
        return None
    return jobs.push
