"""The scaled bus on Redis: a stream with a consumer group per tenant, pub/sub doorbells."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .bus import (
    CONSUMER_GROUP,
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

log = logging.getLogger("hdg.bus")

STREAM_MAXLEN = 100_000
_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


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
        self._pubsub: Any = None
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
        return [self._edge_channel, *(event_channel(t) for t in self._tenants)]

    async def _run(self) -> None:
        delay = 0.1
        first = True
        while not self._closed:
            pubsub = self._bus.client.pubsub(ignore_subscribe_messages=True)
            try:
                wanted = self._channels()
                await pubsub.subscribe(*wanted)
                self._pubsub = pubsub
                # Tenants added or removed while subscribing were not seen by it.
                added = [c for c in self._channels() if c not in wanted]
                removed = [c for c in wanted if c not in self._channels()]
                if added:
                    await pubsub.subscribe(*added)
                if removed:
                    await pubsub.unsubscribe(*removed)
                self.connected = True
                self._ready.set()
                delay = 0.1
                if not first and self._on_reconnect is not None:
                    self._on_reconnect()
                first = False
                async for message in pubsub.listen():
                    if message is None or message.get("type") != "message":
                        continue
                    channel = message["channel"]
                    if isinstance(channel, bytes):
                        channel = channel.decode()
                    data = message["data"]
                    if channel == self._edge_channel:
                        self._handler("direct", self._edge_channel, data)
                    else:
                        # hdg:{tenant}:ev
                        tenant = channel[channel.index("{") + 1 : channel.index("}")]
                        self._handler("event", tenant, data)
            except asyncio.CancelledError:
                raise
            except (*_DOWN, RedisError) as exc:
                self.connected = False
                self._pubsub = None
                log.warning(
                    "bus subscription lost (%s); reconnecting in %.1fs", type(exc).__name__, delay
                )
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:
                    pass

    async def add_tenant(self, tenant: str) -> None:
        if tenant in self._tenants:
            return
        self._tenants.add(tenant)
        if self._pubsub is not None:
            try:
                await self._pubsub.subscribe(event_channel(tenant))
            except _DOWN:
                pass  # resubscribed by _run after reconnect

    async def remove_tenant(self, tenant: str) -> None:
        if tenant not in self._tenants:
            return
        self._tenants.discard(tenant)
        if self._pubsub is not None:
            try:
                await self._pubsub.unsubscribe(event_channel(tenant))
            except _DOWN:
                pass

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


class RedisBus(Bus):
    def __init__(self, url: str) -> None:
        self.url = url
        self.client: Any = aioredis.from_url(  # type: ignore[no-untyped-call]
            url, socket_connect_timeout=2.0, socket_timeout=None, health_check_interval=15
        )
        self._groups: set[str] = set()

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
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hset(TENANTS_KEY, token_digest(token), tenant)
                pipe.set(tenant_alive_key(tenant), "1", ex=ttl_s)
                await pipe.execute()
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def unregister_tenant(self, tenant: str, token: str) -> None:
        try:
            digest = token_digest(token)
            current = await self.client.hget(TENANTS_KEY, digest)
            if current is not None and current.decode() == tenant:
                await self.client.hdel(TENANTS_KEY, digest)
            await self.client.delete(tenant_alive_key(tenant))
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def resolve_tenant(self, token: str) -> str | None:
        digest = token_digest(token)
        try:
            found = await self.client.hget(TENANTS_KEY, digest)
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc
        if found is None:
            # Spend the same comparison on a miss as on a hit.
            hmac.compare_digest(digest, "0" * len(digest))
            return None
        return str(found.decode())

    async def tenant_alive(self, tenant: str) -> bool:
        try:
            return bool(await self.client.exists(tenant_alive_key(tenant)))
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def submit(self, tenant: str, command: Json) -> None:
        try:
            await self.client.xadd(
                command_stream(tenant),
                {"d": json.dumps(command, separators=(",", ":"))},
                maxlen=STREAM_MAXLEN,
                approximate=True,
            )
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def consume(
        self, tenant: str, consumer: str, count: int = 64, block_ms: int = 1000
    ) -> list[tuple[str, Json]]:
        try:
            stream = await self._ensure_group(tenant)
            result = await self.client.xreadgroup(
                CONSUMER_GROUP, consumer, {stream: ">"}, count=count, block=block_ms
            )
        except _DOWN as exc:
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
        try:
            await self.client.xack(command_stream(tenant), CONSUMER_GROUP, entry_id)
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

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
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc
        return out

    async def publish(self, tenant: str, payload: bytes) -> None:
        try:
            await self.client.publish(event_channel(tenant), payload)
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def publish_many(self, tenant: str, payloads: list[bytes]) -> None:
        """Several events of one tenant in one round trip, in order (a pipeline)."""
        channel = event_channel(tenant)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for payload in payloads:
                    pipe.publish(channel, payload)
                await pipe.execute()
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def reply(self, edge_id: str, payload: bytes) -> None:
        try:
            await self.client.publish(edge_channel(edge_id), payload)
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    def subscription(
        self,
        edge_id: str,
        handler: BusHandler,
        on_reconnect: Callable[[], None] | None = None,
    ) -> Subscription:
        return _RedisSubscription(self, edge_id, handler, on_reconnect)

    async def lockout_hit(self, source: str, window_s: float) -> int:
        key = lockout_key(source)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, int(window_s), nx=True)
                count, _ = await pipe.execute()
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc
        return int(count)

    async def lockout_count(self, source: str) -> int:
        try:
            value = await self.client.get(lockout_key(source))
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc
        return int(value or 0)

    async def tenant_count(self) -> int:
        try:
            return int(await self.client.hlen(TENANTS_KEY))
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def set_presence(
        self, tenant: str, device_id: str, info: Json | None, ttl_s: float = 60.0
    ) -> None:
        key = presence_key(tenant)
        try:
            if info is None:
                await self.client.hdel(key, device_id)
            else:
                # One hash per tenant; each entry carries its own expiry, and the hash
                # itself expires when no edge refreshes anything.
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.hset(key, device_id, json.dumps({**info, "expires": time.time() + ttl_s}))
                    pipe.expire(key, int(ttl_s) + 5)
                    await pipe.execute()
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc

    async def presence(self, tenant: str) -> dict[str, Json]:
        try:
            raw = await self.client.hgetall(presence_key(tenant))
        except _DOWN as exc:
            raise BusUnavailable(str(exc)) from exc
        now = time.time()
        entries = {k.decode(): json.loads(v) for k, v in raw.items()}
        return {k: v for k, v in entries.items() if v.get("expires", 0) > now}

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (*_DOWN, RedisError):
            return False

    async def close(self) -> None:
        await self.client.aclose()
