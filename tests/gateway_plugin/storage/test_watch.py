"""One watch thread notices other processes' writes to every watched file, and a file
this process is using is simply asked again later."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from gateway_plugin.channels.store import ChannelDirectory
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.storage.watch import FileWatch


async def test_a_change_calls_on_change_on_the_loop_that_watched() -> None:
    watch = FileWatch(interval_s=0.01)
    changed = asyncio.Event()
    threads: list[str] = []
    answers = iter([False, False, True])

    def on_change() -> None:
        threads.append(threading.current_thread().name)
        changed.set()

    entry = watch.watch("x.db", lambda: next(answers, False), on_change)
    try:
        await asyncio.wait_for(changed.wait(), 5)
    finally:
        watch.unwatch(entry)
    assert threads == [threading.current_thread().name]


async def test_the_thread_ends_with_the_last_file_and_starts_again_with_a_new_one() -> None:
    watch = FileWatch(interval_s=0.01)
    first = watch.watch("a.db", lambda: False, lambda: None)
    second = watch.watch("b.db", lambda: False, lambda: None)
    assert [t.name for t in threading.enumerate()].count("hdg-file-watch") >= 1
    watch.unwatch(first)
    assert watch.watching() == 1
    watch.unwatch(second)
    assert watch.watching() == 0
    for _ in range(200):
        if "hdg-file-watch" not in [t.name for t in threading.enumerate()]:
            break
        await asyncio.sleep(0.01)
    seen = asyncio.Event()
    third = watch.watch("c.db", lambda: True, seen.set)
    try:
        await asyncio.wait_for(seen.wait(), 5)
    finally:
        watch.unwatch(third)


async def test_a_failing_check_is_asked_again_and_others_still_are() -> None:
    watch = FileWatch(interval_s=0.01)
    calls = {"bad": 0}
    good, asked_twice = asyncio.Event(), threading.Event()

    def bad() -> bool:
        calls["bad"] += 1
        if calls["bad"] >= 2:
            asked_twice.set()
        raise sqlite3.OperationalError("disk I/O error")

    failing = watch.watch("bad.db", bad, lambda: None)
    working = watch.watch("good.db", lambda: True, good.set)
    try:
        await asyncio.wait_for(good.wait(), 5)
        assert await asyncio.to_thread(asked_twice.wait, 5)
    finally:
        watch.unwatch(failing)
        watch.unwatch(working)


async def test_an_unwatched_file_no_longer_calls_on_change() -> None:
    watch = FileWatch(interval_s=0.01)
    calls: list[int] = []
    entry = watch.watch("x.db", lambda: True, lambda: calls.append(1))
    watch.unwatch(entry)
    await asyncio.sleep(0.1)
    assert calls == []


def test_the_outbox_notices_another_connections_commit_once(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.db")
    try:
        assert outbox.changed_elsewhere() is False
        outbox.append([{"type": "message.delta", "message_id": "ours", "text": "x"}])
        assert outbox.changed_elsewhere() is False  # our own commits are not news
        other = Outbox(tmp_path / "outbox.db")  # a CLI cron run
        other.append([{"type": "message.delta", "message_id": "theirs", "text": "y"}])
        other.close()
        assert outbox.changed_elsewhere() is True
        assert outbox.changed_elsewhere() is False
    finally:
        outbox.close()


def test_a_busy_outbox_is_not_waited_for(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.db")
    try:
        other = Outbox(tmp_path / "outbox.db")
        other.append([{"type": "message.delta", "message_id": "theirs", "text": "y"}])
        other.close()
        with outbox._lock:  # its storage thread is in a job
            assert outbox.changed_elsewhere() is False
        assert outbox.changed_elsewhere() is True  # asked again: still news
    finally:
        outbox.close()


def test_the_channel_directory_says_changed_until_it_is_refreshed(tmp_path: Path) -> None:
    path = tmp_path / "channels.db"
    ours = ChannelDirectory(path, refresh_on_read=False)
    theirs = ChannelDirectory(path, refresh_on_read=False)
    try:
        assert ours.changed_elsewhere() is False
        theirs.create_channel("Nightly")
        assert ours.changed_elsewhere() is True
        assert ours.changed_elsewhere() is True  # a check alone does not reload
        assert ours.refresh() is True
        assert ours.changed_elsewhere() is False
        assert any(e.name == "Nightly" for e in ours.list())
    finally:
        ours.close()
        theirs.close()
