"""Storage off the event loop: one writer thread per database, one small read pool.

The plugin shares Hermes' one asyncio loop with every other platform, so no SQLite call
runs on it. Each database file has one `StorageThread` that runs its jobs one at a time,
in submission order: writes never contend with each other inside the process, a job sees
every write submitted before it, and a busy file (a `hermes cron run` process holding the
write lock) stalls that thread, never the loop. Reads that can be slow (search, transcript
and history pages) go to a `ReadPool` of read-only connections, so they neither wait
behind writes nor hold them up.

The stores themselves stay synchronous classes (workers and CLI processes use them
directly); the loop reaches them only through these two.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from gateway_plugin.errors import PluginError

log = logging.getLogger("gateway_plugin.storage")

P = ParamSpec("P")
T = TypeVar("T")


class StorageClosed(PluginError):
    """A job was submitted after the storage thread was stopped."""


class _Executor:
    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._closed = False

    def _submit(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._closed:
            raise StorageClosed(f"{self.name} is stopped")
        return self._pool.submit(fn, *args, **kwargs)

    def submit(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue `fn(*args)`; its future, for callers that chain on its completion."""
        return self._submit(fn, *args, **kwargs)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args)` on this executor's thread(s); the loop only awaits."""
        return await asyncio.wrap_future(self._submit(fn, *args, **kwargs))

    def stop(self, wait: bool = True) -> None:
        """Run what is queued, then stop (further submissions raise `StorageClosed`)."""
        self._closed = True
        self._pool.shutdown(wait=wait)


class StorageThread(_Executor):
    """The one thread that writes a database file; jobs run in submission order."""

    def __init__(self, name: str) -> None:
        super().__init__(name, workers=1)

    def run_nowait(self, fn: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue `fn(*args)` behind everything submitted so far without waiting for it
        (for writes a synchronous Hermes callback makes); a failure is logged."""
        self._submit(fn, *args, **kwargs).add_done_callback(self._log_failure)

    def _log_failure(self, future: Future[object]) -> None:
        if not future.cancelled() and (error := future.exception()) is not None:
            log.error("%s: a queued write failed", self.name, exc_info=error)


class ReadPool(_Executor):
    """A few threads for slow read-only queries (search, transcripts, history pages)."""

    def __init__(self, name: str = "hdg-read", workers: int = 2) -> None:
        super().__init__(name, workers=workers)


__all__ = ["ReadPool", "StorageClosed", "StorageThread"]
