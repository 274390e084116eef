"""Noticing other processes' writes: one thread per process looks at every watched file.

A `hermes cron run` in another process appends deliveries to outbox.db and may add
channels to channels.db; a running gateway notices with SQLite's ``PRAGMA data_version``,
which changes only when another connection committed. Asking each file from its own
storage thread once a second costs a thread hop per file per second (120-200 µs of CPU
each on a small VM); a process with many Controllers (benchmarks, tests) spent most of a
core on it while idle. So one `FileWatch` thread asks every watched file in turn, and
only a file that did change costs a hop: its ``on_change`` runs on the loop that
registered it.

A check never waits for a file this process is using (it is asked again a second later)
and must not block; what a change calls for (reading the new rows, reloading a snapshot)
runs on the file's storage thread, never here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gateway_plugin.storage")

# How often every watched file is asked whether another process changed it.
WATCH_S = 1.0


@dataclass(frozen=True, eq=False)
class Watched:
    name: str
    changed: Callable[[], bool]
    on_change: Callable[[], None]
    loop: asyncio.AbstractEventLoop


class FileWatch:
    """The process's watch thread: started with the first watched file, ended with the
    last one (`unwatch`)."""

    def __init__(self, interval_s: float = WATCH_S) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._watched: list[Watched] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(
        self, name: str, changed: Callable[[], bool], on_change: Callable[[], None]
    ) -> Watched:
        """Ask `changed()` every interval (on the watch thread); when it says True,
        `on_change()` runs on the calling loop."""
        entry = Watched(name, changed, on_change, asyncio.get_running_loop())
        with self._lock:
            self._watched.append(entry)
            if self._thread is None:
                self._wake = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._wake,), name="hdg-file-watch", daemon=True
                )
                self._thread.start()
        return entry

    def unwatch(self, entry: Watched) -> None:
        """Stop asking; the thread ends with the last file (not waited for: a check in
        progress finishes on its own, and its `on_change` is dropped)."""
        with self._lock:
            if entry in self._watched:
                self._watched.remove(entry)
            if not self._watched and self._thread is not None:
                self._wake.set()
                self._thread = None

    def watching(self) -> int:
        with self._lock:
            return len(self._watched)

    def _run(self, stop: threading.Event) -> None:
        # The files are asked one at a time across the interval, not in one burst: with
        # many, a burst would hold the GIL against the loop for milliseconds.
        while True:
            with self._lock:
                watched = list(self._watched)
            pause = self.interval_s / max(1, len(watched))
            for entry in watched:
                if stop.wait(pause):
                    return
                if self._is_watched(entry):
                    self._ask(entry)
            if not watched and stop.wait(self.interval_s):
                return

    def _ask(self, entry: Watched) -> None:
        try:
            changed = entry.changed()
        except Exception:
            if self._is_watched(entry):  # else closed as it was asked: nothing to say
                log.warning("watching %s failed; asked again later", entry.name, exc_info=True)
            return
        if not changed:
            return
        try:
            entry.loop.call_soon_threadsafe(self._changed, entry)
        except RuntimeError:
            pass  # its loop is closed: it is being unwatched

    def _is_watched(self, entry: Watched) -> bool:
        with self._lock:
            return entry in self._watched

    def _changed(self, entry: Watched) -> None:
        if self._is_watched(entry):  # else unwatched since it was asked
            entry.on_change()


FILE_WATCH = FileWatch()


__all__ = ["FILE_WATCH", "WATCH_S", "FileWatch", "Watched"]
