"""The plugin's storage threads: which thread owns which SQLite file.

- ``channels``: channels.db (the channel directory's writes and snapshot refreshes)
- ``devices``: devices.db (hellos, device lookups, FCM tokens, revocations)
- ``attachments``: attachments.db (register, get, claim, cleanup)
- ``pending``: pending_pushes.db (pushes deferred across a restart)
- ``reads``: two read-only threads for what can be slow and only reads: search,
  Hermes' transcripts (state.db) and history pages.

The outbox has its own thread, owned by the outbox. Every connection these threads use
has a busy timeout (`BUSY_TIMEOUT_S`): another process holding a file's write lock (a
``hermes cron run``) stalls that file's thread for at most that long, then the command
fails with a clear error; the loop only ever awaits.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from gateway_plugin.errors import CommandError
from gateway_plugin.storage.locked import is_locked
from gateway_plugin.storage.sqlite_file import BUSY_TIMEOUT_S
from gateway_plugin.storage.thread import ReadPool, StorageClosed, StorageThread

log = logging.getLogger("gateway_plugin.storage")

P = ParamSpec("P")
T = TypeVar("T")


class StorageBusy(CommandError):
    """A file stayed locked by another process longer than its busy timeout."""

    def __init__(self, what: str) -> None:
        super().__init__(
            "unavailable", f"{what} is locked by another process; try again in a few seconds"
        )


class Storage:
    """One `StorageThread` per plugin database file and the read pool; created by the
    controller, stopped after the stores are closed."""

    def __init__(self) -> None:
        self.channels = StorageThread("hdg-channels-db")
        self.devices = StorageThread("hdg-devices-db")
        self.attachments = StorageThread("hdg-attachments-db")
        self.pending = StorageThread("hdg-pending-db")
        self.reads = ReadPool("hdg-read", workers=2)

    def all(self) -> tuple[StorageThread | ReadPool, ...]:
        return (self.channels, self.devices, self.attachments, self.pending, self.reads)

    def stop(self, wait: bool = True) -> None:
        for executor in self.all():
            executor.stop(wait=wait)


async def run_or_busy(
    thread: StorageThread | ReadPool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """`thread.run(fn, ...)`; a file still locked after its busy timeout becomes a
    `StorageBusy` command error (the device gets an ``unavailable`` reply, not a hang)."""
    try:
        return await thread.run(fn, *args, **kwargs)
    except sqlite3.OperationalError as exc:
        busy = as_busy(exc, thread.name)
        if busy is exc:
            raise
        raise busy from exc


def as_busy(error: BaseException, thread_name: str) -> BaseException:
    """A lock error from a file's storage thread (``hdg-outbox-db``, ``hdg-channels-db``...)
    as the `StorageBusy` of that file, logged once; any other error as it is."""
    if not is_locked(error):
        return error
    log.warning("%s: %s", thread_name, error)
    busy = StorageBusy(thread_name.removeprefix("hdg-").replace("-db", ".db"))
    busy.__cause__ = error
    return busy


def refresh_on(thread: StorageThread, refresh: Callable[[], object]) -> Callable[[], None]:
    """What a change another process made calls for (`FileWatch`): `refresh()` queued on
    the file's thread; a file still locked is refreshed at the next change it shows."""

    def refresh_now() -> None:
        try:
            refresh()
        except sqlite3.OperationalError as exc:
            log.info("%s: refresh postponed: %s", thread.name, exc)

    def queue() -> None:
        try:
            thread.run_nowait(refresh_now)
        except StorageClosed:
            pass  # stopping

    return queue


__all__ = ["BUSY_TIMEOUT_S", "Storage", "StorageBusy", "as_busy", "refresh_on", "run_or_busy"]
