"""The channel directory answers reads from memory: its snapshot follows this process's
writes at once and another process's after a refresh."""

from __future__ import annotations

from pathlib import Path

from gateway_plugin.channels.store import ChannelDirectory

HOME = "android:default"


def test_reads_are_answered_without_the_file_once_loaded(tmp_path: Path) -> None:
    directory = ChannelDirectory(tmp_path / "channels.db", refresh_on_read=False)
    directory.ensure_default()
    work = directory.create_channel("Work")
    directory.close()  # no connection left: every read below comes from the snapshot
    assert directory.get(work.chat_id) == work
    assert directory.get_by_conversation_id(work.conversation_id) == work
    assert directory.find_by_name("work") == work
    assert directory.resolve_target("Work") == work
    assert directory.default().chat_id == HOME
    assert [e.chat_id for e in directory.list()] == [HOME, work.chat_id]


def test_a_write_shows_in_the_snapshot_as_soon_as_it_commits(tmp_path: Path) -> None:
    directory = ChannelDirectory(tmp_path / "channels.db", refresh_on_read=False)
    try:
        directory.ensure_default()
        thread = directory.create_thread(HOME, "Plans")
        renamed, changed = directory.rename(HOME, thread.thread_id, "Holiday plans", "user")
        assert changed and directory.get(HOME, thread.thread_id) == renamed
        directory.delete(HOME, thread.thread_id)
        archived = directory.get(HOME, thread.thread_id)
        assert archived is not None and archived.archived
    finally:
        directory.close()


def test_another_process_write_shows_after_a_refresh_only(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    ours = ChannelDirectory(path, refresh_on_read=False)
    theirs = ChannelDirectory(path)  # a CLI process: reads check the file itself
    try:
        ours.ensure_default()
        assert theirs.get(HOME) is not None
        made = theirs.create_channel("Cron Reports")
        assert ours.get(made.chat_id) is None
        assert ours.refresh() is True
        assert ours.get(made.chat_id) == made
        assert ours.refresh() is False  # nothing changed since
    finally:
        ours.close()
        theirs.close()


def test_name_lookups_prefer_live_channels_then_the_oldest(tmp_path: Path) -> None:
    directory = ChannelDirectory(tmp_path / "channels.db")
    try:
        directory.ensure_default()
        old = directory.create_channel("Reports")
        directory.delete(old.chat_id)
        live = directory.create_channel("reports")
        later = directory.create_channel("REPORTS")
        assert directory.find_by_name("Reports") == live
        assert directory.chat_ids_matching("reports") == [live.chat_id, later.chat_id, old.chat_id]
    finally:
        directory.close()
