"""Direct replies to one device's commands, over its edge (never sequenced)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from canonical.bus import Bus, direct_batches, direct_envelope
from canonical.errors import BusUnavailable
from canonical.model import Json
from canonical.protocol import REPLY

log = logging.getLogger("hdg.plugin")


class Replies:
    """`note_reply(command, kind, body)` keeps each reply for a redelivered command
    (`CommandReader.note_reply`) before it is sent; `durable()` waits until every event
    queued so far is committed (`Sequencer.durable`): no reply acknowledges an event a
    crash could still lose, or precedes it on a replay."""

    def __init__(
        self,
        bus: Bus,
        note_reply: Callable[[Json, str, Json], None],
        durable: Callable[[], Awaitable[None]],
    ) -> None:
        self.bus = bus
        self._note = note_reply
        self._durable = durable

    async def reply(self, command: Json, body: Json, kind: str = REPLY) -> None:
        self._note(command, kind, body)
        edge, conn = command.get("edge"), command.get("conn")
        if not edge or not conn:
            return
        await self._durable()
        try:
            await self.bus.reply(str(edge), direct_envelope(str(conn), kind, body))
        except BusUnavailable:
            log.warning(
                "bus unavailable; reply to conn=%s lost (client retries idempotently)", conn
            )

    async def reply_many(self, replies: list[tuple[Json, Json, str]]) -> None:
        """(command, body, kind) replies in one round trip, in order."""
        by_edge: dict[str, list[bytes]] = {}
        for command, body, kind in replies:
            self._note(command, kind, body)
            if command.get("edge") and command.get("conn"):
                envelope = direct_envelope(str(command["conn"]), kind, body)
                by_edge.setdefault(str(command["edge"]), []).append(envelope)
        if not by_edge:
            return
        await self._durable()
        # One message per edge, not per reply (a storm's batch of hellos): fewer PUBLISHes
        # for Redis and fewer messages for each edge to take apart.
        out = [
            (edge, message)
            for edge, envelopes in by_edge.items()
            for message in direct_batches(envelopes)
        ]
        try:
            await self.bus.reply_many(out)
        except BusUnavailable:
            log.warning("bus unavailable; %d replies lost (clients retry idempotently)", len(out))


__all__ = ["Replies"]
