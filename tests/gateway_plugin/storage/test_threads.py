"""The plugin's storage threads: a file locked too long is a clear error, never a hang."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway_plugin.storage.thread import StorageClosed
from gateway_plugin.storage.threads import Storage, StorageBusy, run_or_busy


async def test_a_file_locked_past_its_busy_timeout_answers_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=0.2)
    storage = Storage()
    try:
        with pytest.raises(StorageBusy) as caught:
            await run_or_busy(storage.channels, writer.execute, "INSERT INTO t VALUES (1)")
        assert caught.value.code == "unavailable" and "channels.db" in caught.value.message
        holder.execute("COMMIT")
        await run_or_busy(storage.channels, writer.execute, "INSERT INTO t VALUES (2)")
        assert holder.execute("SELECT x FROM t").fetchall() == [(2,)]
    finally:
        storage.stop()
        writer.close()
        holder.close()


async def test_other_sqlite_errors_pass_through_unchanged(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.db", check_same_thread=False)
    storage = Storage()
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await run_or_busy(storage.reads, db.execute, "SELECT * FROM missing")
    finally:
        storage.stop()
        db.close()


async def test_a_stopped_storage_refuses_every_file() -> None:
    storage = Storage()
    storage.stop()
    for executor in storage.all():
        with pytest.raises(StorageClosed):
            await executor.run(lambda: None)
