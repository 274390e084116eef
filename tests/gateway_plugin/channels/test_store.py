from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_plugin.channels.store import (
    SCHEMA_VERSION,
    ChannelDirectory,
    ChannelError,
)
from gateway_plugin.errors import CommandError

HOME = "android:default"


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[ChannelDirectory]:
    d = ChannelDirectory(tmp_path / "android" / "channels.db")
    d.ensure_default()
    yield d
    d.close()


def _code(excinfo: pytest.ExceptionInfo[ChannelError]) -> str:
    return excinfo.value.code


# ---- default channel -------------------------------------------------------------------


def test_the_home_channel_is_created_once_as_the_default(directory: ChannelDirectory) -> None:
    first = directory.get(HOME)
    again = directory.ensure_default()
    assert first is not None and again == first
    assert (first.kind, first.is_default, first.name, first.thread_id) == (
        "default",
        True,
        "Default",
        None,
    )
    assert len(directory.list()) == 1


def test_the_directory_survives_a_reopen_with_the_same_entries(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    d = ChannelDirectory(path)
    d.ensure_default()
    chan = d.create_channel("Cron Reports")
    d.close()
    reopened = ChannelDirectory(path)
    assert reopened.get(chan.chat_id) == chan
    assert reopened.ensure_default().is_default
    reopened.close()


def test_the_schema_is_versioned_and_the_file_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    ChannelDirectory(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_newer_schema_than_supported_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        ChannelDirectory(path)


def test_a_changed_home_id_does_not_create_a_second_default(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    ChannelDirectory(path).ensure_default()
    moved = ChannelDirectory(path, home_chat_id="android:home2")
    home = moved.ensure_default()
    assert home.kind == "default" and not home.is_default
    assert [e.chat_id for e in moved.list() if e.is_default] == [HOME]


# ---- channels --------------------------------------------------------------------------


def test_channel_ids_are_monotonic_and_never_reused_after_deletion(
    directory: ChannelDirectory,
) -> None:
    a = directory.create_channel("A")
    b = directory.create_channel("B")
    directory.delete(b.chat_id)
    c = directory.create_channel("C")
    assert [a.chat_id, b.chat_id, c.chat_id] == [
        "android:chan_1",
        "android:chan_2",
        "android:chan_3",
    ]


def test_a_channel_entry_has_every_field_and_a_32_hex_conversation_id(
    directory: ChannelDirectory,
) -> None:
    chan = directory.create_channel("  Cron Reports  ")
    assert chan.name == "Cron Reports"
    assert (chan.kind, chan.parent_chat_id, chan.is_default, chan.archived) == (
        "channel",
        None,
        False,
        False,
    )
    assert re.fullmatch(r"[0-9a-f]{32}", chan.conversation_id)
    assert chan.created == chan.updated > 0


def test_to_wire_is_json_safe_and_carries_all_fields(directory: ChannelDirectory) -> None:
    chan = directory.create_channel("X")
    wire = chan.to_wire()
    assert json.loads(json.dumps(wire)) == wire
    assert set(wire) == {
        "chat_id",
        "thread_id",
        "name",
        "kind",
        "parent_chat_id",
        "is_default",
        "automation",
        "archived",
        "threads_enabled",
        "name_source",
        "auto",
        "conversation_id",
        "created",
        "updated",
    }


def test_every_lane_has_its_own_stable_conversation_id(directory: ChannelDirectory) -> None:
    chan = directory.create_channel("A")
    thread = directory.create_thread(HOME, "Topic")
    ids = {e.conversation_id for e in directory.list()}
    assert len(ids) == 3
    assert directory.get_by_conversation_id(thread.conversation_id) == thread
    assert directory.get_by_conversation_id(chan.conversation_id) == chan
    assert directory.get_by_conversation_id("0" * 32) is None


@pytest.mark.parametrize("bad", ["", "   ", "x" * 101, "a\nb", "tab\there", "nul\x00", "a\u2028b"])
def test_invalid_names_are_a_bad_request(directory: ChannelDirectory, bad: str) -> None:
    with pytest.raises(ChannelError) as excinfo:
        directory.create_channel(bad)
    assert _code(excinfo) == "bad_request"


def test_names_may_hold_emoji_sequences_and_cjk(directory: ChannelDirectory) -> None:
    name = "👩\u200d💻 工作 " + "x" * 90
    assert directory.create_channel(name).name == name.strip()


def test_channel_errors_are_plugin_command_errors_with_a_code(
    directory: ChannelDirectory,
) -> None:
    with pytest.raises(CommandError) as excinfo:
        directory.lane_for("android:nope", None)
    assert excinfo.value.code == "not_found"


# ---- threads ---------------------------------------------------------------------------


def test_threads_live_only_in_the_default_channel(directory: ChannelDirectory) -> None:
    thread = directory.create_thread(HOME, "Topic")
    assert (thread.chat_id, thread.thread_id, thread.parent_chat_id, thread.kind) == (
        HOME,
        "t_1",
        HOME,
        "thread",
    )
    chan = directory.create_channel("Flat")
    with pytest.raises(ChannelError) as excinfo:
        directory.create_thread(chan.chat_id, "Nope")
    assert _code(excinfo) == "unsupported"


def test_thread_ids_are_monotonic_across_deletions(directory: ChannelDirectory) -> None:
    t1 = directory.create_thread(HOME, "One")
    directory.delete(HOME, t1.thread_id)
    t2 = directory.create_thread(HOME, "Two", auto=True, name_source="derived")
    assert (t1.thread_id, t2.thread_id) == ("t_1", "t_2")
    assert t2.auto and t2.name_source == "derived"


def test_a_thread_under_an_unknown_parent_is_not_found(directory: ChannelDirectory) -> None:
    with pytest.raises(ChannelError) as excinfo:
        directory.create_thread("android:chan_404", "x")
    assert _code(excinfo) == "not_found"


def test_get_and_lane_for_address_flat_lanes_and_threads(directory: ChannelDirectory) -> None:
    thread = directory.create_thread(HOME, "Topic")
    assert directory.get(HOME, thread.thread_id) == thread
    assert directory.lane_for(HOME, thread.thread_id) == thread
    assert directory.get(HOME, "t_999") is None
    assert directory.get(HOME, "") == directory.get(HOME)
    with pytest.raises(ChannelError) as excinfo:
        directory.lane_for(HOME, "t_999")
    assert _code(excinfo) == "not_found"


# ---- renames ---------------------------------------------------------------------------


def test_a_user_rename_is_never_overwritten_by_an_llm_title(directory: ChannelDirectory) -> None:
    thread = directory.create_thread(HOME, "derived words", auto=True, name_source="derived")
    renamed, changed = directory.rename(HOME, thread.thread_id, "My topic", "user")
    assert changed and renamed.name == "My topic" and renamed.name_source == "user"
    after, changed = directory.rename(HOME, thread.thread_id, "Model title", "llm")
    assert not changed and after == renamed


def test_an_llm_title_upgrades_a_derived_name_but_a_derived_one_never_downgrades_it(
    directory: ChannelDirectory,
) -> None:
    thread = directory.create_thread(HOME, "derived", auto=True, name_source="derived")
    titled, changed = directory.rename(HOME, thread.thread_id, "Model title", "llm")
    assert changed and (titled.name, titled.name_source) == ("Model title", "llm")
    assert titled.updated >= thread.updated
    kept, changed = directory.rename(HOME, thread.thread_id, "derived again", "derived")
    assert not changed and kept.name == "Model title"


def test_a_user_may_rename_again_and_a_same_name_rename_changes_nothing(
    directory: ChannelDirectory,
) -> None:
    chan = directory.create_channel("A")
    b, changed = directory.rename(chan.chat_id, None, "B", "user")
    assert changed and b.name == "B"
    same, changed = directory.rename(chan.chat_id, None, "B", "user")
    assert not changed and same == b


def test_renaming_an_archived_lane_is_refused(directory: ChannelDirectory) -> None:
    chan = directory.create_channel("A")
    directory.delete(chan.chat_id)
    with pytest.raises(ChannelError) as excinfo:
        directory.rename(chan.chat_id, None, "B", "user")
    assert _code(excinfo) == "archived"


# ---- default, delete, automation, threads toggle ---------------------------------------


def test_set_default_moves_the_flag_to_exactly_one_channel(directory: ChannelDirectory) -> None:
    chan = directory.create_channel("Work")
    moved, changed = directory.set_default(chan.chat_id)
    assert moved.is_default and directory.default() == moved
    assert [e.chat_id for e in directory.list() if e.is_default] == [chan.chat_id]
    assert [(e.chat_id, e.is_default) for e in changed] == [(HOME, False), (chan.chat_id, True)]
    assert directory.set_default(chan.chat_id) == (moved, [])  # idempotent


def test_the_threads_toggle_moves_with_the_default_and_threads_follow_it(
    directory: ChannelDirectory,
) -> None:
    directory.set_threads_enabled(HOME, True)
    chan = directory.create_channel("Work")
    moved, [old, _] = directory.set_default(chan.chat_id)
    assert moved.threads_enabled and not old.threads_enabled
    assert directory.create_thread(chan.chat_id, "Topic").parent_chat_id == chan.chat_id
    with pytest.raises(ChannelError) as excinfo:
        directory.create_thread(HOME, "Topic")
    assert _code(excinfo) == "unsupported"


def test_the_file_itself_refuses_a_second_default(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    directory = ChannelDirectory(path)
    directory.ensure_default()
    chan = directory.create_channel("Work")
    directory.close()
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE entries SET is_default = 1 WHERE chat_id = ?", (chan.chat_id,))


def test_set_default_refuses_threads_archived_and_automation_channels(
    directory: ChannelDirectory,
) -> None:
    thread = directory.create_thread(HOME, "T")
    with pytest.raises(ChannelError) as excinfo:
        directory.set_default(f"{HOME}:{thread.thread_id}")
    assert _code(excinfo) == "not_found"
    gone = directory.create_channel("Gone")
    directory.delete(gone.chat_id)
    with pytest.raises(ChannelError) as excinfo:
        directory.set_default(gone.chat_id)
    assert _code(excinfo) == "archived"
    bot = directory.create_channel("Bot")
    directory.set_automation(bot.chat_id, True)
    with pytest.raises(ChannelError) as excinfo:
        directory.set_default(bot.chat_id)
    assert _code(excinfo) == "unsupported"


def test_deleting_a_channel_archives_it_and_its_threads_but_keeps_them_listed(
    directory: ChannelDirectory,
) -> None:
    chan = directory.create_channel("Work")
    directory.get_or_create_lane(chan.chat_id, "t_50")
    archived = directory.delete(chan.chat_id)
    assert archived.archived
    lane = directory.get(chan.chat_id, "t_50")
    assert lane is not None and lane.archived
    assert chan.chat_id in {e.chat_id for e in directory.list()}
    assert chan.chat_id not in {e.chat_id for e in directory.list(include_archived=False)}
    with pytest.raises(ChannelError) as excinfo:
        directory.delete(chan.chat_id)
    assert _code(excinfo) == "archived"


def test_deleting_a_thread_archives_only_that_thread(directory: ChannelDirectory) -> None:
    keep = directory.create_thread(HOME, "Keep")
    drop = directory.create_thread(HOME, "Drop")
    assert directory.delete(HOME, drop.thread_id).archived
    assert not directory.lane_for(HOME, keep.thread_id).archived
    assert not directory.lane_for(HOME, None).archived


def test_the_default_and_home_channels_cannot_be_deleted(directory: ChannelDirectory) -> None:
    with pytest.raises(ChannelError) as excinfo:
        directory.delete(HOME)
    assert _code(excinfo) == "unsupported"
    chan = directory.create_channel("New default")
    directory.set_default(chan.chat_id)
    for chat in (chan.chat_id, HOME):
        with pytest.raises(ChannelError) as excinfo:
            directory.delete(chat)
        assert _code(excinfo) == "unsupported"


def test_automation_is_refused_on_the_default_channel_and_on_threads(
    directory: ChannelDirectory,
) -> None:
    thread = directory.create_thread(HOME, "T")
    for chat, thread_id in ((HOME, None), (HOME, thread.thread_id)):
        with pytest.raises(ChannelError) as excinfo:
            directory.set_automation(chat, True, thread_id=thread_id)
        assert _code(excinfo) == "unsupported"


def test_automation_toggles_on_a_channel_and_a_no_op_keeps_updated(
    directory: ChannelDirectory,
) -> None:
    chan = directory.create_channel("Cron")
    on = directory.set_automation(chan.chat_id, True)
    assert on.automation
    assert directory.set_automation(chan.chat_id, True) == on
    assert not directory.set_automation(chan.chat_id, False).automation


def test_threads_can_be_toggled_only_on_the_default_channel(directory: ChannelDirectory) -> None:
    assert directory.set_threads_enabled(HOME, True).threads_enabled
    assert not directory.set_threads_enabled(HOME, False).threads_enabled
    chan = directory.create_channel("Flat")
    with pytest.raises(ChannelError) as excinfo:
        directory.set_threads_enabled(chan.chat_id, True)
    assert _code(excinfo) == "unsupported"


# ---- lookups and targets ---------------------------------------------------------------


def test_find_by_name_is_case_insensitive_and_prefers_live_channels(
    directory: ChannelDirectory,
) -> None:
    old = directory.create_channel("Cron Reports")
    directory.delete(old.chat_id)
    live = directory.create_channel("CRON reports")
    directory.create_thread(HOME, "cron reports")
    found = directory.find_by_name("cron REPORTS")
    assert found is not None and found.chat_id == live.chat_id
    assert directory.find_by_name("nothing") is None
    assert set(directory.chat_ids_matching("Cron Reports")) == {old.chat_id, live.chat_id}


def test_find_by_name_folds_non_ascii_case(directory: ChannelDirectory) -> None:
    chan = directory.create_channel("Ärger Straße")
    found = directory.find_by_name("ärger STRASSE")
    assert found is not None and found.chat_id == chan.chat_id


def test_chat_ids_matching_accepts_ids_and_shorthand(directory: ChannelDirectory) -> None:
    chan = directory.create_channel("Work")
    assert directory.chat_ids_matching(chan.chat_id) == [chan.chat_id]
    assert directory.chat_ids_matching("chan_1") == [chan.chat_id]
    assert directory.chat_ids_matching("default") == [HOME]
    assert directory.chat_ids_matching("nothing") == []


def test_resolve_target_understands_every_target_spelling(directory: ChannelDirectory) -> None:
    directory.create_channel("Spacer")
    chan = directory.create_channel("Cron Reports")
    thread = directory.create_thread(HOME, "Daily")
    lane = directory.get_or_create_lane(chan.chat_id, "t_31")
    cases = {
        "android:chan_2": (chan.chat_id, None),
        "  android:chan_2  ": (chan.chat_id, None),
        "android:chan_2:t_31": (chan.chat_id, lane.thread_id),
        "chan_2": (chan.chat_id, None),
        "chan_2:t_31": (chan.chat_id, "t_31"),
        "default": (HOME, None),
        "android:default": (HOME, None),
        f"android:default:{thread.thread_id}": (HOME, thread.thread_id),
        f"default:{thread.thread_id}": (HOME, thread.thread_id),
        "Cron Reports": (chan.chat_id, None),
        "cron reports": (chan.chat_id, None),
    }
    for target, want in cases.items():
        got = directory.resolve_target(target)
        assert (got.chat_id, got.thread_id) == want, target


@pytest.mark.parametrize(
    "target", ["", "android:chan_99", "android:default:t_404", "chan_2:t_1", "No such channel"]
)
def test_resolve_target_never_creates_and_reports_unknown_targets(
    directory: ChannelDirectory, target: str
) -> None:
    directory.create_channel("A")
    directory.create_channel("B")
    before = directory.list()
    with pytest.raises(ChannelError) as excinfo:
        directory.resolve_target(target)
    assert _code(excinfo) == "not_found"
    assert directory.list() == before


def test_resolve_target_refuses_archived_channels_and_threads(
    directory: ChannelDirectory,
) -> None:
    chan = directory.create_channel("Old")
    thread = directory.create_thread(HOME, "Old topic")
    directory.delete(chan.chat_id)
    directory.delete(HOME, thread.thread_id)
    for target in (chan.chat_id, "Old", f"{HOME}:{thread.thread_id}"):
        with pytest.raises(ChannelError) as excinfo:
            directory.resolve_target(target)
        assert _code(excinfo) == "archived", target


# ---- lanes Hermes invents --------------------------------------------------------------


def test_get_or_create_lane_records_unknown_lanes_once(directory: ChannelDirectory) -> None:
    lane = directory.get_or_create_lane("android:chan_7", "t_31")
    assert (lane.kind, lane.parent_chat_id, lane.name_source) == (
        "thread",
        "android:chan_7",
        "derived",
    )
    chat = directory.get("android:chan_7")
    assert chat is not None and chat.kind == "channel" and chat.name == "chan_7"
    assert directory.get_or_create_lane("android:chan_7", "t_31") == lane
    assert directory.get_or_create_lane(HOME, None) == directory.get(HOME)


def test_ids_seen_from_hermes_are_never_minted_again(directory: ChannelDirectory) -> None:
    directory.get_or_create_lane("android:chan_7", "t_31")
    assert directory.create_channel("Next").chat_id == "android:chan_8"
    assert directory.create_thread(HOME, "Next").thread_id == "t_32"


def test_get_or_create_lane_for_the_home_chat_creates_the_default(tmp_path: Path) -> None:
    d = ChannelDirectory(tmp_path / "channels.db")
    home = d.get_or_create_lane(HOME, None)
    assert home.kind == "default" and home.is_default
    d.close()


def test_concurrent_creations_from_many_threads_mint_unique_ids(
    directory: ChannelDirectory,
) -> None:
    minted: list[str] = []

    def worker(n: int) -> None:
        for i in range(20):
            minted.append(directory.create_channel(f"c{n}-{i}").chat_id)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(minted) == len(set(minted)) == 160
