"""gateway_plugin.storage.sqlite_file.open_wal: how the plugin's SQLite files are opened."""

from __future__ import annotations

from pathlib import Path

from gateway_plugin.storage.sqlite_file import open_wal

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY);"


def test_a_new_file_gets_its_directory_wal_mode_the_schema_and_the_version(
    tmp_path: Path,
) -> None:
    db = open_wal(tmp_path / "a" / "b" / "x.db", SCHEMA, 3)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
        db.execute("INSERT INTO t VALUES ('k')")  # autocommit: no implicit transaction
        assert not db.in_transaction
    finally:
        db.close()


def test_reopening_keeps_the_rows_and_leaves_the_version_alone_when_none_is_given(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    db = open_wal(path, SCHEMA, 2)
    db.execute("INSERT INTO t VALUES ('kept')")
    db.close()
    again = open_wal(path, SCHEMA)
    try:
        assert again.execute("SELECT k FROM t").fetchall() == [("kept",)]
        assert again.execute("PRAGMA user_version").fetchone()[0] == 2
    finally:
        again.close()
