"""The controller's background loops, and how its tasks are stopped.

Each loop runs for the controller's life (``Controller.start`` creates them, ``stop``
cancels them through :func:`cancel_all`) and survives its own failures: the next round
tries again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING

from canonical.errors import BusUnavailable
from gateway_plugin.attachments.registry import CLEANUP_PERIOD_S as ATTACHMENT_CLEANUP_S
from gateway_plugin.commands import once as command_once

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin")

HEARTBEAT_S = 3.0
RETENTION_PERIOD_S = 3600.0
EXPIRY_SWEEP_S = 30.0  # how late a device learns that a picker expired
CANCEL_AGAIN_S = 0.5  # stop(): how long a cancelled task may take before it is cancelled again


async def heartbeat(c: Controller) -> None:
    # Short period: after a Redis restart devices cannot authenticate until this runs.
    # Started at a random phase: the gateways (or Controllers) of one Redis beat out of step.
    await asyncio.sleep(random.uniform(0, HEARTBEAT_S))
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        try:
            await c.bus.register_tenant(c.tenant, c.token)
        except BusUnavailable:
            log.warning("bus unavailable; tenant heartbeat will retry")
        except Exception:  # an error reply (out of memory...): the next beat retries
            log.exception("tenant heartbeat failed; it will retry")


async def outbox_retention(c: Controller) -> None:
    while True:
        try:
            await trim_outbox(c)
        except Exception:  # a locked outbox: the next round retries
            log.exception("outbox retention failed; retrying later")
        await asyncio.sleep(RETENTION_PERIOD_S)


async def trim_outbox(c: Controller, now: float | None = None) -> int:
    """Events and idempotency records past retention, and command records past the
    command window (on the outbox's thread)."""
    cutoff = (now or time.time()) - c.settings.outbox_retention_hours * 3600
    trimmed = await c.sequencer.run(c.outbox.trim, cutoff)
    if trimmed:
        log.info("outbox retention trimmed %d events", trimmed)
    records = command_once.record_cutoff(now or time.time(), c.command_window_s())
    await c.sequencer.run(c.outbox.prune_processed, records)
    return trimmed


def expire_stale(c: Controller) -> None:
    """Pickers past their expiry, and titles awaited for runs that are gone."""
    c.desk.expire_due()
    c.titles.pending.prune(lambda lane: c.turns.active(lane) is not None)


async def attachment_retention(c: Controller) -> None:
    while True:
        try:
            await c.storage.attachments.run(c.attachments.cleanup)
        except Exception:
            log.exception("attachment cleanup failed; retrying in an hour")
        await asyncio.sleep(ATTACHMENT_CLEANUP_S)


async def expiry_sweep(c: Controller) -> None:
    while True:
        await asyncio.sleep(EXPIRY_SWEEP_S)
        try:
            expire_stale(c)
        except Exception:  # a locked outbox: the next sweep retries
            log.exception("expiring stale pickers failed; retrying")


async def resume_pushes(c: Controller) -> None:
    """Set the push workers' ack mark, then (embedded) queue the pushes a previous
    process left waiting: in that order, so a push for an event read meanwhile stands
    down."""
    await c.push.sync_acks()
    resumed = await c.jobs.resume_pushes(enabled=c.push.submit is not None)
    if resumed:
        log.info("queued %d pushes a previous process left waiting", resumed)


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks and wait until each has ended. A task is cancelled again while it
    runs on: Python 3.11's asyncio.wait_for (which redis-py's socket writes go through)
    swallows a cancel that lands as the call it waits for completes, and the command
    consumer would then read on for ever, and stop() with it."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            log.debug("task %s ended with %r", task.get_name(), task.exception())
