"""Storage off the event loop: one writer thread per database, one small read pool.

The plugin shares Hermes' one asyncio loop with every other platform, so no SQLite call
runs on it. Each database file has one `StorageThread` that runs its jobs one at a time,
in submission order: writes never contend with each other inside the process, a job sees
every write submitted before it, and a busy file (a `hermes cron run` process holding the
write lock) stalls that thread, never the loop. Reads that can be slow (search, transcript
and history pages) go to a `ReadPool` of read-only connections, so they neither wait
behind writes nor hold them up.

A thread hop (wake the thread, hand the GIL over, wake the loop with the result) costs
120-200 µs of CPU on a small VM, more than most jobs it carries. So the jobs the loop
queues on a storage thread in one loop turn cross over in one hop, and their results
come back in one (`call`). And the threads are the process's, not each Controller's: a
process with many Controllers (benchmarks, tests; a deployment runs one per Hermes
gateway) has one thread per file name, so the jobs of all of them share those hops.
Every `StorageThread` or `ReadPool` is a handle onto the process's thread(s) of its name,
counted: the last handle stopped ends them.

The stores themselves stay synchronous classes (workers and CLI processes use them
directly); the loop reaches them only through these two.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from gateway_plugin.errors import PluginError

log = logging.getLogger("gateway_plugin.storage")

P = ParamSpec("P")
T = TypeVar("T")

# What `call`'s `on_done` gets: the job's result, or the error it raised.
Done = Callable[[Any, BaseException | None], None]


class StorageClosed(PluginError):
    """A job was submitted after the storage thread was stopped."""


@dataclass(slots=True)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    on_done: Done


def _run_jobs(jobs: list[_Job]) -> list[tuple[Any, BaseException | None]]:
    outcomes: list[tuple[Any, BaseException | None]] = []
    for job in jobs:
        try:
            outcomes.append((job.fn(*job.args), None))
        except BaseException as error:
            outcomes.append((None, error))
    return outcomes


class _Threads:
    """The thread(s) of one name in the process, and the jobs queued for the next hop."""

    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self.handles = 0
        self._lock = threading.Lock()
        self._queued: list[_Job] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        with self._lock:
            self._send_locked()  # what `call` queued first: the order holds
            return self.pool.submit(fn, *args)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], on_done: Done) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is not loop:
                self._send_locked()
            first = not self._queued
            self._queued.append(_Job(fn, args, on_done))
            self._loop = loop
        if first:
            loop.call_soon(self.send)

    def send(self) -> None:
        with self._lock:
            self._send_locked()

    def _send_locked(self) -> None:
        jobs, loop, self._queued = self._queued, self._loop, []
        if not jobs or loop is None:
            return
        future = self.pool.submit(_run_jobs, jobs)

        def back(done: Future[list[tuple[Any, BaseException | None]]]) -> None:
            try:
                loop.call_soon_threadsafe(_deliver, jobs, done)
            except RuntimeError:
                pass  # the loop is closed: nobody awaits these any more

        future.add_done_callback(back)


def _deliver(jobs: list[_Job], done: Future[list[tuple[Any, BaseException | None]]]) -> None:
    error = done.exception()
    outcomes = done.result() if error is None else [(None, error)] * len(jobs)
    for job, (result, failure) in zip(jobs, outcomes, strict=True):
        try:
            job.on_done(result, failure)
        except Exception:
            log.exception("a storage job's completion failed")


_REGISTRY_LOCK = threading.Lock()
_REGISTRY: dict[str, _Threads] = {}


def _acquire(name: str, workers: int) -> _Threads:
    with _REGISTRY_LOCK:
        threads = _REGISTRY.get(name)
        if threads is None:
            threads = _REGISTRY[name] = _Threads(name, workers)
        threads.handles += 1
        return threads


def _release(threads: _Threads, wait: bool) -> None:
    with _REGISTRY_LOCK:
        threads.handles -= 1
        last = threads.handles == 0
        if last and _REGISTRY.get(threads.name) is threads:
            del _REGISTRY[threads.name]
    if last:
        threads.send()
        threads.pool.shutdown(wait=wait)
    elif wait:
        threads.submit(lambda: None).result()  # behind everything this handle queued


class _Executor:
    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self._threads = _acquire(name, workers)
        self._closed = False

    def _submit(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._closed:
            raise StorageClosed(f"{self.name} is stopped")
        if kwargs:
            return self._threads.submit(lambda: fn(*args, **kwargs))
        return self._threads.submit(fn, *args)

    def submit(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue `fn(*args)` now; its future, for callers that chain on its completion."""
        return self._submit(fn, *args, **kwargs)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args)` on this executor's thread(s); the loop only awaits."""
        return await asyncio.wrap_future(self._submit(fn, *args, **kwargs))

    def stop(self, wait: bool = True) -> None:
        """Run what this handle queued, then let go (further submissions raise
        `StorageClosed`); the last handle of a name ends its thread(s)."""
        if self._closed:
            return
        self._closed = True
        _release(self._threads, wait)


class StorageThread(_Executor):
    """The one thread that writes a database file; jobs run in submission order."""

    def __init__(self, name: str) -> None:
        super().__init__(name, workers=1)

    def call(self, fn: Callable[..., T], *args: Any, on_done: Done) -> None:
        """Queue `fn(*args)` for this loop turn's hop (in order with every other job);
        `on_done(result, error)` runs on the loop once it ran. On the loop only."""
        if self._closed:
            raise StorageClosed(f"{self.name} is stopped")
        self._threads.call(fn, args, on_done)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args)` on the storage thread, in the hop of this loop turn's jobs."""
        if kwargs:
            return await self.run(lambda: fn(*args, **kwargs))
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def on_done(result: Any, error: BaseException | None) -> None:
            if waiter.done():
                return
            if error is None:
                waiter.set_result(result)
            else:
                waiter.set_exception(error)

        self.call(fn, *args, on_done=on_done)
        return await waiter

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


__all__ = ["Done", "ReadPool", "StorageClosed", "StorageThread"]
