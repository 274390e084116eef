"""The scaled bus on Redis: a stream with a consumer group per tenant, pub/sub doorbells.

Three kinds of connection: redis-py for the stream's group commands (one client for the
blocking XREADGROUP, one for XGROUP/XAUTOCLAIM), a subscriber that dispatches messages as
it parses them (fastpath.redis_pubsub), and one auto-pipelined connection
(fastpath.redis_mux) for every other command, so a storm of hellos costs few round trips
and no pool checkouts; with those fast paths off, redis-py's client and PubSub
(redis_stock). Each waits a bounded time for Redis (redis_timeouts): a hung command is
BusUnavailable. Edges keep a short-lived token-digest → tenant cache, invalidated through
the bus (tenant_cache).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError, ResponseError

from .backoff import Attempts
from .bus import (
    CONSUMER_GROUP,
    LOCKOUT_INDEX,
    LOCKOUTS_CHANGED,
    TENANTS_CHANGED,
    TENANTS_KEY,
    Bus,
    BusHandler,
    Json,
    Subscription,
    command_stream,
    edge_channel,
    event_channel,
    lockout_key,
    presence_key,
    tenant_alive_key,
    token_digest,
)
from .errors import BusUnavailable
from .fastpath import enabled
from .jsonenc import dumps_ascii
from .lockout_view import LockoutView
from .presence_batch import PresenceWriter
from .redis_stock import (
    DOWN,
    Command,
    MessageHandler,
    StockCommands,
    StockSubscriber,
    close_client,
    open_stock_subscriber,
    redis_py_client,
)
from .redis_timeouts import RedisTimeouts
from .tenant_cache import TenantCache

if TYPE_CHECKING:  # imported at run time only where their contracts hold (fastpath)
    from .fastpath.redis_mux import Endpoint, RedisMux
    from .fastpath.redis_pubsub import SubscriberWire

log = logging.getLogger("hdg.bus")

STREAM_MAXLEN = 100_000
# The longest XREADGROUP BLOCK a caller may ask for: the blocking client's socket timeout
# must exceed it, or every idle read would look like a dead server.
MAX_BLOCK_MS = 30_000


def _decode(fields: dict[Any, Any]) -> Json:
    raw = fields.get(b"d") or fields.get("d") or b"{}"
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


class _RedisSubscription(Subscription):
    def __init__(
        self,
        bus: RedisBus,
        edge_id: str,
        handler: BusHandler,
        on_reconnect: Callable[[], None] | None,
    ) -> None:
        self._bus = bus
        self._edge_channel = edge_channel(edge_id)
        self._handler = handler
        self._on_reconnect = on_reconnect
        self._tenants: set[str] = set()
        self._wire: SubscriberWire | StockSubscriber | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._closed = False
        self.connected = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hdg-bus-subscription")
        try:
            await asyncio.wait_for(self._ready.wait(), 5.0)
        except TimeoutError:
            log.warning("bus subscription not ready yet; retrying in the background")

    def _channels(self) -> list[str]:
        return [
            self._edge_channel,
            TENANTS_CHANGED,
            LOCKOUTS_CHANGED,
            *(event_channel(t) for t in self._tenants),
        ]

    async def _run(self) -> None:
        attempts = Attempts()
        first = True
        while not self._closed:
            wire: SubscriberWire | StockSubscriber | None = None
            try:
                wanted = self._channels()
                wire = await self._bus.open_subscriber(wanted, self._on_message)
                # Subscribed first, then the index: a failure is in one or the other.
                failing = await self._bus.failing_sources()
                # Tenants added or removed meanwhile were not in `wanted`. Nothing awaits
                # from here to `self._wire = wire`: a later add_tenant() finds the wire.
                added = [c for c in self._channels() if c not in wanted]
                removed = [c for c in wanted if c not in self._channels()]
                if added:
                    wire.command("SUBSCRIBE", *added)
                if removed:
                    wire.command("UNSUBSCRIBE", *removed)
                self._wire = wire
                self.connected = True
                self._bus.tenants.attach(self)
                self._bus.lockouts.attach(self, failing)
                self._ready.set()
                attempts.succeeded()
                if not first and self._on_reconnect is not None:
                    self._on_reconnect()
                first = False
                reason = await self._bus.hold(wire)
                raise BusUnavailable(reason)
            except asyncio.CancelledError:
                raise
            except BusUnavailable as exc:
                self.connected = False
                self._bus.tenants.detach(self)
                self._bus.lockouts.detach(self)
                self._wire = None
                delay = attempts.next_delay()
                log.warning("bus subscription lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay)
            finally:
                if wire is not None:
                    wire.close()

    def _on_message(self, channel_bytes: bytes, data: bytes) -> None:
        channel = channel_bytes.decode()
        if channel == self._edge_channel:
            self._handler("direct", channel, data)
        elif channel == TENANTS_CHANGED:
            self._bus.tenants.forget(data.decode())
        elif channel == LOCKOUTS_CHANGED:
            ttl, _, source = data.decode().partition(":")
            try:
                self._bus.lockouts.note(source, float(ttl))
            except ValueError:
                log.warning("dropping an undecodable lockout notice")
        else:
            # hdg:{tenant}:ev
            self._handler("event", channel[channel.index("{") + 1 : channel.index("}")], data)

    async def add_tenant(self, tenant: str) -> None:
        if tenant in self._tenants:
            return
        self._tenants.add(tenant)
        if self._wire is not None:
            self._wire.command("SUBSCRIBE", event_channel(tenant))  # else at the reconnect

    async def remove_tenant(self, tenant: str) -> None:
        if tenant not in self._tenants:
            return
        self._tenants.discard(tenant)
        if self._wire is not None:
            self._wire.command("UNSUBSCRIBE", event_channel(tenant))

    async def close(self) -> None:
        self._closed = True
        self._bus.tenants.detach(self)
        self._bus.lockouts.detach(self)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


class RedisBus(Bus):
    def __init__(self, url: str, timeouts: RedisTimeouts | None = None) -> None:
        self.url = url
        self.timeouts = timeouts = timeouts or RedisTimeouts()
        # Consumer groups and reclaims (XGROUP, XAUTOCLAIM): they answer at once.
        self.client: Any = redis_py_client(url, timeouts)
        # XREADGROUP BLOCK alone: its reads may wait out the longest block allowed.
        self.blocking: Any = redis_py_client(url, timeouts, blocks_for_s=MAX_BLOCK_MS / 1000)
        # Every other command: one connection, pipelined across concurrent callers (or,
        # that fast path off, redis-py's pooled client).
        self.mux: RedisMux | StockCommands
        if enabled("redis_mux"):
            from .fastpath.redis_mux import RedisMux

            self.mux = RedisMux(url, timeouts)
        else:
            self.mux = StockCommands(url, timeouts)
        # Presence writes and the iris hellos that travel with them: a few ms per batch.
        self.presence_writer = PresenceWriter(self.mux.pipeline_settled)
        # The subscribers' own connections: hiredis-parsed, or redis-py's PubSub.
        self.endpoint: Endpoint | None = None
        self.pubsub_client: Any = None
        if enabled("redis_pubsub"):
            from .fastpath.redis_mux import Endpoint

            self.endpoint = Endpoint(url, timeouts)
        else:
            self.pubsub_client = redis_py_client(url, timeouts)
        self.tenants = TenantCache()
        self.lockouts = LockoutView()
        self._groups: set[str] = set()

    async def open_subscriber(
        self, channels: list[str], on_message: MessageHandler
    ) -> SubscriberWire | StockSubscriber:
        """A connection subscribed to ``channels`` (confirmed); raises BusUnavailable."""
        if self.endpoint is not None:
            from .fastpath.redis_pubsub import open_subscriber

            return await open_subscriber(self.endpoint, channels, on_message)
        return await open_stock_subscriber(self.pubsub_client, channels, on_message, self.timeouts)

    async def hold(self, wire: SubscriberWire | StockSubscriber) -> str:
        """Until the subscribed connection ends: the reason."""
        if isinstance(wire, StockSubscriber):
            return await wire.hold(self.timeouts)
        from .fastpath.redis_pubsub import hold

        return await hold(wire, self.timeouts)

    async def _ensure_group(self, tenant: str) -> str:
        stream = command_stream(tenant)
        if stream not in self._groups:
            try:
                await self.client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._groups.add(stream)
        return stream

    async def register_tenant(self, tenant: str, token: str, ttl_s: int = 30) -> None:
        digest = token_digest(token)
        previous, _, _ = await self.mux.pipeline(
            [
                ("HGET", TENANTS_KEY, digest),
                ("HSET", TENANTS_KEY, digest, tenant),
                ("SET", tenant_alive_key(tenant), "1", "EX", ttl_s),
            ]
        )
        if previous is None or previous.decode() != tenant:
            # New or re-mapped: no edge may keep serving an older answer from its cache.
            await self.mux.execute("PUBLISH", TENANTS_CHANGED, digest)

    async def unregister_tenant(self, tenant: str, token: str) -> None:
        digest = token_digest(token)
        current = await self.mux.execute("HGET", TENANTS_KEY, digest)
        commands: list[Command] = [("DEL", tenant_alive_key(tenant))]
        if current is not None and current.decode() == tenant:
            commands += [("HDEL", TENANTS_KEY, digest), ("PUBLISH", TENANTS_CHANGED, digest)]
        await self.mux.pipeline(commands)

    async def resolve_tenant(self, token: str) -> str | None:
        digest = token_digest(token)
        cached = self.tenants.get(digest)
        if cached is not None:
            return cached
        generation = self.tenants.generation
        found = await self.mux.execute("HGET", TENANTS_KEY, digest)
        if found is None:
            # Spend the same comparison on a miss as on a hit.
            hmac.compare_digest(digest, "0" * len(digest))
            return None
        tenant = str(found.decode())
        self.tenants.put(digest, tenant, generation)
        return tenant

    async def tenant_alive(self, tenant: str) -> bool:
        return bool(await self.mux.execute("EXISTS", tenant_alive_key(tenant)))

    async def submit(self, tenant: str, command: Json) -> None:
        await self.mux.execute(*_xadd(tenant, command))

    async def consume(
        self, tenant: str, consumer: str, count: int = 64, block_ms: int = 1000
    ) -> list[tuple[str, Json]]:
        if not 1 <= block_ms <= MAX_BLOCK_MS:  # BLOCK 0 would wait forever
            raise ValueError(f"block_ms must be within 1..{MAX_BLOCK_MS}, not {block_ms}")
        try:
            stream = await self._ensure_group(tenant)
            # The socket timeout covers the longest block; this covers the one asked for,
            # so a frozen server is noticed command_s after the block ends, not later.
            async with asyncio.timeout(block_ms / 1000 + self.timeouts.command_s):
                result = await self.blocking.xreadgroup(
                    CONSUMER_GROUP, consumer, {stream: ">"}, count=count, block=block_ms
                )
        except TimeoutError as exc:  # redis-py drops the connection it was cancelled on
            self._groups.clear()
            raise BusUnavailable(f"redis did not answer a stream read: {exc}") from exc
        except DOWN as exc:
            self._groups.clear()
            raise BusUnavailable(str(exc)) from exc
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                self._groups.clear()
                return []
            raise
        out: list[tuple[str, Json]] = []
        for _stream, entries in result or []:
            for entry_id, fields in entries:
                out.append((entry_id.decode(), _decode(fields)))
        return out

    async def ack(self, tenant: str, entry_id: str) -> None:
        await self.ack_many(tenant, [entry_id])

    async def ack_many(self, tenant: str, entry_ids: list[str]) -> None:
        if entry_ids:
            await self.mux.execute("XACK", command_stream(tenant), CONSUMER_GROUP, *entry_ids)

    async def reclaim(
        self, tenant: str, consumer: str, min_idle_ms: int = 0
    ) -> list[tuple[str, Json]]:
        out: list[tuple[str, Json]] = []
        try:
            stream = await self._ensure_group(tenant)
            start = "0-0"
            while True:
                reply = await self.client.xautoclaim(
                    stream, CONSUMER_GROUP, consumer, min_idle_ms, start_id=start, count=100
                )
                start, entries = reply[0], reply[1]
                for entry_id, fields in entries:
                    if fields is None:
                        continue
                    out.append((entry_id.decode(), _decode(fields)))
                if not entries or start in (b"0-0", "0-0"):
                    break
        except DOWN as exc:
            raise BusUnavailable(str(exc)) from exc
        return out

    async def publish(self, tenant: str, payload: bytes) -> None:
        await self.mux.execute("PUBLISH", event_channel(tenant), payload)

    def publish_nowait(
        self, tenant: str, payload: bytes, on_lost: Callable[[], None] | None = None
    ) -> bool:
        sent = self.mux.try_send(("PUBLISH", event_channel(tenant), payload))
        if sent is None:
            return False
        sent.add_done_callback(functools.partial(_publish_done, on_lost))
        return True

    async def publish_many(self, tenant: str, payloads: list[bytes]) -> None:
        channel = event_channel(tenant)
        await self.mux.pipeline([("PUBLISH", channel, payload) for payload in payloads])

    async def reply(self, edge_id: str, payload: bytes) -> None:
        await self.mux.execute("PUBLISH", edge_channel(edge_id), payload)

    async def reply_many(self, replies: list[tuple[str, bytes]]) -> None:
        await self.mux.pipeline(
            [("PUBLISH", edge_channel(edge_id), payload) for edge_id, payload in replies]
        )

    def subscription(
        self,
        edge_id: str,
        handler: BusHandler,
        on_reconnect: Callable[[], None] | None = None,
    ) -> Subscription:
        return _RedisSubscription(self, edge_id, handler, on_reconnect)

    async def lockout_hit(self, source: str, window_s: float) -> int:
        key = lockout_key(source)
        self.lockouts.note(source, window_s)
        now = time.time()
        replies = await self.mux.pipeline(
            [
                ("MULTI",),
                ("INCR", key),
                ("EXPIRE", key, int(window_s), "NX"),
                ("EXEC",),
                # For the lockout views of other edges: the index, then the notice.
                ("ZADD", LOCKOUT_INDEX, now + window_s, source),
                ("ZREMRANGEBYSCORE", LOCKOUT_INDEX, "-inf", now),
                ("PUBLISH", LOCKOUTS_CHANGED, f"{window_s}:{source}"),
            ]
        )
        count, _ = replies[3]
        return int(count)

    async def lockout_count(self, source: str) -> int:
        if self.lockouts.certainly_clear(source):
            return 0  # no edge recorded a failure of this source within the window
        return int(await self.mux.execute("GET", lockout_key(source)) or 0)

    async def failing_sources(self) -> list[tuple[str, float]]:
        """Every source with failures that still count, and for how many seconds."""
        now = time.time()
        try:
            flat = await self.mux.execute("ZRANGEBYSCORE", LOCKOUT_INDEX, now, "+inf", "WITHSCORES")
        except ResponseError as exc:  # e.g. the key holds something else: not usable
            raise BusUnavailable(f"lockout index unreadable: {exc}") from exc
        return [(flat[i].decode(), float(flat[i + 1]) - now) for i in range(0, len(flat), 2)]

    async def tenant_count(self) -> int:
        return int(await self.mux.execute("HLEN", TENANTS_KEY))

    async def set_presence(
        self, tenant: str, device_id: str, info: Json | None, ttl_s: float = 60.0
    ) -> None:
        if info is None:
            await self.presence_writer.write(tenant, device_id, None)
        else:
            await self.device_online_soon(tenant, device_id, info, None, ttl_s)

    async def device_online(
        self,
        tenant: str,
        device_id: str,
        info: Json,
        command: Json | None = None,
        ttl_s: float = 60.0,
    ) -> None:
        await self.device_online_soon(tenant, device_id, info, command, ttl_s)

    def device_online_soon(
        self,
        tenant: str,
        device_id: str,
        info: Json,
        command: Json | None = None,
        ttl_s: float = 60.0,
    ) -> asyncio.Future[None]:
        # Each entry carries its own expiry; the tenant's hash expires when no edge
        # refreshes anything.
        entry = dumps_ascii({**info, "expires": time.time() + ttl_s})
        return self.presence_writer.write(
            tenant,
            device_id,
            entry,
            int(ttl_s) + 5,
            None if command is None else _xadd(tenant, command),
        )

    async def presence(self, tenant: str) -> dict[str, Json]:
        flat = await self.mux.execute("HGETALL", presence_key(tenant))
        now = time.time()
        entries = {flat[i].decode(): json.loads(flat[i + 1]) for i in range(0, len(flat), 2)}
        return {k: v for k, v in entries.items() if v.get("expires", 0) > now}

    async def ping(self) -> bool:
        try:
            return bool(await self.mux.execute("PING") == b"PONG")
        except (BusUnavailable, RedisError):
            return False

    async def close(self) -> None:
        with contextlib.suppress(BusUnavailable):
            await self.presence_writer.close()
        await self.mux.close()
        for client in (self.client, self.blocking, self.pubsub_client):
            if client is not None:
                await close_client(self.url, client)


def _publish_done(on_lost: Callable[[], None] | None, sent: asyncio.Future[Any]) -> None:
    if not sent.cancelled() and sent.exception() is not None:
        log.warning("bus unavailable; event kept in the outbox for replay")
        if on_lost is not None:
            on_lost()


def _xadd(tenant: str, command: Json) -> Command:
    payload = dumps_ascii(command)
    return ("XADD", command_stream(tenant), "MAXLEN", "~", STREAM_MAXLEN, "*", "d", payload)
