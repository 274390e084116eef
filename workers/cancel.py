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
    with the task still running, is made again. A task nobody cancels is left alone."""
    loop = asyncio.get_running_loop()
    pending_since: float | None = None
    while not task.done():
        await asyncio.sleep(after_s / 4)
        if task.done() or not task.cancelling():
            pending_since = None
            continue
        now = loop.time()
        if pending_since is None:
            pending_since = now
        elif now - pending_since >= after_s:
            log.warning(
                "%s kept running after it was told to stop; telling it again", task.get_name()
            )
            task.cancel()
            pending_since = now


async def cancel_and_wait(task: asyncio.Task[Any], every_s: float = INSIST_AFTER_S) -> None:
    """Cancel ``task`` and wait until it is done, cancelling it again every ``every_s``."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
