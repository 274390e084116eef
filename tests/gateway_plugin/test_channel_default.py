"""The default channel across any sequence of directory changes: exactly one default, the
thread rules follow it, and what set_default reports is exactly what changed."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
)

from gateway_plugin.channels.store import ChannelDirectory, ChannelEntry, ChannelError

HOME = "android:default"
Key = tuple[str, str | None]


def _snapshot(directory: ChannelDirectory) -> dict[Key, ChannelEntry]:
    return {(e.chat_id, e.thread_id): e for e in directory.list()}


class DefaultChannelMachine(RuleBasedStateMachine):
    channels = Bundle("channels")
    threads = Bundle("threads")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="hdg-channels-"))
        self.directory = ChannelDirectory(self.tmp / "channels.db")
        self.expected_default = HOME

    @initialize(target=channels)
    def the_home_channel(self) -> str:
        return self.directory.ensure_default().chat_id

    def _entry(self, chat_id: str, thread_id: str | None = None) -> ChannelEntry:
        return self.directory.lane_for(chat_id, thread_id)

    @rule(target=channels, name=st.sampled_from(["Work", "Cron", "Trips"]))
    def create_a_channel(self, name: str) -> str:
        return self.directory.create_channel(name).chat_id

    @rule(target=threads, parent=channels)
    def create_a_thread(self, parent: str) -> object:
        try:
            thread = self.directory.create_thread(parent, "Topic")
        except ChannelError:
            assert parent != self.expected_default, "the default channel refused a thread"
            return multiple()
        assert parent == self.expected_default, "a thread was opened outside the default"
        return (thread.chat_id, thread.thread_id)

    @rule(chat_id=channels)
    def set_the_default(self, chat_id: str) -> None:
        before = _snapshot(self.directory)
        target = before[(chat_id, None)]
        old = before[(self.expected_default, None)]
        try:
            promoted, changed = self.directory.set_default(chat_id)
        except ChannelError:
            assert target.archived or target.automation, "a live channel was refused"
            assert _snapshot(self.directory) == before, "a refused set_default changed data"
            return
        assert not (target.archived or target.automation)
        self.expected_default = chat_id
        after = _snapshot(self.directory)
        really_changed = {k for k in after if after[k] != before[k]}
        assert {(e.chat_id, e.thread_id) for e in changed} == really_changed
        assert all(after[(e.chat_id, e.thread_id)] == e for e in changed)
        assert promoted == after[(chat_id, None)]
        assert promoted.threads_enabled == (old.threads_enabled or target.threads_enabled)

    @rule(on=st.booleans())
    def toggle_threads_on_the_default(self, on: bool) -> None:
        assert self.directory.set_threads_enabled(self.expected_default, on).threads_enabled == on

    @rule(chat_id=channels, on=st.booleans())
    def toggle_threads_anywhere(self, chat_id: str, on: bool) -> None:
        try:
            self.directory.set_threads_enabled(chat_id, on)
        except ChannelError:
            assert chat_id != self.expected_default
            return
        assert chat_id == self.expected_default

    @rule(chat_id=channels, on=st.booleans())
    def mark_automation(self, chat_id: str, on: bool) -> None:
        entry = self._entry(chat_id)
        try:
            self.directory.set_automation(chat_id, on)
        except ChannelError:
            assert entry.archived or entry.is_default or entry.kind == "default"
            return
        assert not entry.is_default

    @rule(chat_id=channels)
    def delete_a_channel(self, chat_id: str) -> None:
        entry = self._entry(chat_id)
        try:
            self.directory.delete(chat_id)
        except ChannelError:
            assert entry.archived or self.directory.is_permanent(entry)
            return
        assert chat_id not in (self.expected_default, HOME)

    @rule(thread=threads)
    def delete_a_thread(self, thread: Key) -> None:
        entry = self._entry(*thread)
        try:
            self.directory.delete(*thread)
        except ChannelError:
            assert entry.archived
            return
        assert self._entry(*thread).archived

    @rule()
    def reopen_the_file(self) -> None:
        self.directory.close()
        self.directory = ChannelDirectory(self.tmp / "channels.db")
        self.directory.ensure_default()

    @invariant()
    def exactly_one_live_default_the_expected_one(self) -> None:
        defaults = [e for e in self.directory.list() if e.is_default]
        assert [e.chat_id for e in defaults] == [self.expected_default]
        [default] = defaults
        assert default.thread_id is None and not default.archived and not default.automation
        assert self.directory.default() == default

    @invariant()
    def only_the_default_has_threads_toggled_on(self) -> None:
        toggled = [e.chat_id for e in self.directory.list() if e.threads_enabled]
        assert set(toggled) <= {self.expected_default}

    @invariant()
    def a_live_thread_has_a_live_channel(self) -> None:
        entries = _snapshot(self.directory)
        for (chat_id, thread_id), entry in entries.items():
            if thread_id is not None and not entry.archived:
                assert not entries[(chat_id, None)].archived

    def teardown(self) -> None:
        self.directory.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


DefaultChannelMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None
)
test_the_default_channel_stays_single_and_consistent = DefaultChannelMachine.TestCase
