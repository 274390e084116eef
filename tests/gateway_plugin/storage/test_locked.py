"""gateway_plugin.storage.locked: storage jobs retried while another connection holds the lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway_plugin.storage import locked
from gateway_plugin.storage.locked import ATTEMPTS, is_locked, retry_locked
from gateway_plugin.storage.sqlite_file import BUSY_TIMEOUT_S, open_wal


def test_only_lock_contention_counts_as_locked() -> None:
    assert is_locked(sqlite3.OperationalError("database is locked"))
    assert is_locked(sqlite3.OperationalError("database table is locked"))
    assert is_locked(sqlite3.OperationalError("database is busy"))
    assert not is_locked(sqlite3.OperationalError("no such table: events"))
    assert not is_locked(ValueError("database is locked"))


def test_a_locked_job_is_tried_again_until_it_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locked, "FIRST_WAIT_S", 0.001)
    calls: list[int] = []

    def job(value: int) -> int:
        calls.append(value)
        if len(calls) < ATTEMPTS:
            raise sqlite3.OperationalError("database is locked")
        return value * 2

    assert retry_locked(job, 21) == 42 and len(calls) == ATTEMPTS


def test_a_job_still_locked_after_its_attempts_fails_with_the_lock_error() -> None:
    calls: list[int] = []

    def job() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_locked(job)
    assert len(calls) == ATTEMPTS


def test_any_other_failure_is_not_retried() -> None:
    calls: list[int] = []

    def job() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: events")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_locked(job)
    assert calls == [1]


def test_every_connection_waits_for_the_lock_for_the_busy_timeout(tmp_path: Path) -> None:
    db = open_wal(tmp_path / "x.db", "CREATE TABLE IF NOT EXISTS t (k TEXT);")
    try:
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] == int(BUSY_TIMEOUT_S * 1000)
    finally:
        db.close()
