"""Stopping a task whose cancellation can be lost.

arq stops a worker by cancelling its main task once the running jobs are done. Under CPU
load that request was seen lost: the task stayed "cancelling" (``Task.cancelling()`` > 0)
yet went on polling, and ``arq workers.settings.WorkerSettings`` never exited after
SIGTERM (about one stop in three with both cores busy; somewhere below arq's poll loop a
``CancelledError`` is absorbed). These helpers repeat the request until the task is done.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["cancel_and_wait", "insist_on_cancel"]

log = logging.getLogger(__name__)

INSIST_AFTER_S = 1.0


async def insist_on_cancel(task: asyncio.Task[Any], after_s: float = INSIST_AFTER_S) -> None:
    """Watch ``task`` until it is done: a cancel request still pending ``after_s`` later,
    with the task still running, is made again until it takes. A task nobody cancels is
    left alone."""
    while not task.done():
        await asyncio.sleep(after_s / 4)
        if not task.cancelling():
            continue
        await asyncio.wait({task}, timeout=after_s)
        if not task.done() and task.cancelling():
            log.warning(
                "%s kept running after it was told to stop; telling it again", task.get_name()
            )
            await cancel_and_wait(task, after_s)


async def cancel_and_wait(task: asyncio.Task[Any], every_s: float = INSIST_AFTER_S) -> None:
    """Cancel ``task`` and wait until it is done, cancelling it again every ``every_s``."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
