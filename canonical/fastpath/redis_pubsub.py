"""A pub/sub connection that hands each message to its handler as soon as it is parsed.

redis-py's ``PubSub.listen()`` costs an awaited read, a lock and a message dict per
message; an edge serving many tenants pays that once per event per edge, so it is most of
the edge's work for a device or two per tenant. Here RESP is parsed by hiredis in
``data_received`` and every message in a socket read is dispatched in one synchronous
pass, with no task switch.

A subscribed connection reads nothing while no one publishes, so its health is checked
by :func:`hold`: PING after ``health_check_s`` of silence, give up when ``command_s``
more pass without a byte (a silent partition or a frozen server), and the subscription
reconnects and resubscribes.

Measured (``bench/fanout.py --only-tenants``: many tenants, a device or two each): per
event an edge's work is mostly reading the bus, which redis-py spent on the awaited read,
lock and dict above. It relies on hiredis' ``Reader`` and ``pack_command``
(:func:`contract`); the stock path is redis-py's ``PubSub`` (``canonical.redis_stock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import cast

import hiredis
from redis.exceptions import ResponseError

from ..errors import BusUnavailable
from ..redis_timeouts import RedisTimeouts
from .redis_mux import Endpoint, hiredis_contract, keepalive, pack_command

log = logging.getLogger("hdg.bus")

MessageHandler = Callable[[bytes, bytes], None]
# Error replies of a server that answers but serves no commands for a while: loading its
# data set (a restart, a replica's full resync) or running a long script. Subscriptions
# and PUBLISH still work while it loads; nothing is published while a script runs.
ALIVE_ERRORS = ("LOADING", "BUSY")


class SubscriberWire(asyncio.Protocol):
    """One subscribed connection: (channel, data) of each message to ``on_message``.

    Confirmations of SUBSCRIBE/UNSUBSCRIBE and PING replies are not messages; the first
    ``awaiting`` subscribe confirmations resolve ``subscribed``. ``lost`` resolves when the
    connection ends, with the reason.
    """

    def __init__(self, on_message: MessageHandler, keepalive_s: float = 15.0) -> None:
        loop = asyncio.get_running_loop()
        self._on_message = on_message
        self._keepalive_s = keepalive_s
        self._reader = hiredis.Reader(replyError=ResponseError)
        self.transport: asyncio.Transport | None = None
        self.awaiting = 0
        self.subscribed: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[str] = loop.create_future()
        self.last_read = loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        keepalive(transport, self._keepalive_s)

    def command(self, *parts: str | bytes | int) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(pack_command(parts))

    def subscribe(self, channels: list[str]) -> None:
        """Subscribe; ``subscribed`` resolves once Redis confirmed every channel."""
        self.awaiting += len(channels)
        if not channels and not self.subscribed.done():
            self.subscribed.set_result(None)
        self.command("SUBSCRIBE", *channels)

    def data_received(self, data: bytes) -> None:
        self.last_read = asyncio.get_running_loop().time()
        reader = self._reader
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self.end(f"redis protocol error: {exc}")
                return
            if reply is False:
                return
            if type(reply) is list and len(reply) == 3 and reply[0] == b"message":
                try:
                    self._on_message(reply[1], reply[2])
                except Exception:  # one bad message must not end the subscription
                    log.exception("bus message handler failed")
            elif isinstance(reply, ResponseError):
                if self.subscribed.done() and str(reply).startswith(ALIVE_ERRORS):
                    # The health check's PING refused by a server that is alive and keeps
                    # the subscription: dropping it would only resync every device.
                    continue
                # AUTH refused, or a command Redis rejects in subscribed mode.
                self.end(f"redis refused the subscription: {reply}")
                return
            elif type(reply) is list and reply and reply[0] == b"subscribe":
                if self.awaiting > 0:
                    self.awaiting -= 1
                    if self.awaiting == 0 and not self.subscribed.done():
                        self.subscribed.set_result(None)

    def end(self, reason: str) -> None:
        if not self.lost.done():
            self.lost.set_result(reason)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(f"redis connection lost ({exc or 'closed'})")
        if not self.subscribed.done():
            self.subscribed.set_exception(BusUnavailable(self.lost.result()))
            self.subscribed.exception()  # retrieved: the caller may have stopped waiting

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_subscriber(
    endpoint: Endpoint, channels: list[str], on_message: MessageHandler
) -> SubscriberWire:
    """Connect, authenticate and subscribe; returns once Redis confirmed the channels
    (within the endpoint's command timeout). Raises BusUnavailable."""
    timeouts = endpoint.timeouts
    wire = await endpoint.connect(lambda: SubscriberWire(on_message, timeouts.health_check_s))
    for command in endpoint.auth():
        wire.command(*(str(part) for part in command))
    wire.subscribe(channels)
    try:
        await asyncio.wait_for(asyncio.shield(wire.subscribed), timeouts.command_s)
    except BaseException as exc:
        wire.close()
        if isinstance(exc, TimeoutError):
            raise BusUnavailable("redis did not confirm the subscription") from exc
        raise
    return wire


async def hold(wire: SubscriberWire, timeouts: RedisTimeouts | None = None) -> str:
    """Until the connection ends (its reason); PINGs after ``health_check_s`` of silence
    and gives up on a peer still silent ``command_s`` later (a dead link without a FIN,
    a frozen server)."""
    timeouts = timeouts or RedisTimeouts()
    loop = asyncio.get_running_loop()
    pinged_at: float | None = None  # last_read when the pending PING went out
    while True:
        silent = loop.time() - wire.last_read
        verdict, wait_s = silence_verdict(silent, timeouts)
        if verdict == "dead":
            wire.end(f"redis silent for {silent:.1f}s")
        elif verdict == "probe" and pinged_at != wire.last_read:
            pinged_at = wire.last_read
            wire.command("PING")
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(wire.lost), wait_s)


def silence_verdict(silent_s: float, timeouts: RedisTimeouts) -> tuple[str, float]:
    """What a subscribed connection that has read nothing for ``silent_s`` is, and how
    long until to look again: ``fine``, ``probe`` (PING it) or ``dead``."""
    if silent_s < timeouts.health_check_s:
        return "fine", timeouts.health_check_s - silent_s
    deadline = timeouts.health_check_s + timeouts.command_s
    if silent_s < deadline:
        return "probe", deadline - silent_s
    return "dead", timeouts.command_s


def contract() -> str | None:
    """None when hiredis is as :class:`SubscriberWire` uses it (and :class:`Endpoint`'s
    redis-py parts, through which it connects); else what is not."""
    from .redis_mux import contract as endpoint_contract

    return hiredis_contract() or endpoint_contract()


__all__ = [
    "ALIVE_ERRORS",
    "SubscriberWire",
    "contract",
    "hold",
    "open_subscriber",
    "silence_verdict",
]
