"""A pub/sub connection that hands each message to its handler as soon as it is parsed.

redis-py's ``PubSub.listen()`` costs an awaited read, a lock and a message dict per
message; an edge serving many tenants pays that once per event per edge, so it is most of
the edge's work for a device or two per tenant. Here RESP is parsed by hiredis in
``data_received`` and every message in a socket read is dispatched in one synchronous
pass, with no task switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import cast

import hiredis
from redis.exceptions import ResponseError

from .errors import BusUnavailable
from .redis_mux import Endpoint, keepalive, pack_command

log = logging.getLogger("hdg.bus")

MessageHandler = Callable[[bytes, bytes], None]


class SubscriberWire(asyncio.Protocol):
    """One subscribed connection: (channel, data) of each message to ``on_message``.

    Confirmations of SUBSCRIBE/UNSUBSCRIBE and PING replies are not messages; the first
    ``awaiting`` subscribe confirmations resolve ``subscribed``. ``lost`` resolves when the
    connection ends, with the reason.
    """

    def __init__(self, on_message: MessageHandler) -> None:
        loop = asyncio.get_running_loop()
        self._on_message = on_message
        self._reader = hiredis.Reader(replyError=ResponseError)
        self.transport: asyncio.Transport | None = None
        self.awaiting = 0
        self.subscribed: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[str] = loop.create_future()
        self.last_read = loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        keepalive(transport)

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
    endpoint: Endpoint, channels: list[str], on_message: MessageHandler, timeout: float = 5.0
) -> SubscriberWire:
    """Connect, authenticate and subscribe; returns once Redis confirmed the channels.
    Raises BusUnavailable."""
    wire = await endpoint.connect(lambda: SubscriberWire(on_message))
    for command in endpoint.auth():
        wire.command(*(str(part) for part in command))
    wire.subscribe(channels)
    try:
        await asyncio.wait_for(asyncio.shield(wire.subscribed), timeout)
    except BaseException as exc:
        wire.close()
        if isinstance(exc, TimeoutError):
            raise BusUnavailable("redis did not confirm the subscription") from exc
        raise
    return wire


async def hold(wire: SubscriberWire, ping_s: float = 15.0) -> str:
    """Until the connection ends (its reason); PINGs when idle and gives up on a peer
    that stays silent for two intervals (a dead link without a FIN)."""
    loop = asyncio.get_running_loop()
    while True:
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(wire.lost), ping_s)
        silent = loop.time() - wire.last_read
        if silent > 2 * ping_s:
            wire.end(f"redis silent for {silent:.0f}s")
        elif silent > ping_s:
            wire.command("PING")


__all__ = ["SubscriberWire", "hold", "open_subscriber"]
