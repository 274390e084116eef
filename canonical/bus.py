"""The bus contract: one interface, two implementations (memory for embedded, Redis for scaled).

Paths:
- inbound commands (edge → plugin): a per-tenant stream with a consumer group; the plugin
  acks an entry only after the command's effect is durable (at-least-once).
- outbound events (plugin → edges): per-tenant pub/sub, the doorbell. It is at-most-once;
  the plugin's outbox is the log and devices replay from it.
- direct replies (plugin → one connection): pub/sub on the edge's own channel; one
  message may carry several replies for that edge (``direct_batches``).

Every key and channel is namespaced per tenant, so one Redis and one fleet of edges serves
several Hermes gateways, and an edge subscribes only to the tenants of the devices it holds.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from canonical.model import Json as Json  # re-exported: the bus implementations name it from here

from .errors import SettingsError
from .jsonenc import dumps_ascii

if TYPE_CHECKING:
    from .redis_timeouts import RedisTimeouts

# handler(kind, tenant_or_edge, payload): kind is "event" (tenant channel) or "direct".
BusHandler = Callable[[str, str, bytes], None]

PREFIX = "hdg"
TENANTS_KEY = f"{PREFIX}:tenants"
# Token digests whose tenant mapping changed (payload: the digest): edges drop them from
# their tenant cache (redis_bus.TenantCache).
TENANTS_CHANGED = f"{PREFIX}:tenants:changed"
# A hello failed (payload: "<seconds it counts>:<source>"), and the index of every source
# with failures (sorted set, score: unix time they stop counting): edges' lockout views.
LOCKOUTS_CHANGED = f"{PREFIX}:lockouts:changed"
LOCKOUT_INDEX = f"{PREFIX}:lockouts"
CONSUMER_GROUP = "plugin"


def token_digest(token: str) -> str:
    """What the registry stores: never the token itself."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def command_stream(tenant: str) -> str:
    return f"{PREFIX}:{{{tenant}}}:cmd"


def event_channel(tenant: str) -> str:
    return f"{PREFIX}:{{{tenant}}}:ev"


def tenant_alive_key(tenant: str) -> str:
    return f"{PREFIX}:{{{tenant}}}:alive"


def presence_key(tenant: str) -> str:
    return f"{PREFIX}:{{{tenant}}}:presence"


def edge_channel(edge_id: str) -> str:
    return f"{PREFIX}:edge:{edge_id}"


def lockout_key(source: str) -> str:
    return f"{PREFIX}:lockout:{source}"


def direct_envelope(conn: str, kind: str, body: Any) -> bytes:
    return dumps_ascii({"conn": conn, "kind": kind, "body": body}).encode()


# A direct message is one envelope (a JSON object) or several for the same edge (a JSON
# array of them, in order): a batch of hellos is answered in one PUBLISH per edge, not one
# per device. A batch stays below this size, so no single message is huge.
DIRECT_BATCH_MAX_BYTES = 256 * 1024


def direct_batches(envelopes: list[bytes]) -> list[bytes]:
    """The direct messages that carry these envelopes (for one edge), in order."""
    out: list[bytes] = []
    batch: list[bytes] = []
    size = 0
    for envelope in envelopes:
        if batch and size + len(envelope) > DIRECT_BATCH_MAX_BYTES:
            out.append(_joined(batch))
            batch, size = [], 0
        batch.append(envelope)
        size += len(envelope) + 1
    if batch:
        out.append(_joined(batch))
    return out


def _joined(batch: list[bytes]) -> bytes:
    return batch[0] if len(batch) == 1 else b"[" + b",".join(batch) + b"]"


def direct_envelopes(payload: bytes | str) -> list[Json]:
    """The envelopes of a direct message, in order (raises ValueError if not JSON)."""
    message = json.loads(payload)
    items = message if isinstance(message, list) else [message]
    return [item for item in items if isinstance(item, dict)]


class Subscription(abc.ABC):
    """One per edge process: its direct channel plus the tenant channels it needs."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def add_tenant(self, tenant: str) -> None: ...

    @abc.abstractmethod
    async def remove_tenant(self, tenant: str) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


class Bus(abc.ABC):
    """What the plugin and the edges need from the shared bus."""

    # -- tenants
    @abc.abstractmethod
    async def register_tenant(self, tenant: str, token: str, ttl_s: int = 30) -> None:
        """Map the token's digest to the tenant and mark the tenant alive for ttl_s."""

    @abc.abstractmethod
    async def unregister_tenant(self, tenant: str, token: str) -> None: ...

    @abc.abstractmethod
    async def resolve_tenant(self, token: str) -> str | None:
        """The tenant the token opens, or None; compares digests in constant time."""

    @abc.abstractmethod
    async def tenant_alive(self, tenant: str) -> bool: ...

    # -- inbound commands
    @abc.abstractmethod
    async def submit(self, tenant: str, command: Json) -> None:
        """Queue a command for the tenant's plugin. Raises BusUnavailable."""

    @abc.abstractmethod
    async def consume(
        self, tenant: str, consumer: str, count: int = 64, block_ms: int = 1000
    ) -> list[tuple[str, Json]]: ...

    @abc.abstractmethod
    async def ack(self, tenant: str, entry_id: str) -> None: ...

    @abc.abstractmethod
    async def ack_many(self, tenant: str, entry_ids: list[str]) -> None:
        """Ack several entries in one round trip."""

    @abc.abstractmethod
    async def reclaim(
        self, tenant: str, consumer: str, min_idle_ms: int = 0
    ) -> list[tuple[str, Json]]:
        """Entries delivered earlier but never acked (a crashed plugin's work)."""

    # -- outbound
    @abc.abstractmethod
    async def publish(self, tenant: str, payload: bytes) -> None: ...

    @abc.abstractmethod
    async def publish_many(self, tenant: str, payloads: list[bytes]) -> None:
        """Several events of one tenant in one round trip, in order."""

    def publish_nowait(
        self, tenant: str, payload: bytes, on_lost: Callable[[], None] | None = None
    ) -> bool:
        """Hand an event to the bus without awaiting, in order with the publishes handed
        over before it; False when that cannot be done now (the caller queues it for
        ``publish``). A failure after hand-over is logged and reported to ``on_lost``: the
        outbox keeps the event, and the caller has devices catch up by replay."""
        return False

    @abc.abstractmethod
    async def reply(self, edge_id: str, payload: bytes) -> None: ...

    @abc.abstractmethod
    async def reply_many(self, replies: list[tuple[str, bytes]]) -> None:
        """Several (edge_id, payload) direct replies in one round trip, in order."""

    @abc.abstractmethod
    def subscription(
        self,
        edge_id: str,
        handler: BusHandler,
        on_reconnect: Callable[[], None] | None = None,
    ) -> Subscription: ...

    # -- counters shared by all edges
    @abc.abstractmethod
    async def lockout_hit(self, source: str, window_s: float) -> int:
        """Count one failed hello from source; return failures in the window."""

    @abc.abstractmethod
    async def lockout_count(self, source: str) -> int: ...

    @abc.abstractmethod
    async def tenant_count(self) -> int:
        """How many tenants are registered (0 right after a Redis restart)."""

    @abc.abstractmethod
    async def set_presence(
        self, tenant: str, device_id: str, info: Json | None, ttl_s: float = 60.0
    ) -> None:
        """Mark a device online (info) until ttl_s from now, or offline (None)."""

    @abc.abstractmethod
    async def device_online(
        self,
        tenant: str,
        device_id: str,
        info: Json,
        command: Json | None = None,
        ttl_s: float = 60.0,
    ) -> None:
        """A device passed hello: queue its `command` for the plugin (the iris hello; None
        for pheby) and mark it online, in one round trip (on Redis shared with the other
        set-ups of a few ms). Raises BusUnavailable."""

    def device_online_soon(
        self,
        tenant: str,
        device_id: str,
        info: Json,
        command: Json | None = None,
        ttl_s: float = 60.0,
    ) -> asyncio.Future[None]:
        """``device_online`` without waiting for it: the future settles when it is done
        (BusUnavailable when it could not be). Lets a bus send the writes of many
        set-ups in one round trip, and a hello go on before it."""
        return asyncio.ensure_future(self.device_online(tenant, device_id, info, command, ttl_s))

    @abc.abstractmethod
    async def presence(self, tenant: str) -> dict[str, Json]:
        """Devices online now, with the edge and connection that hold them."""

    @abc.abstractmethod
    async def ping(self) -> bool: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


_MEMORY_BUSES: dict[str, Bus] = {}


def open_bus(url: str, timeouts: RedisTimeouts | None = None) -> Bus:
    """The bus for a URL. ``memory://name`` buses are shared within one process;
    ``timeouts`` bound every wait for Redis (defaults when None)."""
    if url.startswith("memory://"):
        from .memory_bus import MemoryBus

        bus = _MEMORY_BUSES.get(url)
        if bus is None:
            bus = _MEMORY_BUSES[url] = MemoryBus()
        return bus
    if url.startswith(("redis://", "rediss://", "unix://", "redis+sentinel://")):
        from .redis_bus import RedisBus

        return RedisBus(url, timeouts)
    raise SettingsError("ANDROID_BUS_URL", f"unsupported scheme in {url.split('://')[0]!r}")


def forget_memory_bus(url: str) -> None:
    _MEMORY_BUSES.pop(url, None)
