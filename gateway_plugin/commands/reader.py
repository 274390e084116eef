"""The plugin's reader of device commands: the tenant's command stream, carried out once.

Commands are read in order (hellos that follow each other in one batch), each recorded
in outbox.db once its effect is durable (`command_once`), then acked (XACK) as a batch. A
redelivered entry (a crash, a failed XACK) is answered again from its record, not carried
out again; a failed XACK is retried with the next read. The controller owns what the
commands act on; this owns how they are read, recorded and acked.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from canonical.backoff import Attempts
from canonical.errors import BusUnavailable
from canonical.model import Json
from canonical.protocol import CLOSE, REPLY, error_body
from gateway_plugin.commands import once as command_once
from gateway_plugin.storage.threads import StorageBusy

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin")


def _internal_error(command: Json) -> Json:
    return error_body(
        "internal_error", "the gateway failed to handle this request", command.get("request_id")
    )


# In a connection storm each stream read brought only a few hellos, and about half of the
# plugin's CPU per hello was the read's fixed cost (the read itself, two SQLite
# transactions, the channel directory, the replies' round trip, the XACK). Waiting this
# long after a read of several hellos lets the next read take what arrived meanwhile: a
# storm's hellos wait a few ms more (they queue for CPU far longer), a lone command none.
STORM_LINGER_S = 0.005
# How long one stream read waits for a command: a random span, so that the readers of
# many gateways on one Redis (each read ends with a round trip) do not wake in step.
CONSUME_BLOCK_MS = (1000, 2000)
STORM_HELLOS = 4  # hellos in one read that mean a storm is on


def linger_after(batch: list[tuple[str, Json]]) -> float:
    """How long to wait before the next stream read, after carrying out this one."""
    hellos = 0
    for _, command in batch:
        if command.get("cmd") == "hello":
            hellos += 1
            if hellos >= STORM_HELLOS:
                return STORM_LINGER_S
    return 0.0


# A device whose hello or sync failed is waiting for a replay that will not come, and its
# edge holds live events back until it does: close it (1011), so it reconnects and asks again.
CLOSE_INTERNAL_ERROR = 1011
_REPLAYING_COMMANDS = ("hello", "sync")


def _failed(command: Json) -> tuple[Json, Json, str]:
    """The reply to a command that raised: an error, or for a replay, an error and a close."""
    return _refusal(command, _internal_error(command))


def _expired(command: Json) -> tuple[Json, Json, str]:
    """The reply to a command that waited longer than the command window (command_once)."""
    error = error_body(
        "unavailable",
        "this request waited too long to be carried out; send it again",
        command.get("request_id"),
    )
    return _refusal(command, error)


def _busy(command: Json, busy: StorageBusy) -> tuple[Json, Json, str]:
    """The reply to a command not carried out because outbox.db stayed locked."""
    return _refusal(command, error_body(busy.code, busy.message, command.get("request_id")))


def _refusal(command: Json, error: Json) -> tuple[Json, Json, str]:
    if command.get("cmd") in _REPLAYING_COMMANDS:
        return command, {"code": CLOSE_INTERNAL_ERROR, "frame": error}, CLOSE
    return command, error, REPLY


class CommandReader:
    """The controller's one reader of its tenant's command stream (see the module doc)."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.name = f"plugin-{controller.tenant}"  # its consumer in the stream's group
        # Entries carried out whose XACK failed: acked with the next ones (insertion order).
        self.owed_acks: dict[str, None] = {}
        # The command being carried out and the direct replies it sent (command_once).
        self.replying: tuple[Json, list[command_once.Reply]] | None = None

    def note_reply(self, command: Json, kind: str, body: Json) -> None:
        """Keep what the command being carried out answers, to answer a redelivery alike."""
        if self.replying is not None and self.replying[0] is command:
            self.replying[1].append((kind, body))

    async def run(self) -> None:
        c = self.c
        await c.agent.wait_ready()
        attempts = Attempts()
        first = True
        while True:
            try:
                if first:
                    # Entries taken but never acked (a crash, a failed XACK): those carried
                    # out already are answered again from their record, not run again.
                    batch = await c.bus.reclaim(c.tenant, self.name, 0)
                    first = False
                    if batch:
                        log.info("reclaimed %d pending commands", len(batch))
                    await self.handle_batch(batch)
                    await c.orphans.close_stale_runs()
                    continue
                batch = await c.bus.consume(
                    c.tenant, self.name, 256, random.randrange(*CONSUME_BLOCK_MS)
                )
                attempts.succeeded()
                await self.handle_batch(batch)
                linger = linger_after(batch)
                if linger:
                    await asyncio.sleep(linger)
            except BusUnavailable:
                await asyncio.sleep(attempts.next_delay())
                first = True
                continue
            except Exception:
                # An error reply from Redis (out of memory), a locked database...: this loop
                # is the only reader of device commands, so it must outlive any of them. What
                # was read and not acked is reclaimed (idempotent) once it works again.
                log.exception("handling device commands failed; retrying")
                await asyncio.sleep(attempts.next_delay())
                first = True

    async def handle_batch(self, batch: list[tuple[str, Json]]) -> None:
        """Carry out a stream read in order; each entry is marked processed (outbox.db)
        once its effect is durable, and the batch is acked (XACK) after all marks. An entry
        marked already (redelivered) is answered again, not carried out again."""
        acks: list[str] = []
        try:
            if batch:
                entry_ids = [entry_id for entry_id, _ in batch]
                try:
                    done = await self.c.sequencer.run(self.c.outbox.processed_replies, entry_ids)
                except StorageBusy as exc:
                    # Not carried out: each device is told to send it again, and the
                    # entries are acked (nothing of them was done).
                    await self.c.reply_many([_busy(command, exc) for _, command in batch])
                    acks.extend(entry_ids)
                    done = None
                if done is not None:
                    await self._carry_out(batch, done, acks)
        except BaseException:
            # Those carried out before the failure are owed their XACK (and, when reclaimed
            # meanwhile, answered already): acked with the next read.
            self.owed_acks.update(dict.fromkeys(acks))
            raise
        await self._ack(acks)

    async def _carry_out(
        self, batch: list[tuple[str, Json]], done: dict[str, str | None], acks: list[str]
    ) -> None:
        now = time.time()
        hellos: list[tuple[str, Json]] = []
        for entry_id, command in batch:
            if entry_id in done:
                await self._handle_hellos(hellos, acks)  # replies stay in stream order
                await self._answer_again(entry_id, command, done[entry_id])
                acks.append(entry_id)
            elif command_once.outlived_window(entry_id, now, self.c.command_window_s()):
                await self._handle_hellos(hellos, acks)
                log.warning("command %s waited too long; not carried out", command.get("cmd"))
                await self.c.reply_many([_expired(command)])
                acks.append(entry_id)
            elif command.get("cmd") == "hello":
                hellos.append((entry_id, command))  # consecutive hellos go together
            else:
                await self._handle_hellos(hellos, acks)
                replies = await self._handle_one(command)
                await self.c.sequencer.durable()  # its effects first, then its record
                kept = command_once.replies_to_keep(command, replies)
                await self._record(self.c.outbox.mark_processed, entry_id, kept)
                acks.append(entry_id)
        await self._handle_hellos(hellos, acks)

    async def _answer_again(self, entry_id: str, command: Json, kept: str | None) -> None:
        """A redelivered entry: its device may still wait for the answer a failed XACK (or a
        crash) kept from being final. Not when this process owes the entry's XACK: then
        it answered it itself, moments ago."""
        if entry_id in self.owed_acks:
            return
        replies = command_once.kept_replies(kept)
        if replies:
            await self.c.reply_many([(command, body, kind) for kind, body in replies])

    async def _ack(self, entry_ids: list[str]) -> None:
        """XACK these entries and any whose XACK failed before. A failure is retried with
        the next read (at least every second): an entry left pending would be delivered
        again at the next reclaim, and its record is what then keeps it from running twice."""
        owed = self.owed_acks
        was_owing = bool(owed)
        owed.update(dict.fromkeys(entry_ids))
        if not owed:
            return
        settling = list(owed)
        try:
            await self.c.bus.ack_many(self.c.tenant, settling)
        except Exception as exc:  # the bus down, or an error reply (a failover, an ACL)
            if not was_owing:
                log.warning(
                    "could not ack %d commands (%s: %s); retrying with the next read",
                    len(owed),
                    type(exc).__name__,
                    exc,
                )
            return
        for entry_id in settling:
            owed.pop(entry_id, None)
        if was_owing:
            log.info("acked the commands whose XACK had failed")

    async def _handle_one(self, command: Json) -> list[command_once.Reply]:
        """Carry out one command; the direct replies it sent."""
        replies: list[command_once.Reply] = []
        self.replying = (command, replies)
        try:
            await self.c.commands.handle(command)
        except Exception:
            log.exception("command %s failed", command.get("cmd"))
            await self.c.reply_many([_failed(command)])
        finally:
            self.replying = None
        return replies

    async def _handle_hellos(self, hellos: list[tuple[str, Json]], acks: list[str]) -> None:
        if not hellos:
            return
        entry_ids = [entry_id for entry_id, _ in hellos]
        commands = [command for _, command in hellos]
        hellos.clear()
        try:
            await self.c.commands.hello_batch(commands)
        except Exception:
            log.exception("%d hellos failed together; answering them one by one", len(commands))
            for command in commands:  # one bad hello must not fail its neighbours
                try:
                    await self.c.commands.hello_batch([command])
                except Exception:
                    log.exception("hello failed")
                    await self.c.reply_many([_failed(command)])
        await self.c.sequencer.durable()
        await self._record(self.c.outbox.mark_processed_many, entry_ids)
        acks.extend(entry_ids)

    async def _record(self, mark: Callable[..., None], *args: Any) -> None:
        """Record entries as carried out. outbox.db locked past the retries: they are acked
        unrecorded (answered already; reclaiming them would certainly run them again, while
        only an XACK failing as well could now deliver them again)."""
        try:
            await self.c.sequencer.run(mark, *args)
        except StorageBusy as exc:
            log.warning("carried-out commands not recorded: %s", exc.message)
