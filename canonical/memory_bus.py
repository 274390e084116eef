"""The embedded bus: the same contract as Redis, inside one process.

Delivery is synchronous (a publish calls the subscribed handlers before returning), so
ordering matches a single Redis connection's pub/sub.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import time
from collections import deque
from collections.abc import Callable

from .bus import Bus, BusHandler, Json, Subscription, token_digest


class _MemorySubscription(Subscription):
    def __init__(self, bus: MemoryBus, edge_id: str, handler: BusHandler) -> None:
        self._bus = bus
        self.edge_id = edge_id
        self.handler = handler
        self.tenants: set[str] = set()

    async def start(self) -> None:
        self._bus._subs.add(self)

    async def add_tenant(self, tenant: str) -> None:
        self.tenants.add(tenant)

    async def remove_tenant(self, tenant: str) -> None:
        self.tenants.discard(tenant)

    async def close(self) -> None:
        self._bus._subs.discard(self)


class _Stream:
    def __init__(self) -> None:
        self.entries: deque[tuple[str, Json]] = deque()
        self.pending: dict[str, tuple[str, Json, float]] = {}
        self.wakeup = asyncio.Event()
        self.seq = itertools.count(1)


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._tenants: dict[str, str] = {}
        self._alive: dict[str, float] = {}
        self._streams: dict[str, _Stream] = {}
        self._subs: set[_MemorySubscription] = set()
        self._lockouts: dict[str, list[float]] = {}
        self._presence: dict[str, dict[str, Json]] = {}

    def _stream(self, tenant: str) -> _Stream:
        stream = self._streams.get(tenant)
        if stream is None:
            stream = self._streams[tenant] = _Stream()
        return stream

    async def register_tenant(self, tenant: str, token: str, ttl_s: int = 30) -> None:
        self._tenants[token_digest(token)] = tenant
        self._alive[tenant] = time.monotonic() + ttl_s

    async def unregister_tenant(self, tenant: str, token: str) -> None:
        if self._tenants.get(token_digest(token)) == tenant:
            del self._tenants[token_digest(token)]
        self._alive.pop(tenant, None)

    async def resolve_tenant(self, token: str) -> str | None:
        digest = token_digest(token)
        found: str | None = None
        # Compare against every entry so timing says nothing about which one matched.
        for known, tenant in list(self._tenants.items()):
            if hmac.compare_digest(known, digest):
                found = tenant
        return found

    async def tenant_alive(self, tenant: str) -> bool:
        return self._alive.get(tenant, 0.0) > time.monotonic()

    async def submit(self, tenant: str, command: Json) -> None:
        self._submit(tenant, command)

    def _submit(self, tenant: str, command: Json) -> None:
        stream = self._stream(tenant)
        entry_id = f"{int(time.time() * 1000)}-{next(stream.seq)}"
        stream.entries.append((entry_id, command))
        stream.wakeup.set()

    async def consume(
        self, tenant: str, consumer: str, count: int = 64, block_ms: int = 1000
    ) -> list[tuple[str, Json]]:
        stream = self._stream(tenant)
        if not stream.entries:
            stream.wakeup.clear()
            try:
                await asyncio.wait_for(stream.wakeup.wait(), block_ms / 1000)
            except TimeoutError:
                return []
        batch: list[tuple[str, Json]] = []
        while stream.entries and len(batch) < count:
            entry_id, command = stream.entries.popleft()
            stream.pending[entry_id] = (consumer, command, time.monotonic())
            batch.append((entry_id, command))
        return batch

    async def ack(self, tenant: str, entry_id: str) -> None:
        self._stream(tenant).pending.pop(entry_id, None)

    async def ack_many(self, tenant: str, entry_ids: list[str]) -> None:
        pending = self._stream(tenant).pending
        for entry_id in entry_ids:
            pending.pop(entry_id, None)

    async def reclaim(
        self, tenant: str, consumer: str, min_idle_ms: int = 0
    ) -> list[tuple[str, Json]]:
        stream = self._stream(tenant)
        now = time.monotonic()
        out: list[tuple[str, Json]] = []
        # Numeric order of "<ms>-<seq>" ids, as Redis returns them (not string order).
        by_id = sorted(stream.pending.items(), key=lambda kv: [int(p) for p in kv[0].split("-")])
        for entry_id, (_, command, since) in by_id:
            if (now - since) * 1000 >= min_idle_ms:
                stream.pending[entry_id] = (consumer, command, now)
                out.append((entry_id, command))
        return out

    async def publish(self, tenant: str, payload: bytes) -> None:
        for sub in list(self._subs):
            if tenant in sub.tenants:
                sub.handler("event", tenant, payload)

    async def publish_many(self, tenant: str, payloads: list[bytes]) -> None:
        for payload in payloads:
            await self.publish(tenant, payload)

    async def reply(self, edge_id: str, payload: bytes) -> None:
        for sub in list(self._subs):
            if sub.edge_id == edge_id:
                sub.handler("direct", edge_id, payload)

    async def reply_many(self, replies: list[tuple[str, bytes]]) -> None:
        for edge_id, payload in replies:
            await self.reply(edge_id, payload)

    def subscription(
        self,
        edge_id: str,
        handler: BusHandler,
        on_reconnect: Callable[[], None] | None = None,
    ) -> Subscription:
        return _MemorySubscription(self, edge_id, handler)

    async def lockout_hit(self, source: str, window_s: float) -> int:
        now = time.monotonic()
        hits = [t for t in self._lockouts.get(source, []) if now - t < window_s]
        hits.append(now)
        self._lockouts[source] = hits
        return len(hits)

    async def lockout_count(self, source: str) -> int:
        now = time.monotonic()
        hits = [t for t in self._lockouts.get(source, []) if now - t < 60.0]
        self._lockouts[source] = hits
        return len(hits)

    async def tenant_count(self) -> int:
        return len(self._tenants)

    async def set_presence(
        self, tenant: str, device_id: str, info: Json | None, ttl_s: float = 60.0
    ) -> None:
        self._set_presence(tenant, device_id, info, ttl_s)

    def _set_presence(self, tenant: str, device_id: str, info: Json | None, ttl_s: float) -> None:
        devices = self._presence.setdefault(tenant, {})
        if info is None:
            devices.pop(device_id, None)
        else:
            devices[device_id] = {**info, "expires": time.time() + ttl_s}

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
        # In memory it is done at once: no task per call (the presence refresh makes one
        # call per connection).
        if command is not None:
            self._submit(tenant, command)
        self._set_presence(tenant, device_id, info, ttl_s)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def presence(self, tenant: str) -> dict[str, Json]:
        now = time.time()
        return {k: v for k, v in self._presence.get(tenant, {}).items() if v["expires"] > now}

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._subs.clear()
