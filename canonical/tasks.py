"""Background tasks someone owns.

A task started with ``create_task`` and not held may be garbage-collected mid-flight, and
its failure surfaces, if ever, as "Task exception was never retrieved" at exit. A
``TaskSet`` holds every task it started until it ends, logs a failure when it happens
(the exception and its traceback; a task's arguments, which may carry message bodies,
are not logged), and on ``close`` cancels what is left and waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["TaskSet"]

T = TypeVar("T")


class TaskSet:
    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as a task held by this set. After ``close``, the coroutine is
        closed unstarted and a cancelled task returned (shutting down: nothing new)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        if self._closed:
            task.cancel()
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._log.error(
                "background task %s failed: %s",
                task.get_name(),
                type(error).__name__,
                exc_info=error,
            )

    async def close(self) -> None:
        """Cancel every task still running and wait until all have ended."""
        self._closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
