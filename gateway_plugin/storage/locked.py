"""A storage job retried while another process holds the file's write lock.

Every connection waits up to `BUSY_TIMEOUT_S` for the lock (sqlite_file.py); past that,
SQLite gives up with `OperationalError: database is locked` (or `busy`). A job on a
storage thread is then tried again a few times, with full jitter (a random wait between
zero and an exponentially growing bound), before its failure is reported. This sleeps
on the storage thread, never on the loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

P = ParamSpec("P")
T = TypeVar("T")

ATTEMPTS = 4
FIRST_WAIT_S = 0.05  # the first retry waits up to this, the next up to twice as long...
MAX_WAIT_S = 1.0


def is_locked(error: BaseException) -> bool:
    """SQLite's lock contention, as opposed to a real failure."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    message = str(error).lower()
    return "locked" in message or "busy" in message


def retry_locked(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, tried up to `ATTEMPTS` times while the file is locked."""
    # The first attempt goes straight in: every outbox job and batch runs through here,
    # and building and entering tenacity's retry loop costs ~20-30 µs a call. Once a lock
    # error is seen (SQLite has already waited out its busy timeout), tenacity takes over
    # for the remaining attempts, with full jitter between them.
    try:
        return fn(*args, **kwargs)
    except sqlite3.OperationalError as error:
        if not is_locked(error):
            raise
    retrying = Retrying(
        retry=retry_if_exception(is_locked),
        stop=stop_after_attempt(ATTEMPTS - 1),
        wait=wait_random_exponential(multiplier=FIRST_WAIT_S, max=MAX_WAIT_S),
        reraise=True,
    )
    return retrying(fn, *args, **kwargs)


__all__ = ["ATTEMPTS", "is_locked", "retry_locked"]
