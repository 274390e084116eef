"""The edge's routing table: which connections belong to which tenant, and what the bus says.

Each bus event is parsed once and encoded once per dialect, whatever the number of
devices. The handler is synchronous: it only queues frames on connections.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from canonical.backoff import retrying
from canonical.bus import Bus, Subscription, direct_envelopes
from canonical.jsonenc import dumps
from canonical.model import Json
from canonical.protocol import CLOSE, REPLAY, REPLY, new_id, now_iso
from canonical.tasks import TaskSet

from . import metrics
from .connection import Connection
from .dialects import Dialect
from .dialects.iris import IrisDialect
from .dialects.pheby import PhebyDialect
from .errors import CLOSE_SERVICE_RESTART, CLOSE_UNAVAILABLE
from .wire import OutFrame

if TYPE_CHECKING:
    from .media import MediaFrames

log = logging.getLogger("hdg.edge.hub")


PRESENCE_TTL_S = 60.0
REPLAY_PACE_S = 0.01
REPLAY_PACE_TRIES = 6000  # a minute for a device to take a chunk before we send anyway
PRESENCE_REFRESH_S = 20.0
# A replay (hello, sync, resync) that has not moved for this long lost its reply.
REPLAY_STALL_S = 60.0
REQUEST_TIMEOUT_S = 15.0
# How long a resync request is retried while the bus is down before the device is told
# to reconnect (it resumes from its cursor then).
RESYNC_GIVE_UP_S = 60.0

DIALECTS: dict[str, Dialect] = {"pheby": PhebyDialect(), "iris": IrisDialect()}


def encode(frame: Json) -> str:
    return dumps(frame)


class Hub:
    def __init__(self, bus: Bus, edge_id: str) -> None:
        self.bus = bus
        self.edge_id = edge_id
        self.conns: dict[str, Connection] = {}
        self.by_tenant: dict[str, dict[str, Connection]] = {}
        self._sub: Subscription | None = None
        self.frames_in = 0
        self.events_in = 0
        # Presence refresh, resync requests, replay pacing: held, logged, ended at stop.
        self.tasks = TaskSet(log)
        # Requests from this edge's own handlers (HTTP, media frames): pseudo connection
        # id → the future its direct reply resolves.
        self._requests: dict[str, asyncio.Future[Json]] = {}
        # Edge-side handler of iris media frames (edge.media.MediaFrames), set by the app.
        self.media: MediaFrames | None = None

    async def start(self) -> None:
        self._sub = self.bus.subscription(self.edge_id, self._on_bus, self._on_bus_reconnect)
        await self._sub.start()
        self.tasks.spawn(self._refresh_presence(), name="hdg-presence")

    async def stop(self) -> None:
        await self.tasks.close()
        if self._sub is not None:
            await self._sub.close()

    async def _refresh_presence(self) -> None:
        """Presence expires on its own (PRESENCE_TTL_S): a dead edge's devices go offline.
        Also closes devices whose replay stalled (its reply lost on the bus): they resume
        from their cursor on reconnecting, instead of holding live events back for ever."""
        while True:
            await asyncio.sleep(PRESENCE_REFRESH_S)
            now = time.monotonic()
            for conn in list(self.conns.values()):
                if conn.replay_stalled(now, REPLAY_STALL_S):
                    log.warning("replay for conn %s stalled; closing it to resume", conn.id)
                    conn.request_close(CLOSE_UNAVAILABLE)
            # All at once: the bus sends them in a few batched round trips.
            writes = [
                self.bus.device_online_soon(
                    conn.tenant, conn.device_id, self.presence_info(conn), None, PRESENCE_TTL_S
                )
                for conn in list(self.conns.values())
            ]
            results = await asyncio.gather(*writes, return_exceptions=True)
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                log.warning(
                    "presence refresh: %d of %d writes failed (%s)",
                    len(failed),
                    len(results),
                    type(failed[0]).__name__,
                )

    def presence_info(self, conn: Connection) -> Json:
        return {
            "edge": self.edge_id,
            "conn": conn.id,
            "since": conn.since,
            "dialect": conn.dialect.name,
        }

    async def attach(self, conn: Connection) -> None:
        tenant_conns = self.by_tenant.get(conn.tenant)
        if tenant_conns is None:
            tenant_conns = self.by_tenant[conn.tenant] = {}
            if self._sub is not None:
                await self._sub.add_tenant(conn.tenant)
        tenant_conns[conn.id] = conn
        self.conns[conn.id] = conn

    async def detach(self, conn: Connection) -> None:
        if self.conns.pop(conn.id, None) is not None:
            metrics.connection_closed(conn)
        tenant_conns = self.by_tenant.get(conn.tenant)
        if tenant_conns is not None:
            tenant_conns.pop(conn.id, None)
            if not tenant_conns:
                del self.by_tenant[conn.tenant]
                if self._sub is not None:
                    await self._sub.remove_tenant(conn.tenant)

    # -- bus → connections
    def _on_bus(self, kind: str, channel: str, payload: bytes) -> None:
        try:
            if kind == "event":
                event = json.loads(payload)
            else:  # one reply, or a batch of them (canonical.bus.direct_batches)
                replies = direct_envelopes(payload)
        except ValueError:
            log.warning("dropping undecodable bus message on %s", kind)
            return
        if kind == "event":
            self._fan_out(channel, event)
            return
        for reply in replies:
            self._direct(reply)

    def _fan_out(self, tenant: str, event: Json) -> None:
        conns = self.by_tenant.get(tenant)
        if not conns:
            return
        self.events_in += 1
        if event.get("type") == "_control":
            self._control(conns, event)
            return
        encoded: dict[str, OutFrame | None] = {}
        for conn in list(conns.values()):
            name = conn.dialect.name
            if name not in encoded:
                frame = conn.dialect.encode_event(event)
                encoded[name] = OutFrame(encode(frame)) if frame is not None else None
            if conn.offer_event(event, encoded[name]):
                self.tasks.spawn(self._resync(conn), name="hdg-resync")

    def _control(self, conns: dict[str, Connection], event: Json) -> None:
        action = event.get("action")
        if action == "resync":
            # The plugin restarted: events it sequenced may never have been published.
            log.info(
                "plugin of tenant %s restarted: resyncing %d devices",
                event.get("tenant", "?"),
                len(conns),
            )
            self._resync_all(conns.values())
        elif action == "close_device":
            for conn in list(conns.values()):
                if conn.device_id == event.get("device_id"):
                    conn.request_close(int(event.get("code", 4403)))
                    metrics.control_closed("close_device", 1)
        elif action == "close_all":
            for conn in list(conns.values()):
                conn.request_close(int(event.get("code", 4401)))
            metrics.control_closed("close_all", len(conns))

    async def request(
        self, tenant: str, cmd: str, args: Json, *, timeout: float = REQUEST_TIMEOUT_S
    ) -> Json:
        """Send the tenant's plugin a command and await its direct reply (the reply body:
        an error reply is ``{"type": "error", "code", "message"}``).

        Raises BusUnavailable, or TimeoutError when the plugin does not answer in time.
        """
        conn_id = "req-" + new_id(8)
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._requests[conn_id] = future
        try:
            await self.bus.submit(
                tenant,
                {
                    "cmd": cmd,
                    "edge": self.edge_id,
                    "conn": conn_id,
                    "dialect": "http",
                    "device_id": "edge",
                    "request_id": None,
                    "args": args,
                    "internal": True,
                    "ts": now_iso(),
                },
            )
            return await asyncio.wait_for(future, timeout)
        finally:
            self._requests.pop(conn_id, None)

    def _direct(self, message: Json) -> None:
        pending = self._requests.get(str(message.get("conn")))
        if pending is not None:
            if not pending.done() and message.get("kind") == REPLY:
                body = message.get("body")
                pending.set_result(body if isinstance(body, dict) else {})
            return
        conn = self.conns.get(str(message.get("conn")))
        if conn is None:
            return
        kind = message.get("kind")
        body = message.get("body")
        if kind == REPLY and isinstance(body, dict):
            frame = conn.dialect.encode_reply(body)
            if frame is not None:
                conn.send_frame(encode(frame))
        elif kind == REPLAY and isinstance(body, dict):
            self._replay(conn, body)
        elif kind == CLOSE and isinstance(body, dict):
            if body.get("frame") is not None:
                frame = conn.dialect.encode_reply(body["frame"])
                if frame is not None:
                    conn.send_frame(encode(frame))
            conn.request_close(int(body.get("code", 1000)))

    def _replay(self, conn: Connection, body: Json) -> None:
        for text in body.get("before_text") or []:
            # Frames the plugin encoded for this device's dialect (an iris hello.ack and
            # its channel directory): sent as they are, neither parsed nor encoded here.
            if isinstance(text, str):
                conn.send_frame(text)
        for reply in body.get("before") or []:
            frame = conn.dialect.encode_reply(reply)
            if frame is not None:
                conn.send_frame(encode(frame))
        head = body.get("head")
        if isinstance(head, int) and (body.get("fresh") or conn.last_cursor > head):
            # A fresh device starts at the head: older events are history, not a gap. A
            # device ahead of the head (a restored server) would otherwise drop new events.
            conn.last_cursor = head
        events: list[tuple[Json, OutFrame | str | None]] = []
        for event in body.get("events") or []:
            frame = conn.dialect.encode_event(event)
            events.append((event, encode(frame) if frame is not None else None))
        metrics.replayed(len(events), done=not body.get("more"))
        if body.get("more"):
            conn.replay_chunk(events)
            self.tasks.spawn(self._next_chunk(conn), name="hdg-replay-chunk")
        elif conn.finish_replay(events):
            self.tasks.spawn(self._resync(conn), name="hdg-resync")

    def _on_bus_reconnect(self) -> None:
        """The doorbell was down: every device catches up."""
        log.info("bus subscription back: resyncing %d devices", len(self.conns))
        self._resync_all(self.conns.values())

    def _resync_all(self, conns: Iterable[Connection]) -> None:
        """Iris devices resync from their cursors; pheby devices (no cursors in that
        protocol) are asked to reconnect and reload their snapshot."""
        for conn in list(conns):
            if conn.dialect.name == "pheby":
                conn.request_close(CLOSE_SERVICE_RESTART)
            else:
                # Even a connection already replaying: its replay may have been lost.
                conn.begin_replay()
                self.tasks.spawn(self._resync(conn), name="hdg-resync")

    async def _next_chunk(self, conn: Connection) -> None:
        """Pull the next replay chunk once this device has taken most of the last one."""
        for _ in range(REPLAY_PACE_TRIES):
            if conn.closed or conn.queued <= conn.max_frames // 4:
                break
            await asyncio.sleep(REPLAY_PACE_S)
        if not conn.closed:
            await self._resync(conn)

    async def _resync(self, conn: Connection) -> None:
        command = {
            "cmd": "sync",
            "edge": self.edge_id,
            "conn": conn.id,
            "dialect": conn.dialect.name,
            "device_id": conn.device_id,
            "args": {"cursor": conn.last_cursor},
            "internal": True,
        }
        try:
            # Any error: the bus down, or an error reply (out of memory) the next try may pass.
            async for attempt in retrying(Exception, give_up_after_s=RESYNC_GIVE_UP_S):
                with attempt:
                    if conn.closed:
                        return
                    await self.bus.submit(conn.tenant, command)
            return
        except Exception as exc:
            log.warning(
                "resync of conn %s not sent for %.0f s (%s); closing it to resume",
                conn.id,
                RESYNC_GIVE_UP_S,
                type(exc).__name__,
            )
        if conn.finish_replay([]):  # events are missing: the device resumes by reconnecting
            conn.request_close(CLOSE_UNAVAILABLE)
