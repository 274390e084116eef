"""The bus's Redis links on redis-py's public API alone: the stock path of the fast paths.

When ``canonical.fastpath`` turns ``redis_mux`` off (``ANDROID_FASTPATH=off``, or a
redis-py/hiredis whose internals it does not recognise), :class:`StockCommands` carries
the bus's non-blocking commands on a redis-py asyncio client and its pool, with the same
surface and errors as ``RedisMux``: replies as Redis sent them (the client's reply
post-processing is turned off through its public ``response_callbacks``), connection
trouble as BusUnavailable, an error reply as ResponseError. When ``redis_pubsub`` is off,
:class:`StockSubscriber` reads the edge's subscription with redis-py's ``PubSub``.
Slower (a pool checkout per command, a task switch per message), same behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import BusUnavailable
from .redis_timeouts import RedisTimeouts, redis_py_options
from .sentinel import close_primary_client, is_sentinel_url, parse_sentinel_url, primary_client

log = logging.getLogger("hdg.bus")

Command = Sequence[str | bytes | int | float]
MessageHandler = Callable[[bytes, bytes], None]
DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


def redis_py_client(url: str, timeouts: RedisTimeouts, *, blocks_for_s: float = 0.0) -> Any:
    """A redis-py client on the primary (through the sentinels for a sentinel URL)."""
    if is_sentinel_url(url):
        return primary_client(parse_sentinel_url(url), timeouts, blocks_for_s=blocks_for_s)
    return aioredis.from_url(  # type: ignore[no-untyped-call]
        url, **redis_py_options(url, timeouts, blocks_for_s=blocks_for_s)
    )


async def close_client(url: str, client: Any) -> None:
    if is_sentinel_url(url):
        await close_primary_client(client)
    else:
        await client.aclose()


class StockCommands:
    """``RedisMux``'s surface on a redis-py client: ``execute``, ``pipeline``,
    ``pipeline_settled``, ``try_send`` (never sends: callers take their awaited path)."""

    def __init__(self, url: str, timeouts: RedisTimeouts | None = None) -> None:
        self._url = url
        self.client: Any = redis_py_client(url, timeouts or RedisTimeouts())
        # Raw replies, as the bus's callers read them (bytes, flat lists, b"PONG").
        self.client.response_callbacks.clear()

    async def execute(self, *command: str | bytes | int | float) -> Any:
        try:
            return await self.client.execute_command(*command)
        except DOWN as exc:
            raise BusUnavailable(f"redis: {exc or type(exc).__name__}") from exc

    def try_send(self, command: Command) -> asyncio.Future[Any] | None:
        """None: a pooled client cannot promise order with what is already in flight."""
        return None

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Replies in order; raises the first error reply once all have arrived."""
        results = await self.pipeline_settled(commands)
        first_error = next((r for r in results if isinstance(r, ResponseError)), None)
        if first_error is not None:
            raise first_error
        return results

    async def pipeline_settled(self, commands: Sequence[Command]) -> list[Any]:
        """Replies in order, an error reply in its place as a ResponseError."""
        if not commands:
            return []
        # Not a redis-py transaction: a MULTI/EXEC among the commands is sent as written.
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        try:
            return list(await pipe.execute(raise_on_error=False))
        except DOWN as exc:
            raise BusUnavailable(f"redis: {exc or type(exc).__name__}") from exc

    async def close(self) -> None:
        await close_client(self._url, self.client)


class StockSubscriber:
    """The edge's subscription on redis-py's ``PubSub``: (channel, data) of each message
    to ``on_message``; ``command`` (SUBSCRIBE/UNSUBSCRIBE) is sent in order by one task."""

    def __init__(self, client: Any, on_message: MessageHandler) -> None:
        self.pubsub = client.pubsub()
        self._on_message = on_message
        self._pending: list[tuple[str, tuple[str, ...]]] = []
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self.lost: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.last_read = asyncio.get_running_loop().time()

    def command(self, verb: str, *channels: str) -> None:
        self._pending.append((verb.upper(), channels))
        self._wake.set()
        if self._sender is None:
            self._sender = asyncio.create_task(self._send(), name="hdg-bus-subscribe")

    async def _send(self) -> None:
        while not self.lost.done():
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                verb, channels = self._pending.pop(0)
                try:
                    if verb == "SUBSCRIBE":
                        await self.pubsub.subscribe(*channels)
                    elif verb == "UNSUBSCRIBE":
                        await self.pubsub.unsubscribe(*channels)
                    else:
                        await self.pubsub.execute_command(verb, *channels)
                except DOWN as exc:
                    self.end(f"redis connection lost ({exc or type(exc).__name__})")
                    return

    async def confirm(self, channels: list[str], timeout_s: float) -> None:
        """Subscribe to ``channels`` and return once Redis confirmed each; raises
        BusUnavailable. Messages read meanwhile are handled."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.pubsub.subscribe(*channels)
                awaiting = len(channels)
                while awaiting > 0:
                    message = await self.pubsub.get_message(timeout=timeout_s)
                    if message is not None and message["type"] == "subscribe":
                        awaiting -= 1
                    elif message is not None:
                        self._handle(message)
        except TimeoutError as exc:
            raise BusUnavailable("redis did not confirm the subscription") from exc
        except ResponseError as exc:
            raise BusUnavailable(f"redis refused the subscription: {exc}") from exc
        except DOWN as exc:
            raise BusUnavailable(f"cannot reach redis: {exc or type(exc).__name__}") from exc

    def _handle(self, message: dict[str, Any]) -> None:
        if message["type"] == "message":
            try:
                self._on_message(message["channel"], message["data"])
            except Exception:  # one bad message must not end the subscription
                log.exception("bus message handler failed")

    async def hold(self, timeouts: RedisTimeouts) -> str:
        """Read until the connection ends (its reason); PING after ``health_check_s`` of
        silence and give up on a peer still silent ``command_s`` later."""
        loop = asyncio.get_running_loop()
        # Look at the clock at least this often, whatever the reads do.
        step_s = min(1.0, timeouts.health_check_s / 2, timeouts.command_s / 2)
        pinged = False
        while not self.lost.done():
            silent = loop.time() - self.last_read
            if silent >= timeouts.health_check_s + timeouts.command_s:
                self.end(f"redis silent for {silent:.1f}s")
                break
            if silent >= timeouts.health_check_s and not pinged:
                pinged = True
                self.command("PING")
            try:
                message = await self.pubsub.get_message(timeout=step_s)
            except ResponseError as exc:
                if str(exc).startswith(("LOADING", "BUSY")):  # alive, keeps the subscription
                    self.last_read, pinged = loop.time(), False
                    continue
                self.end(f"redis refused the subscription: {exc}")
                break
            except DOWN as exc:
                self.end(f"redis connection lost ({exc or type(exc).__name__})")
                break
            if message is not None:
                self.last_read, pinged = loop.time(), False
                self._handle(message)
        return self.lost.result()

    def end(self, reason: str) -> None:
        if not self.lost.done():
            self.lost.set_result(reason)

    def close(self) -> None:
        self.end("closed")
        if self._sender is not None:
            self._sender.cancel()
        closing = asyncio.ensure_future(self.pubsub.aclose())
        closing.add_done_callback(_ignore_result)


async def open_stock_subscriber(
    client: Any, channels: list[str], on_message: MessageHandler, timeouts: RedisTimeouts
) -> StockSubscriber:
    """A PubSub subscribed to ``channels``, confirmed within ``command_s``; raises
    BusUnavailable."""
    subscriber = StockSubscriber(client, on_message)
    try:
        await subscriber.confirm(channels, timeouts.command_s)
    except BaseException:
        subscriber.close()
        raise
    return subscriber


def _ignore_result(task: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        task.result()


__all__ = [
    "StockCommands",
    "StockSubscriber",
    "close_client",
    "open_stock_subscriber",
    "redis_py_client",
]
